//! Credit that belongs to the call that paid for it.
//!
//! A keyed call refused `payment_required` waits (a `waiting` row: caller, key, tool,
//! arguments, price). A tip from that caller is credited to its balance and, in the same
//! transaction, reserved for its waiting calls: the oldest whose price is the tip's
//! amount first, then oldest first, each whose price the unreserved balance still
//! covers. Reserved credit stays in the caller's balance (so
//! every total that sums balances still counts it) but only the call it is reserved for
//! may spend it: any other charge sees the balance less every reservation. The reserved
//! call's retry under its key is charged from its reservation (and the unreserved rest,
//! should its price have grown), and its row goes.
//!
//! Tips carry no call id, so this is a guess: a bridge may pay for some of its
//! refused calls and not others (a cap, a denied approval). A waiting call refused
//! again after a reservation was made for another call (that call had a full retry
//! round of this one to collect it) may take that reservation over when it is short;
//! the call it was made for waits again, unreserved, for the next tip. So every paid
//! call that retries is served, and credit never waits for a call that is not paid for,
//! while a call that merely arrives before the reserved one's retry does not take it.
//! Calls that do not wait (new keys, unkeyed calls) never spend reserved credit. A
//! keyed call cut after its charge (the harness stopping, or its process dying) is
//! refunded into a reservation for its retry under the key, which its caller makes;
//! else the next call to arrive would run on the credit the cut call's payer paid. A
//! waiting call refused before its charge for a reason other than payment (its price
//! not known, the bot stopping) lets go of its reservation: its caller's retry may
//! come under another key.
//!
//! Bounded: at most [`MAX_WAITING_PER_CALLER`] waiting calls per caller (past it a
//! refused call does not wait, and pays from the unreserved balance as any call does),
//! and a row lives [`RESERVATION_WAIT_SECS`] from its refusal or its reservation, after
//! which it goes and its credit is the caller's to spend again.

use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, params};

use brmcp_adapters::PeerId;

use super::{Ledger, LedgerError, amount, amount_to_sql, balance, sql_limit};
#[cfg(doc)]
use crate::server::billing::Billing;
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
    /// Its latest refusal, in the caller's event order.
    pub(super) refused_seq: i64,
}

/// The caller's next event number (refusals and reservations are ordered by it).
fn next_seq(conn: &Connection, caller: &str) -> Result<i64, LedgerError> {
    Ok(conn
        .prepare_cached(
            "SELECT COALESCE(MAX(MAX(refused_seq, reserved_seq)), 0) + 1 FROM waiting \
         WHERE caller = ?1",
        )?
        .query_row([caller], |r| r.get(0))?)
}

/// Drops the waiting rows whose time ran out at `now`: their credit is unreserved.
pub(super) fn expire(conn: &Connection, now: UnixTime) -> Result<usize, LedgerError> {
    Ok(conn
        .prepare_cached("DELETE FROM waiting WHERE expires_at <= ?1")?
        .execute([now.secs()])?)
}

/// Milliatoms of `caller`'s balance reserved for its waiting calls.
pub(super) fn reserved(conn: &Connection, caller: &str) -> Result<u64, LedgerError> {
    Ok(conn
        .prepare_cached("SELECT COALESCE(SUM(reserved_matoms), 0) FROM waiting WHERE caller = ?1")?
        .query_row([caller], |r| amount(r, 0))?)
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
        .prepare_cached(
            "SELECT tool = ?3 AND args_hash = ?4, reserved_matoms, refused_seq FROM waiting \
             WHERE caller = ?1 AND call_key = ?2",
        )?
        .query_row(
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
                    refused_seq: r.get(2)?,
                })
            },
        )
        .optional()?)
}

