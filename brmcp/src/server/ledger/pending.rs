//! A pending call of the journal: found, and closed completed or refunded. A keyed
//! call closed with an outcome keeps it for its replay window, within the caller's
//! bounds (`retention`).

use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{
    CallId, CallState, LedgerError, MAX_OUTCOME_BYTES, OUTCOME_TTL_SECS, add_balance, amount,
    atoms_to_matoms,
};

/// A journal entry as the money paths need it.
pub(super) struct Found {
    pub(super) id: CallId,
    pub(super) caller: String,
    pub(super) price_atoms: u64,
    pub(super) state: CallState,
    pub(super) keyed: bool,
}

impl Found {
    pub(super) fn price_matoms(&self) -> Result<u64, LedgerError> {
        atoms_to_matoms(self.price_atoms).ok_or(LedgerError::AmountOutOfRange)
    }
}

pub(super) fn found(row: &Row<'_>, id: CallId) -> rusqlite::Result<Found> {
    Ok(Found {
        id,
        caller: row.get(0)?,
        price_atoms: amount(row, 1)?,
        state: CallState::from_sql(row, 2)?,
        keyed: row.get(3)?,
    })
}

pub(super) fn lookup(conn: &Connection, call: CallId) -> Result<Found, LedgerError> {
    conn.prepare_cached(concat!(found_columns!(), " FROM calls WHERE id = ?1"))?
        .query_row([call.get()], |row| found(row, call))
        .optional()?
        .ok_or(LedgerError::UnknownCall(call))
}

/// Pays a pending call's price back to its caller and closes it refunded.
pub(super) fn refund_pending(
    conn: &Connection,
    call: &Found,
    reason: &str,
    outcome: Option<&str>,
    now: UnixTime,
) -> Result<Option<usize>, LedgerError> {
    add_balance(conn, &call.caller, call.price_matoms()?)?;
    close(conn, call, CallState::Refunded, Some(reason), outcome, now)
}

pub(super) fn lookup_pending(conn: &Connection, call: CallId) -> Result<Found, LedgerError> {
    let found = lookup(conn, call)?;
    if found.state == CallState::Pending {
        Ok(found)
    } else {
        Err(LedgerError::NotPending {
            call,
            state: found.state,
        })
    }
}

/// Finish a pending call. A keyed call with an outcome keeps its key for
/// [`OUTCOME_TTL_SECS`] (the outcome itself only up to [`MAX_OUTCOME_BYTES`]); a keyed
/// call without one releases it. An unkeyed call's outcome is not stored: nothing could
/// ask for it again. Returns the bytes of the outcome kept, if one was: the caller bounds
/// the caller's outcomes (`OutcomeBytes::bound`) in the same transaction.
pub(super) fn close(
    conn: &Connection,
    found: &Found,
    state: CallState,
    reason: Option<&str>,
    outcome: Option<&str>,
    now: UnixTime,
) -> Result<Option<usize>, LedgerError> {
    let (key_held, kept, replay_until) = match outcome {
        Some(outcome) if found.keyed => (
            true,
            (outcome.len() <= MAX_OUTCOME_BYTES).then_some(outcome),
            Some(now.saturating_add(OUTCOME_TTL_SECS).secs()),
        ),
        _ => (false, None, None),
    };
    conn.prepare_cached(
        "UPDATE calls SET state = ?2, reason = ?3, finished_at = ?4, key_held = ?5, \
         outcome = ?6, replay_until = ?7 WHERE id = ?1",
    )?
    .execute(params![
        found.id.get(),
        state.as_str(),
        reason,
        now.secs(),
        key_held,
        kept,
        replay_until
    ])?;
    Ok(kept.map(str::len))
}
