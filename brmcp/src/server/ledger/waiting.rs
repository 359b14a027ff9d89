//! Credit that belongs to the call that paid for it.
//!
//! A keyed call refused `payment_required` waits (a `waiting` row: caller, key, tool,
//! arguments, price). A tip from that caller is credited to its balance and, in the same
//! transaction, reserved for its waiting calls, oldest first, each whose price the
//! unreserved balance still covers. Reserved credit stays in the caller's balance (so
//! every total that sums balances still counts it) but only the call it is reserved for
//! may spend it: any other charge sees the balance less every reservation. The reserved
//! call's retry under its key is charged from its reservation (and the unreserved rest,
//! should its price have grown), and its row goes.
//!
//! Bounded: at most [`MAX_WAITING_PER_CALLER`] waiting calls per caller (past it a
//! refused call does not wait, and pays from the unreserved balance as any call does),
//! and a row lives [`RESERVATION_WAIT_SECS`] from its refusal or its reservation, after
//! which it goes and its credit is the caller's to spend again.

use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, params};

use super::{LedgerError, amount, amount_to_sql, balance, sql_limit};
use crate::server::billing::Keyed;
use crate::server::call_key::OUTCOME_TTL_SECS;
use crate::server::money::atoms_to_matoms;

/// Calls of one caller that may wait for a tip at once: 64, twice what a caller at the
/// default rate limit (30 a minute) starts in a minute, so a burst of paid calls is
/// covered; bounds the rows a caller's refused calls add.
pub const MAX_WAITING_PER_CALLER: usize = 64;

/// How long a waiting call, and credit reserved for it, waits for its retry, in seconds:
/// the call key's replay window ([`OUTCOME_TTL_SECS`]), as long as a client retries a
/// key. Then the row goes and its credit is the caller's to spend on any call.
pub const RESERVATION_WAIT_SECS: u64 = OUTCOME_TTL_SECS;

/// A waiting call of a caller, as a charge under its key sees it.
pub(super) struct Waiting {
    /// Whether it waits for this very call (same tool and arguments).
    pub(super) same_call: bool,
    /// Milliatoms reserved for it (0 until a tip covered it).
    pub(super) reserved_matoms: u64,
}

/// Drops the waiting rows whose time ran out at `now`: their credit is unreserved.
pub(super) fn expire(conn: &Connection, now: UnixTime) -> Result<usize, LedgerError> {
    Ok(conn.execute("DELETE FROM waiting WHERE expires_at <= ?1", [now.secs()])?)
}

/// Milliatoms of `caller`'s balance reserved for its waiting calls.
pub(super) fn reserved(conn: &Connection, caller: &str) -> Result<u64, LedgerError> {
    Ok(conn.query_row(
        "SELECT COALESCE(SUM(reserved_matoms), 0) FROM waiting WHERE caller = ?1",
        [caller],
        |r| amount(r, 0),
    )?)
}

/// What `caller` may spend on a call that is not reserved for: its balance less its
/// reservations.
pub(super) fn spendable(conn: &Connection, caller: &str) -> Result<u64, LedgerError> {
    Ok(balance(conn, caller)?.saturating_sub(reserved(conn, caller)?))
}

/// The waiting row under `keyed`'s key, if any.
pub(super) fn find(
    conn: &Connection,
    caller: &str,
    tool: &str,
    keyed: Keyed<'_>,
) -> Result<Option<Waiting>, LedgerError> {
    Ok(conn
        .query_row(
            "SELECT tool = ?3 AND args_hash = ?4, reserved_matoms FROM waiting \
             WHERE caller = ?1 AND call_key = ?2",
            params![
                caller,
                keyed.key.as_str(),
                tool,
                keyed.args.as_bytes().as_slice()
            ],
            |r| {
                Ok(Waiting {
                    same_call: r.get(0)?,
                    reserved_matoms: amount(r, 1)?,
                })
            },
        )
        .optional()?)
}

/// Forgets the waiting row under `key` (its call was charged; what was reserved for it
/// was spent with the charge, or is unreserved).
pub(super) fn remove(conn: &Connection, caller: &str, key: &str) -> Result<(), LedgerError> {
    conn.execute(
        "DELETE FROM waiting WHERE caller = ?1 AND call_key = ?2",
        params![caller, key],
    )?;
    Ok(())
}

/// Records that the keyed call was refused for payment and waits for a tip. A call
/// already waiting under the key keeps its place; one waiting under the key for another
/// call (the key was reused) is replaced, its reservation released. Past
/// [`MAX_WAITING_PER_CALLER`] nothing is recorded.
pub(super) fn wait(
    conn: &Connection,
    caller: &str,
    tool: &str,
    keyed: Keyed<'_>,
    price_atoms: u64,
    now: UnixTime,
) -> Result<(), LedgerError> {
    match find(conn, caller, tool, keyed)? {
        Some(Waiting {
            same_call: true, ..
        }) => return Ok(()),
        Some(_) => remove(conn, caller, keyed.key.as_str())?,
        None => {}
    }
    let count: i64 = conn.query_row(
        "SELECT COUNT(*) FROM waiting WHERE caller = ?1",
        [caller],
        |r| r.get(0),
    )?;
    if count >= sql_limit(MAX_WAITING_PER_CALLER) {
        return Ok(());
    }
    conn.execute(
        "INSERT INTO waiting \
         (caller, call_key, tool, args_hash, price_atoms, refused_at, expires_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            caller,
            keyed.key.as_str(),
            tool,
            keyed.args.as_bytes().as_slice(),
            amount_to_sql(price_atoms)?,
            now.secs(),
            now.saturating_add(RESERVATION_WAIT_SECS).secs(),
        ],
    )?;
    Ok(())
}

/// Reserves `caller`'s unreserved balance for its waiting calls that hold no
/// reservation yet, oldest first, each whose price it still covers. Part of the tip's
/// transaction. Returns how many calls it reserved for.
pub(super) fn reserve(
    conn: &Connection,
    caller: &str,
    now: UnixTime,
) -> Result<usize, LedgerError> {
    let mut left = spendable(conn, caller)?;
    let unreserved: Vec<(i64, u64)> = {
        let mut stmt = conn.prepare(
            "SELECT id, price_atoms FROM waiting \
             WHERE caller = ?1 AND reserved_matoms = 0 ORDER BY id",
        )?;
        stmt.query_map([caller], |r| Ok((r.get(0)?, amount(r, 1)?)))?
            .collect::<Result<_, _>>()?
    };
    let mut reserved = 0;
    for (id, price_atoms) in unreserved {
        let price = atoms_to_matoms(price_atoms).ok_or(LedgerError::AmountOutOfRange)?;
        // A free call needs no credit; its retry runs anyway.
        if price == 0 || price > left {
            continue;
        }
        left -= price;
        conn.execute(
            "UPDATE waiting SET reserved_matoms = ?2, expires_at = ?3 WHERE id = ?1",
            params![
                id,
                amount_to_sql(price)?,
                now.saturating_add(RESERVATION_WAIT_SECS).secs()
            ],
        )?;
        reserved += 1;
    }
    Ok(reserved)
}
