//! The default [`Billing`] store: one SQLite file in the data directory.
//!
//! `<datadir>/`[`FILE_NAME`] holds balances, every tip received (by sequence id, caller
//! and amount), the
//! paid-call journal with the outcomes kept for call-key replay, and the operator's audit
//! trail (schema in `ledger_schema.sql`). Every method that writes is one
//! `BEGIN IMMEDIATE` transaction, so money and its record move together or not at all.
//! Every commit survives the process being killed (SIGKILL included). Those that must
//! also survive a power cut before their caller acts on them (a tip's credit before it
//! is acknowledged, a call's completion or refund before it is answered, and so the
//! charge before it) are synced by group commit ([`group_sync`]): concurrent callers
//! share one fsync. A charge alone is not synced: a power cut that loses it loses its
//! call's pending row with it, and that call was never answered (its answer waits for
//! the completion's sync), so the caller keeps the money.
//!
//! [`Ledger::open`] refuses a file that is not a brmcp ledger (it never resets one),
//! runs `PRAGMA quick_check`, and refunds every call a dead process left pending. It
//! locks the data directory (`<datadir>/`[`LOCK_FILE_NAME`]) for as long as the
//! [`Ledger`] lives: refunding pending calls at open is only right when no other
//! process can have calls in flight. [`Ledger::attach`] opens the ledger beside the
//! process holding that lock, for the operator's reads, credits and refunds while the
//! server runs; SQLite serialises the writers. The lock and SQLite's WAL index both
//! need a local filesystem; deleting the lock file while the server runs lets a second
//! one in.

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{BoxError, PeerId};
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::billing::{
    Billing, BillingError, CallId, CallRequest, Charge, Interrupted, KeyConflict, Keyed, Origin,
    Tip, TipOutcome,
};
use super::call_key::{MAX_OUTCOME_BYTES, OUTCOME_TTL_SECS};
use super::money::{MAX_MATOMS, Shortfall, atoms_to_matoms};

/// The columns [`found`] reads, in its order (a macro, for `concat!`).
macro_rules! found_columns {
    () => {
        "SELECT caller, price_atoms, state, call_key IS NOT NULL"
    };
}

mod error;
mod group_sync;
mod notices;
mod open;
mod operator;
mod records;
mod retention;
mod tip_replays;
mod totals;
mod waiting;
pub use error::LedgerError;
use group_sync::{GroupSync, Ticket};
pub use records::{
    AuditAction, AuditEntry, Balance, CallState, JournalEntry, Opened, PrunedCalls, TipRecord,
};
use retention::WAL_SIZE_LIMIT;
pub use retention::{MAX_JOURNAL_ROWS_PER_CALLER, PRUNE_EVERY, VACUUM_FREE_PAGES};
use retention::{OutcomeBytes, PruneClock, prune_journal, reclaim, release_expired};
use tip_replays::replayed;
pub use tip_replays::{TIP_REPLAY_ROWS, TIP_REPLAY_WINDOW_SECS};
pub use totals::{DailyRevenue, LedgerTotals, TOTALS_WINDOW_SECS};
pub use waiting::{MAX_WAITING_PER_CALLER, RESERVATION_WAIT_SECS};

/// The ledger's file name inside the data directory.
pub const FILE_NAME: &str = "brmcp.sqlite";

/// The lock file inside the data directory, held by the process serving calls.
pub const LOCK_FILE_NAME: &str = "brmcp.sqlite.lock";

/// The schema this code reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i32 = 5;

/// `PRAGMA application_id` of a brmcp ledger: "brmc" in ASCII. Tells our file apart
/// from any other SQLite database, whatever its tables.
pub const APPLICATION_ID: i32 = 0x6272_6d63;

/// The refund reason of a call found pending at open: its process died mid-call.
pub const INTERRUPTED: &str = "interrupted";

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

