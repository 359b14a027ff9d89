//! A pending call of the journal: found, and closed completed or refunded. A keyed
//! call closed with an outcome keeps it for its replay window, within the caller's
//! bounds ([`MAX_OUTCOME_BYTES_PER_CALLER`], [`MAX_OUTCOMES_PER_CALLER`]).

use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{
    CallId, CallState, LedgerError, MAX_OUTCOME_BYTES, OUTCOME_TTL_SECS, add_balance, amount,
    atoms_to_matoms, sql_limit,
};

/// Bytes of replayable outcomes the journal keeps for one caller: 16 MiB, sixteen
/// maximal outcomes ([`MAX_OUTCOME_BYTES`]). Outcomes are kept for their replay window
/// ([`OUTCOME_TTL_SECS`]), so without a bound one caller at the rate limit holds
/// gigabytes of the operator's disk. Past it the caller's oldest outcome goes first; its
/// key stays held, so a retry is answered "outcome not retained" instead of running and
/// paying again.
pub const MAX_OUTCOME_BYTES_PER_CALLER: usize = 16 << 20;

/// Replayable outcomes the journal keeps for one caller: 1024, more than a caller at
/// the default rate limit finishes in one replay window. Bounds the rows the per-caller
/// byte check reads.
pub(crate) const MAX_OUTCOMES_PER_CALLER: usize = 1024;

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
    conn.query_row(
        concat!(found_columns!(), " FROM calls WHERE id = ?1"),
        [call.get()],
        |row| found(row, call),
    )
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
) -> Result<(), LedgerError> {
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
/// ask for it again.
pub(super) fn close(
    conn: &Connection,
    found: &Found,
    state: CallState,
    reason: Option<&str>,
    outcome: Option<&str>,
    now: UnixTime,
) -> Result<(), LedgerError> {
    let (key_held, kept, replay_until) = match outcome {
        Some(outcome) if found.keyed => (
            true,
            (outcome.len() <= MAX_OUTCOME_BYTES).then_some(outcome),
            Some(now.saturating_add(OUTCOME_TTL_SECS).secs()),
        ),
        _ => (false, None, None),
    };
    conn.execute(
        "UPDATE calls SET state = ?2, reason = ?3, finished_at = ?4, key_held = ?5, \
         outcome = ?6, replay_until = ?7 WHERE id = ?1",
        params![
            found.id.get(),
            state.as_str(),
            reason,
            now.secs(),
            key_held,
            kept,
            replay_until
        ],
    )?;
    if kept.is_some() {
        bound_outcomes(conn, &found.caller)?;
    }
    Ok(())
}

/// Drops `caller`'s oldest replayable outcomes past [`MAX_OUTCOME_BYTES_PER_CALLER`]
/// or [`MAX_OUTCOMES_PER_CALLER`]; their keys stay held. Returns how many.
fn bound_outcomes(conn: &Connection, caller: &str) -> Result<usize, LedgerError> {
    Ok(conn.execute(
        "UPDATE calls SET outcome = NULL WHERE id IN ( \
           SELECT id FROM ( \
             SELECT id, \
               SUM(length(CAST(outcome AS BLOB))) OVER newest AS bytes, \
               ROW_NUMBER() OVER newest AS n \
             FROM calls \
             WHERE caller = ?1 AND key_held = 1 AND outcome IS NOT NULL \
             WINDOW newest AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) \
           WHERE bytes > ?2 OR n > ?3)",
        params![
            caller,
            sql_limit(MAX_OUTCOME_BYTES_PER_CALLER),
            sql_limit(MAX_OUTCOMES_PER_CALLER),
        ],
    )?)
}