/// Forgets the waiting row under `key` (its call was charged; what was reserved for it
/// was spent with the charge, or is unreserved).
pub(super) fn remove(conn: &Connection, caller: &str, key: &str) -> Result<(), LedgerError> {
    conn.prepare_cached("DELETE FROM waiting WHERE caller = ?1 AND call_key = ?2")?
        .execute(params![caller, key])?;
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
    let seq = next_seq(conn, caller)?;
    match find(conn, caller, tool, keyed)? {
        Some(Waiting {
            same_call: true, ..
        }) => {
            // Keeps its place (its id); only the order of its refusal moves.
            conn.prepare_cached(
                "UPDATE waiting SET refused_seq = ?3 WHERE caller = ?1 AND call_key = ?2",
            )?
            .execute(params![caller, keyed.key.as_str(), seq])?;
            return Ok(());
        }
        Some(_) => remove(conn, caller, keyed.key.as_str())?,
        None => {}
    }
    let row = Row {
        caller,
        key: keyed.key.as_str(),
        tool,
        args: keyed.args.as_bytes().as_slice(),
        price_atoms,
    };
    insert(conn, &row, now, seq, 0)
}

/// A waiting row to insert.
struct Row<'a> {
    caller: &'a str,
    key: &'a str,
    tool: &'a str,
    args: &'a [u8],
    price_atoms: u64,
}

