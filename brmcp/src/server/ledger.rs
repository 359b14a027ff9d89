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
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, TransactionBehavior};

use super::billing::{
    Billing, BillingError, CallId, CallRequest, Charge, Commit, Interrupted, KeyConflict, Keyed,
    Origin, Tip, TipOutcome,
};
use super::call_key::{MAX_OUTCOME_BYTES, OUTCOME_TTL_SECS};
use super::money::{MAX_MATOMS, atoms_to_matoms};

/// The columns [`found`] reads, in its order (a macro, for `concat!`).
macro_rules! found_columns {
    () => {
        "SELECT caller, price_atoms, state, call_key IS NOT NULL"
    };
}

mod at_once;
mod balances;
mod charge;
mod checkpoint;
mod error;
mod group_sync;
mod notices;
mod open;
mod operator;
mod pending;
mod records;
mod retention;
mod sql;
mod tip_replays;
mod tips;
mod totals;
mod waiting;
use balances::{add_balance, balance, set_balance};
use charge::key_answer;
pub use checkpoint::CHECKPOINT_PAGES;
use checkpoint::Checkpoints;
pub use error::LedgerError;
use group_sync::{GroupSync, Ticket};
use pending::{close, found, lookup, lookup_pending, refund_pending};
pub use records::{
    AuditAction, AuditEntry, Balance, CallState, JournalEntry, Opened, PrunedCalls, TipRecord,
};
use retention::WAL_SIZE_LIMIT;
pub use retention::{
    MAX_JOURNAL_ROWS_PER_CALLER, MAX_OUTCOME_BYTES_PER_CALLER, PRUNE_EVERY, VACUUM_FREE_PAGES,
};
use retention::{OutcomeBytes, PruneClock, ReleaseClock};
use sql::{amount, amount_to_sql, bad_column, peer, seq_to_sql, sql_limit};
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

/// The reason kept with a call refused, uncharged, because the harness was stopping
/// (a row of price 0 that only carries its caller's notice).
pub const STOPPING_REFUSAL: &str = "stopping";

/// The SQLite ledger.
///
/// One connection behind a mutex, held for one transaction at a time: SQLite serialises
/// writers anyway, each transaction is short, and the harness reaches the ledger from
/// `spawn_blocking`, so a blocked caller blocks a blocking-pool thread, not the reactor;
/// or, for the `try_` calls ([`try_charge_from`](Self::try_charge_from) and its
/// siblings), from its own task, only when nothing would block.
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
    /// When the expired keys and reservations were last released.
    releases: ReleaseClock,
    /// The log's size, and its checkpoints.
    checkpoints: Checkpoints,
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
        self.checkpoints.commit(tx)?;
        Ok(self.ticket())
    }

    /// The ticket of the commits made so far, to wait on with
    /// [`durable`](Self::durable); `None` on a ledger that syncs each commit itself.
    fn ticket(&self) -> Option<Ticket> {
        self.sync.as_ref().map(GroupSync::ticket)
    }

    /// Returns once the commit of `ticket` survives a power cut; then checkpoints the
    /// log if that is due (this path may block).
    fn durable(&self, ticket: Option<Ticket>) -> Result<(), LedgerError> {
        let synced = match (&self.sync, ticket) {
            (Some(sync), Some(ticket)) => {
                sync.durable(ticket).map_err(|source| LedgerError::Sync {
                    path: self.path.clone(),
                    source,
                })
            }
            _ => Ok(()),
        };
        // Every caller let the connection go before this wait.
        if synced.is_ok() && self.checkpoints.due() {
            self.checkpoint(&self.conn());
        }
        synced
    }

    /// Checkpoints the log if due; a failure is logged and tried again later.
    fn checkpoint(&self, conn: &Connection) {
        if let Err(e) = self.checkpoints.run_if_due(conn) {
            tracing::warn!(path = %self.path.display(), error = %e, "ledger checkpoint failed");
        }
    }

    /// The connection, for one transaction.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while the guard was held was inside a transaction, which rolled back
        // when it was dropped during unwinding, so the connection is still consistent.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The connection if no one holds it (this thread included), as [`conn`](Self::conn).
    fn try_conn(&self) -> Option<MutexGuard<'_, Connection>> {
        match self.conn.try_lock() {
            Ok(conn) => Some(conn),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
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
        let committed = self
            .complete_in(&mut self.conn(), call, outcome, now)
            .map(|()| self.ticket());
        self.durable(self.outcomes.unless_failed(committed)?)
    }

    /// The transaction of [`complete`](Self::complete), committed on `conn`; the
    /// caller takes its ticket.
    fn complete_in(
        &self,
        conn: &mut Connection,
        call: CallId,
        outcome: &str,
        now: UnixTime,
    ) -> Result<(), LedgerError> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = lookup_pending(&tx, call)?;
        let kept = close(&tx, &found, CallState::Completed, None, Some(outcome), now)?;
        self.outcomes.bound(&tx, &found.caller, kept)?;
        Ok(self.checkpoints.commit(tx)?)
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

    fn refuse_stopping(
        &self,
        caller: &PeerId,
        tool: &str,
        origin: Origin<'_>,
        now: UnixTime,
    ) -> Result<Option<CallId>, BillingError> {
        Ok(Self::refuse_stopping(self, caller, tool, origin, now)?)
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

    fn try_held(
        &self,
        caller: &PeerId,
        tool: &str,
        keyed: Keyed<'_>,
        now: UnixTime,
    ) -> Option<Result<Option<Charge>, BillingError>> {
        Some(Self::try_held(self, caller, tool, keyed, now)?.map_err(BillingError::from))
    }

    fn try_charge_from(
        &self,
        request: &CallRequest<'_>,
        origin: Option<Origin<'_>>,
        now: UnixTime,
    ) -> Option<Result<Charge, BillingError>> {
        Some(Self::try_charge_from(self, request, origin, now)?.map_err(BillingError::from))
    }

    fn try_complete(
        &self,
        call: CallId,
        outcome: &str,
        now: UnixTime,
    ) -> Option<Result<Commit, BillingError>> {
        Some(Self::try_complete(self, call, outcome, now)?.map_err(BillingError::from))
    }

    fn synced(&self, commit: Commit) -> Result<(), BillingError> {
        Ok(Self::synced(self, commit)?)
    }
}

impl From<LedgerError> for BillingError {
    fn from(e: LedgerError) -> Self {
        Self::new(e)
    }
}