/// The SQLite ledger.
///
/// One connection behind a mutex, held for one transaction at a time: SQLite serialises
/// writers anyway, each transaction is short, and the harness reaches the ledger from
/// `spawn_blocking`, so a blocked caller blocks a blocking-pool thread, not the reactor.
#[derive(Debug)]
pub struct Ledger {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// The serving connection's group commit; `None` when attached, whose connection
    /// syncs every commit itself.
    sync: Option<GroupSync>,
    /// The data directory's lock, when this ledger serves calls ([`Ledger::open`]).
    _lock: Option<std::fs::File>,
    /// When each caller's journal rows are next pruned.
    prunes: PruneClock,
    /// How many bytes of outcomes each caller may keep, at most.
    outcomes: OutcomeBytes,
}

impl Ledger {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `Ok` when this ledger serves calls ([`Ledger::open`]), not [`Ledger::attach`].
    fn owner(&self) -> Result<(), LedgerError> {
        match self._lock {
            Some(_) => Ok(()),
            None => Err(LedgerError::NotOwner),
        }
    }

    /// Commits `tx`: the ticket to wait on, once the connection is released, with
    /// [`durable`](Self::durable).
    fn commit(&self, tx: rusqlite::Transaction<'_>) -> Result<Option<Ticket>, LedgerError> {
        tx.commit()?;
        Ok(self.sync.as_ref().map(GroupSync::ticket))
    }

    /// Returns once the commit of `ticket` survives a power cut.
    fn durable(&self, ticket: Option<Ticket>) -> Result<(), LedgerError> {
        match (&self.sync, ticket) {
            (Some(sync), Some(ticket)) => {
                sync.durable(ticket).map_err(|source| LedgerError::Sync {
                    path: self.path.clone(),
                    source,
                })
            }
            _ => Ok(()),
        }
    }

    /// The connection, for one transaction.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while the guard was held was inside a transaction, which rolled back
        // when it was dropped during unwinding, so the connection is still consistent.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Ledger {
    /// [`Billing::charge`], keeping `origin` with a charge.
    fn charge_with(
        &self,
        request: &CallRequest<'_>,
        origin: Option<Origin<'_>>,
        now: UnixTime,
    ) -> Result<Charge, LedgerError> {
        self.owner()?;
        let price_matoms =
            atoms_to_matoms(request.price_atoms).ok_or(LedgerError::AmountOutOfRange)?;
        let caller = request.caller.to_string();
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        release_expired(&tx, now)?;
        if self.prunes.due(&caller) {
            prune_journal(&tx, &caller)?;
        }
        reclaim(&tx)?;

        if let Some(keyed) = request.keyed
            && let Some(answer) = key_answer(&tx, &caller, request.tool, keyed, now)?
        {
            // Keeps the expired keys released above.
            tx.commit()?;
            return Ok(answer);
        }

        // What this call may spend: the balance less every reservation, plus the one
        // a tip made for this very call.
        let waiting_call = match request.keyed {
            Some(keyed) => {
                waiting::find(&tx, &caller, request.tool, keyed)?.filter(|w| w.same_call)
            }
            None => None,
        };
        let reserved_here = waiting_call.as_ref().map_or(0, |w| w.reserved_matoms);
        let mut available = waiting::spendable(&tx, &caller)?.saturating_add(reserved_here);
        if available < price_matoms
            && let (Some(keyed), Some(w)) = (request.keyed, &waiting_call)
            && let Some(freed) = waiting::take_over(
                &tx,
                &caller,
                keyed.key.as_str(),
                price_matoms - available,
                w.refused_seq,
            )?
        {
            available = available.saturating_add(freed);
        }
        if available < price_matoms {
            if let Some(keyed) = request.keyed {
                waiting::wait(&tx, &caller, request.tool, keyed, request.price_atoms, now)?;
            }
            tx.commit()?;
            return Ok(Charge::Insufficient(Shortfall::new(
                request.price_atoms,
                available,
            )));
        }
        if let Some(keyed) = request.keyed {
            // Its reservation is spent with this debit (any rest is unreserved).
            waiting::remove(&tx, &caller, keyed.key.as_str())?;
        }
        if price_matoms > 0 {
            let left = balance(&tx, &caller)?
                .checked_sub(price_matoms)
                .ok_or(LedgerError::AmountOutOfRange)?;
            set_balance(&tx, &caller, left)?;
        }
        let (session, request_id) = notices::origin_to_sql(origin);
        tx.prepare_cached(
            "INSERT INTO calls \
             (caller, tool, price_atoms, state, started_at, call_key, args_hash, key_held, \
              session, request_id) \
             VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            caller,
            request.tool,
            amount_to_sql(request.price_atoms)?,
            now.secs(),
            request.keyed.map(|k| k.key.as_str()),
            request.keyed.map(|k| *k.args.as_bytes()),
            request.keyed.is_some(),
            session,
            request_id,
        ])?;
        let call = CallId::new(tx.last_insert_rowid());
        tx.commit()?;
        Ok(Charge::Run(call))
    }
}