/// Inserts `row`, refused at `seq` and holding `reserved_matoms` (reserved at `seq` too
/// when any), waiting [`RESERVATION_WAIT_SECS`] from `now`; nothing past
/// [`MAX_WAITING_PER_CALLER`] rows of its caller.
fn insert(
    conn: &Connection,
    row: &Row<'_>,
    now: UnixTime,
    seq: i64,
    reserved_matoms: u64,
) -> Result<(), LedgerError> {
    let count: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM waiting WHERE caller = ?1")?
        .query_row([row.caller], |r| r.get(0))?;
    if count >= sql_limit(MAX_WAITING_PER_CALLER) {
        return Ok(());
    }
    conn.prepare_cached(
        "INSERT INTO waiting \
         (caller, call_key, tool, args_hash, price_atoms, refused_at, expires_at, \
          refused_seq, reserved_matoms, reserved_seq) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?
    .execute(params![
        row.caller,
        row.key,
        row.tool,
        row.args,
        amount_to_sql(row.price_atoms)?,
        now.secs(),
        now.saturating_add(RESERVATION_WAIT_SECS).secs(),
        seq,
        amount_to_sql(reserved_matoms)?,
        if reserved_matoms > 0 { seq } else { 0 },
    ])?;
    Ok(())
}

/// Keeps the credit of keyed call `call`, refunded because it was cut (the harness
/// stopping, or a process that died mid-call), reserved for its retry under its key:
/// the caller retries a cut call, and any other call charged from that credit first
/// would be running on the credit the cut call's payer paid. A row the key had goes;
/// past [`MAX_WAITING_PER_CALLER`], or for a free or unkeyed call, nothing is kept.
/// Part of the refund's transaction.
pub(super) fn hold_for_retry(
    conn: &Connection,
    call: super::CallId,
    now: UnixTime,
) -> Result<(), LedgerError> {
    /// The cut call, as its hold needs it.
    struct Cut {
        caller: String,
        key: String,
        tool: String,
        args: Vec<u8>,
    }
    let found = conn
        .prepare_cached(
            "SELECT caller, call_key, tool, args_hash, price_atoms FROM calls \
             WHERE id = ?1 AND call_key IS NOT NULL AND args_hash IS NOT NULL",
        )?
        .query_row([call.get()], |r| {
            let cut = Cut {
                caller: r.get(0)?,
                key: r.get(1)?,
                tool: r.get(2)?,
                args: r.get(3)?,
            };
            Ok((cut, amount(r, 4)?))
        })
        .optional()?;
    let Some((
        Cut {
            caller,
            key,
            tool,
            args,
        },
        price_atoms,
    )) = found
    else {
        return Ok(());
    };
    let price = atoms_to_matoms(price_atoms).ok_or(LedgerError::AmountOutOfRange)?;
    if price == 0 {
        return Ok(());
    }
    remove(conn, &caller, &key)?;
    let seq = next_seq(conn, &caller)?;
    let row = Row {
        caller: &caller,
        key: &key,
        tool: &tool,
        args: &args,
        price_atoms,
    };
    insert(conn, &row, now, seq, price)
}

/// For a waiting call `key` refused last at `refused_seq` and `need` milliatoms short:
/// takes over the oldest reservation of another waiting call made before that refusal
/// that covers `need`, which waits again unreserved. Returns the milliatoms it freed.
pub(super) fn take_over(
    conn: &Connection,
    caller: &str,
    key: &str,
    need: u64,
    refused_seq: i64,
) -> Result<Option<u64>, LedgerError> {
    let found: Option<(i64, u64)> = conn
        .prepare_cached(
            "SELECT id, reserved_matoms FROM waiting \
             WHERE caller = ?1 AND call_key != ?2 AND reserved_matoms >= ?3 \
             AND reserved_matoms > 0 AND reserved_seq < ?4 \
             ORDER BY reserved_seq, id LIMIT 1",
        )?
        .query_row(
            params![caller, key, amount_to_sql(need)?, refused_seq],
            |r| Ok((r.get(0)?, amount(r, 1)?)),
        )
        .optional()?;
    let Some((id, taken)) = found else {
        return Ok(None);
    };
    conn.prepare_cached("UPDATE waiting SET reserved_matoms = 0, reserved_seq = 0 WHERE id = ?1")?
        .execute([id])?;
    tracing::info!(%caller, "a paid call's retry took over credit its reserved call did not collect");
    Ok(Some(taken))
}

/// Reserves `caller`'s unreserved balance for its waiting calls that hold no
/// reservation yet, oldest first, each whose price it still covers; first, though, the
/// oldest whose price is the tip's `tip_matoms` exactly, the likeliest call that tip
/// paid for (a payer pays a call's price when it holds nothing there; its calls of
/// other prices, and its agents', may wait meanwhile). Part of the tip's transaction.
/// Returns how many calls it reserved for.
pub(super) fn reserve(
    conn: &Connection,
    caller: &str,
    tip_matoms: u64,
    now: UnixTime,
) -> Result<usize, LedgerError> {
    let seq = next_seq(conn, caller)?;
    let mut left = spendable(conn, caller)?;
    let mut unreserved: Vec<(i64, u64)> = {
        let mut stmt = conn.prepare(
            "SELECT id, price_atoms FROM waiting \
             WHERE caller = ?1 AND reserved_matoms = 0 ORDER BY id",
        )?;
        stmt.query_map([caller], |r| Ok((r.get(0)?, amount(r, 1)?)))?
            .collect::<Result<_, _>>()?
    };
    if let Some(exact) = unreserved
        .iter()
        .position(|(_, atoms)| atoms_to_matoms(*atoms) == Some(tip_matoms))
    {
        let row = unreserved.remove(exact);
        unreserved.insert(0, row);
    }
    let mut reserved = 0;
    for (id, price_atoms) in unreserved {
        let price = atoms_to_matoms(price_atoms).ok_or(LedgerError::AmountOutOfRange)?;
        // A free call needs no credit; its retry runs anyway.
        if price == 0 || price > left {
            continue;
        }
        left -= price;
        conn.prepare_cached(
            "UPDATE waiting SET reserved_matoms = ?2, expires_at = ?3, reserved_seq = ?4 \
             WHERE id = ?1",
        )?
        .execute(params![
            id,
            amount_to_sql(price)?,
            now.saturating_add(RESERVATION_WAIT_SECS).secs(),
            seq
        ])?;
        reserved += 1;
    }
    Ok(reserved)
}

impl Ledger {
    /// [`Billing::release_reserved`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::release_reserved`].
    pub fn release_reserved(&self, caller: &PeerId, key: &str) -> Result<(), LedgerError> {
        self.owner()?;
        remove(&self.conn(), &caller.to_string(), key)
    }

    /// [`Billing::reserved_matoms`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::reserved_matoms`].
    pub fn reserved_matoms(&self, caller: &PeerId, now: UnixTime) -> Result<u64, LedgerError> {
        let conn = self.conn();
        let caller = caller.to_string();
        let live: i64 = conn
            .prepare_cached(
                "SELECT COALESCE(SUM(reserved_matoms), 0) FROM waiting \
             WHERE caller = ?1 AND expires_at > ?2",
            )?
            .query_row(params![caller, now.secs()], |r| r.get(0))?;
        Ok(u64::try_from(live).unwrap_or(0))
    }
}