/// The [`Billing`] calls, with the ledger's own error (the trait's convert it).
impl Ledger {
    /// [`Billing::charge`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::charge`].
    pub fn charge(&self, request: &CallRequest<'_>, now: UnixTime) -> Result<Charge, LedgerError> {
        self.charge_with(request, None, now)
    }

    /// [`Billing::charge_from`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::charge_from`].
    pub fn charge_from(
        &self,
        request: &CallRequest<'_>,
        origin: Option<Origin<'_>>,
        now: UnixTime,
    ) -> Result<Charge, LedgerError> {
        self.charge_with(request, origin, now)
    }

    /// [`Billing::interrupted`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::interrupted`].
    pub fn interrupted(&self, now: UnixTime) -> Result<Vec<Interrupted>, LedgerError> {
        self.owner()?;
        notices::interrupted(&mut self.conn(), now)
    }

    /// [`Billing::told`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::told`].
    pub fn told(&self, call: CallId) -> Result<(), LedgerError> {
        self.owner()?;
        notices::told(&self.conn(), call)
    }

    /// [`Billing::held`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::held`].
    pub fn held(
        &self,
        caller: &PeerId,
        tool: &str,
        keyed: Keyed<'_>,
        now: UnixTime,
    ) -> Result<Option<Charge>, LedgerError> {
        key_answer(&self.conn(), &caller.to_string(), tool, keyed, now)
    }

    /// [`Billing::complete`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::complete`].
    pub fn complete(&self, call: CallId, outcome: &str, now: UnixTime) -> Result<(), LedgerError> {
        self.owner()?;
        let mut conn = self.conn();
        let ticket = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let found = lookup_pending(&tx, call)?;
            let kept = close(&tx, &found, CallState::Completed, None, Some(outcome), now)?;
            self.outcomes.bound(&tx, &found.caller, kept)?;
            self.commit(tx)
        })();
        drop(conn);
        self.durable(self.outcomes.unless_failed(ticket)?)
    }

    /// [`Billing::refund`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::refund`].
    pub fn refund(
        &self,
        call: CallId,
        reason: &str,
        outcome: Option<&str>,
        now: UnixTime,
    ) -> Result<(), LedgerError> {
        self.owner()?;
        let mut conn = self.conn();
        let ticket = (|| {
            let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            let found = lookup_pending(&tx, call)?;
            let kept = refund_pending(&tx, &found, reason, outcome, now)?;
            self.outcomes.bound(&tx, &found.caller, kept)?;
            self.commit(tx)
        })();
        drop(conn);
        self.durable(self.outcomes.unless_failed(ticket)?)
    }

    /// [`Billing::record_tip`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::record_tip`].
    pub fn record_tip(
        &self,
        tip: &Tip,
        allowed: bool,
        now: UnixTime,
    ) -> Result<TipOutcome, LedgerError> {
        self.owner()?;
        let (ticket, outcome) = self.record_tip_unsynced(tip, allowed, now)?;
        // A tip is acknowledged once this returns: its record survives a power cut by
        // then, and so does the one a redelivery finds (its sync may still be running).
        self.durable(ticket)?;
        Ok(outcome)
    }

    fn record_tip_unsynced(
        &self,
        tip: &Tip,
        allowed: bool,
        now: UnixTime,
    ) -> Result<(Option<Ticket>, TipOutcome), LedgerError> {
        let caller = tip.caller.to_string();
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let matoms = amount_to_sql(tip.matoms)?;
        let same_id: Vec<(String, i64)> = {
            let mut stmt =
                tx.prepare("SELECT caller, matoms FROM tips WHERE seq = ?1 AND cleared = 0")?;
            stmt.query_map([seq_to_sql(tip.seq)], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        if same_id.iter().any(|(c, m)| *c == caller && *m == matoms) {
            // A barrier: every commit so far, the first delivery's included.
            let barrier = self.sync.as_ref().map(GroupSync::ticket);
            return Ok((barrier, TipOutcome::Duplicate));
        }
        if replayed(&tx, tip.seq, &caller, matoms, now)? {
            tracing::warn!(
                seq = tip.seq,
                %caller,
                matoms,
                "tip redelivered after its id was cleared; not credited again"
            );
            // Cleared once its acknowledgement was confirmed: long durable.
            return Ok((None, TipOutcome::Duplicate));
        }
        if let Some((other, other_matoms)) = same_id.first() {
            // Not a redelivery: the client reused the id (its logs were reset, or it is
            // another client). Credited as the new tip it is.
            tracing::warn!(
                seq = tip.seq,
                %caller,
                matoms,
                earlier_caller = %other,
                earlier_matoms = other_matoms,
                "tip sequence id reused by another tip; recorded as a new tip"
            );
        }
        tx.prepare_cached(
            "INSERT INTO tips (seq, caller, matoms, credited, received_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            seq_to_sql(tip.seq),
            caller,
            matoms,
            allowed,
            now.secs()
        ])?;
        if allowed {
            add_balance(&tx, &caller, tip.matoms)?;
            // The credit goes to the calls refused for payment that wait for it, in the
            // tip's transaction: no crash leaves it credited and not reserved.
            waiting::expire(&tx, now)?;
            waiting::reserve(&tx, &caller, tip.matoms, now)?;
        }
        let ticket = self.commit(tx)?;
        let outcome = if allowed {
            TipOutcome::Credited
        } else {
            TipOutcome::NotCredited
        };
        Ok((ticket, outcome))
    }

    /// [`Billing::balance_matoms`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::balance_matoms`].
    pub fn balance_matoms(&self, caller: &PeerId) -> Result<u64, LedgerError> {
        balance(&self.conn(), &caller.to_string())
    }
}

impl Billing for Ledger {
    fn charge(&self, request: &CallRequest<'_>, now: UnixTime) -> Result<Charge, BillingError> {
        Ok(Self::charge(self, request, now)?)
    }

    fn charge_from(
        &self,
        request: &CallRequest<'_>,
        origin: Option<Origin<'_>>,
        now: UnixTime,
    ) -> Result<Charge, BillingError> {
        Ok(Self::charge_from(self, request, origin, now)?)
    }

    fn interrupted(&self, now: UnixTime) -> Result<Vec<Interrupted>, BillingError> {
        Ok(Self::interrupted(self, now)?)
    }

    fn told(&self, call: CallId) -> Result<(), BillingError> {
        Ok(Self::told(self, call)?)
    }

    fn interrupt(&self, call: CallId, now: UnixTime) -> Result<(), BillingError> {
        Ok(Self::interrupt(self, call, now)?)
    }

    fn held(
        &self,
        caller: &PeerId,
        tool: &str,
        keyed: Keyed<'_>,
        now: UnixTime,
    ) -> Result<Option<Charge>, BillingError> {
        Ok(Self::held(self, caller, tool, keyed, now)?)
    }

    fn complete(&self, call: CallId, outcome: &str, now: UnixTime) -> Result<(), BillingError> {
        Ok(Self::complete(self, call, outcome, now)?)
    }

    fn refund(
        &self,
        call: CallId,
        reason: &str,
        outcome: Option<&str>,
        now: UnixTime,
    ) -> Result<(), BillingError> {
        Ok(Self::refund(self, call, reason, outcome, now)?)
    }

    fn record_tip(
        &self,
        tip: &Tip,
        allowed: bool,
        now: UnixTime,
    ) -> Result<TipOutcome, BillingError> {
        Ok(Self::record_tip(self, tip, allowed, now)?)
    }

    fn balance_matoms(&self, caller: &PeerId) -> Result<u64, BillingError> {
        Ok(Self::balance_matoms(self, caller)?)
    }

    fn reserved_matoms(&self, caller: &PeerId, now: UnixTime) -> Result<u64, BillingError> {
        Ok(Self::reserved_matoms(self, caller, now)?)
    }

    fn reserves_credit(&self) -> bool {
        true
    }

    fn release_reserved(&self, caller: &PeerId, key: &str) -> Result<(), BillingError> {
        Ok(Self::release_reserved(self, caller, key)?)
    }
}

impl From<LedgerError> for BillingError {
    fn from(e: LedgerError) -> Self {
        Self::new(e)
    }
}

/// What a held key answers for a call of `tool` with `keyed`'s arguments, or `None`
/// if the key is free. A finished call whose replay window has closed at `now` no longer
/// holds its key, whether or not [`release_expired`] has run.
fn key_answer(
    conn: &Connection,
    caller: &str,
    tool: &str,
    keyed: Keyed<'_>,
    now: UnixTime,
) -> Result<Option<Charge>, LedgerError> {
    let held = conn
        .prepare_cached(
            "SELECT tool, args_hash, state, outcome FROM calls \
             WHERE caller = ?1 AND call_key = ?2 AND key_held = 1 \
             AND (state = 'pending' OR replay_until > ?3)",
        )?
        .query_row(params![caller, keyed.key.as_str(), now.secs()], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Vec<u8>>(1)?,
                CallState::from_sql(row, 2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })
        .optional()?;
    Ok(held.map(|(held_tool, args, state, outcome)| {
        if held_tool != tool {
            Charge::KeyConflict(KeyConflict::OtherTool)
        } else if args != keyed.args.as_bytes() {
            Charge::KeyConflict(KeyConflict::OtherArguments)
        } else if state == CallState::Pending {
            Charge::InProgress
        } else {
            outcome.map_or(Charge::OutcomeNotRetained, Charge::Replay)
        }
    }))
}

/// A journal entry as the money paths need it.
struct Found {
    id: CallId,
    caller: String,
    price_atoms: u64,
    state: CallState,
    keyed: bool,
}

impl Found {
    fn price_matoms(&self) -> Result<u64, LedgerError> {
        atoms_to_matoms(self.price_atoms).ok_or(LedgerError::AmountOutOfRange)
    }
}

fn found(row: &Row<'_>, id: CallId) -> rusqlite::Result<Found> {
    Ok(Found {
        id,
        caller: row.get(0)?,
        price_atoms: amount(row, 1)?,
        state: CallState::from_sql(row, 2)?,
        keyed: row.get(3)?,
    })
}

fn lookup(conn: &Connection, call: CallId) -> Result<Found, LedgerError> {
    conn.prepare_cached(concat!(found_columns!(), " FROM calls WHERE id = ?1"))?
        .query_row([call.get()], |row| found(row, call))
        .optional()?
        .ok_or(LedgerError::UnknownCall(call))
}

/// Pays a pending call's price back to its caller and closes it refunded.
fn refund_pending(
    conn: &Connection,
    call: &Found,
    reason: &str,
    outcome: Option<&str>,
    now: UnixTime,
) -> Result<Option<usize>, LedgerError> {
    add_balance(conn, &call.caller, call.price_matoms()?)?;
    close(conn, call, CallState::Refunded, Some(reason), outcome, now)
}

fn lookup_pending(conn: &Connection, call: CallId) -> Result<Found, LedgerError> {
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
/// the caller's outcomes ([`OutcomeBytes::bound`]) in the same transaction.
fn close(
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

fn balance(conn: &Connection, caller: &str) -> Result<u64, LedgerError> {
    Ok(conn
        .prepare_cached("SELECT matoms FROM balances WHERE caller = ?1")?
        .query_row([caller], |r| amount(r, 0))
        .optional()?
        .unwrap_or(0))
}

fn set_balance(conn: &Connection, caller: &str, matoms: u64) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT INTO balances (caller, matoms) VALUES (?1, ?2) \
         ON CONFLICT (caller) DO UPDATE SET matoms = excluded.matoms",
    )?
    .execute(params![caller, amount_to_sql(matoms)?])?;
    Ok(())
}

/// Add to a balance, in Rust rather than SQL: SQLite turns an overflowing integer sum
/// into a float instead of failing.
fn add_balance(conn: &Connection, caller: &str, matoms: u64) -> Result<u64, LedgerError> {
    let new = balance(conn, caller)?
        .checked_add(matoms)
        .ok_or(LedgerError::AmountOutOfRange)?;
    set_balance(conn, caller, new)?;
    Ok(new)
}

fn audit(
    conn: &Connection,
    now: UnixTime,
    caller: &str,
    action: AuditAction,
    matoms: u64,
    call: Option<CallId>,
    reason: &str,
) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT INTO audit (at, caller, action, matoms, call_id, reason) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        now.secs(),
        caller,
        action.as_str(),
        amount_to_sql(matoms)?,
        call.map(CallId::get),
        reason
    ])?;
    Ok(())
}

const JOURNAL_SELECT: &str = "SELECT id, caller, tool, price_atoms, state, started_at, \
     finished_at, reason, call_key, key_held, outcome IS NOT NULL FROM calls";

fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<JournalEntry> {
    Ok(JournalEntry {
        id: CallId::new(row.get(0)?),
        caller: peer(row, 1)?,
        tool: row.get(2)?,
        price_atoms: amount(row, 3)?,
        state: CallState::from_sql(row, 4)?,
        started_at: UnixTime(row.get(5)?),
        finished_at: row.get::<_, Option<i64>>(6)?.map(UnixTime),
        reason: row.get(7)?,
        call_key: row.get(8)?,
        key_held: row.get(9)?,
        outcome_kept: row.get(10)?,
    })
}

/// An amount as a SQLite integer; anything above [`MAX_MATOMS`] is refused.
fn amount_to_sql(amount: u64) -> Result<i64, LedgerError> {
    if amount > MAX_MATOMS {
        return Err(LedgerError::AmountOutOfRange);
    }
    i64::try_from(amount).map_err(|_| LedgerError::AmountOutOfRange)
}

/// A tip sequence id bit for bit as a SQLite integer (see `ledger_schema.sql`).
const fn seq_to_sql(seq: u64) -> i64 {
    i64::from_ne_bytes(seq.to_ne_bytes())
}

fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A non-negative integer column as `u64` (the schema's CHECKs keep amounts >= 0).
fn amount(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let value: i64 = row.get(idx)?;
    u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, value))
}

fn peer(row: &Row<'_>, idx: usize) -> rusqlite::Result<PeerId> {
    row.get_ref(idx)?
        .as_str()?
        .parse()
        .map_err(|e| bad_column(idx, Box::new(e)))
}

fn bad_column(idx: usize, e: BoxError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, e)
}
