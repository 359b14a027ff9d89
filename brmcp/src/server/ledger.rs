//! The default [`Billing`] store: one SQLite file in the data directory.
//!
//! `<datadir>/`[`FILE_NAME`] holds balances, every tip received (by sequence id, caller
//! and amount), the
//! paid-call journal with the outcomes kept for call-key replay, and the operator's audit
//! trail (schema in `ledger_schema.sql`). Every method that writes is one
//! `BEGIN IMMEDIATE` transaction, so money and its record move together or not at all,
//! and WAL with `synchronous = FULL` makes a committed transaction survive a power cut.
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

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{BoxError, PeerId};
use rusqlite::types::Type;
use rusqlite::{Connection, ErrorCode, OptionalExtension, Row, TransactionBehavior, params};

use super::billing::{Billing, CallId, CallRequest, Charge, KeyConflict, Keyed, Tip, TipOutcome};
use super::call_key::{MAX_OUTCOME_BYTES, OUTCOME_TTL_SECS};
use super::money::{MAX_MATOMS, Shortfall, atoms_to_matoms};

mod retention;
mod totals;
pub use retention::{MAX_JOURNAL_ROWS_PER_CALLER, VACUUM_FREE_PAGES, WAL_SIZE_LIMIT};
use retention::{enable_incremental_vacuum, prune_journal, reclaim, release_expired};
pub use totals::{LedgerTotals, TOTALS_WINDOW_SECS};

/// The ledger's file name inside the data directory.
pub const FILE_NAME: &str = "brmcp.sqlite";

/// The lock file inside the data directory, held by the process serving calls.
pub const LOCK_FILE_NAME: &str = "brmcp.sqlite.lock";

/// The schema this code reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i32 = 3;

/// Schema 1 to 2: tips are identified by sequence id, caller and amount, and carry
/// whether the client cleared their id. Schema 1's tips are kept, not cleared.
const MIGRATE_1_TO_2: &str = "
CREATE TABLE tips_v2 (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    seq INTEGER NOT NULL,
    caller TEXT NOT NULL,
    matoms INTEGER NOT NULL CHECK (matoms >= 0),
    credited INTEGER NOT NULL CHECK (credited IN (0, 1)),
    received_at INTEGER NOT NULL,
    cleared INTEGER NOT NULL DEFAULT 0 CHECK (cleared IN (0, 1))
) STRICT;
INSERT INTO tips_v2 (seq, caller, matoms, credited, received_at)
    SELECT seq, caller, matoms, credited, received_at FROM tips ORDER BY seq;
DROP TABLE tips;
ALTER TABLE tips_v2 RENAME TO tips;
CREATE INDEX tips_uncleared ON tips (seq) WHERE cleared = 0;
";

/// Schema 2 to 3: the totals of calls pruned from the journal (see
/// [`MAX_JOURNAL_ROWS_PER_CALLER`]). The file's switch to incremental vacuum is not a
/// schema change: open makes it whatever the version.
const MIGRATE_2_TO_3: &str = "
CREATE TABLE pruned (
    caller TEXT PRIMARY KEY NOT NULL,
    completed INTEGER NOT NULL CHECK (completed >= 0),
    completed_atoms INTEGER NOT NULL CHECK (completed_atoms >= 0),
    refunded INTEGER NOT NULL CHECK (refunded >= 0)
) STRICT, WITHOUT ROWID;
";

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
pub const MAX_OUTCOMES_PER_CALLER: usize = 1024;

/// How long open waits for the directory lock. Rides out a previous process that is
/// still closing, or an operator command that took the lock while no server ran; a
/// live server holds it for its lifetime, so waiting longer gains nothing.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// How often open retries the directory lock within [`LOCK_WAIT`].
const LOCK_RETRY: Duration = Duration::from_millis(25);

/// How long a transaction waits for another connection's write (an operator's credit
/// beside the server, say). Every writer holds the lock for one short transaction.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// How many `quick_check` complaints an error quotes; the first few name the damage.
const CHECK_LINES: usize = 4;

const SCHEMA: &str = include_str!("ledger_schema.sql");

/// The columns [`found`] reads, in its order (a macro, for `concat!`).
macro_rules! found_columns {
    () => {
        "SELECT caller, price_atoms, state, call_key IS NOT NULL"
    };
}

/// Why a ledger operation failed.
///
/// A caller short of money is not an error: see [`Charge::Insufficient`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The data directory does not exist and cannot be created.
    #[error("ledger: cannot create data directory {}: {source}", .path.display())]
    CreateDir {
        /// The data directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Something other than a file (a directory, say) is where the database should be.
    #[error("ledger: database path {} is not a regular file", .path.display())]
    NotAFile {
        /// The database path.
        path: PathBuf,
    },
    /// The data directory's lock file cannot be opened or locked (permissions, I/O).
    #[error("ledger: cannot lock {}: {source}", .path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// [`Ledger::attach`] found no ledger to attach to.
    #[error("ledger: no database at {}", .path.display())]
    Missing {
        /// The database path.
        path: PathBuf,
    },
    /// SQLite cannot open or read the file (permissions, I/O).
    #[error("ledger: cannot open database at {}: {source}", .path.display())]
    Open {
        /// The database path.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file is not a SQLite database, or is another application's. Left untouched.
    #[error("ledger: database at {} is not a brmcp ledger: {source}", .path.display())]
    NotALedger {
        /// The database path.
        path: PathBuf,
        /// What gave it away.
        #[source]
        source: BoxError,
    },
    /// `PRAGMA quick_check` found damage. Left untouched.
    #[error("ledger: database at {} failed its integrity check: {detail}", .path.display())]
    Corrupt {
        /// The database path.
        path: PathBuf,
        /// The first complaints of the check.
        detail: String,
    },
    /// A brmcp ledger of a schema version this code does not know (a newer brmcp's).
    #[error(
        "ledger: database at {} has schema version {found}, this brmcp reads {SCHEMA_VERSION}",
        .path.display()
    )]
    UnsupportedSchema {
        /// The database path.
        path: PathBuf,
        /// Its `user_version`.
        found: i32,
    },
    /// Another process holds the data directory's lock ([`LOCK_FILE_NAME`]): it
    /// serves calls from this ledger.
    #[error(
        "ledger: database at {} is in use by another process (it holds {LOCK_FILE_NAME})",
        .path.display()
    )]
    InUse {
        /// The database path.
        path: PathBuf,
    },
    /// A ledger opened with [`Ledger::attach`] was asked to charge, complete or refund
    /// a call, or to record a tip: only the process serving calls does that.
    #[error("ledger: attached beside the serving process, which alone moves calls and tips")]
    NotOwner,
    /// No journal entry has this id.
    #[error("ledger: no call {0} in the journal")]
    UnknownCall(CallId),
    /// The call was already completed or refunded.
    #[error("ledger: call {call} is {state}, not pending")]
    NotPending {
        /// The call.
        call: CallId,
        /// Its state.
        state: CallState,
    },
    /// An operator refund of a call that is not completed (pending calls belong to the
    /// harness; refunded ones were paid back already).
    #[error("ledger: call {call} is {state}, only a completed call can be refunded")]
    NotRefundable {
        /// The call.
        call: CallId,
        /// Its state.
        state: CallState,
    },
    /// An amount, or a balance after it, above [`MAX_MATOMS`](super::MAX_MATOMS).
    #[error("ledger: amount out of range")]
    AmountOutOfRange,
    /// SQLite failed after open.
    #[error("ledger: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Another [`Billing`] store failed.
    #[error("ledger: store: {0}")]
    Store(#[source] BoxError),
}

/// Where a journal entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallState {
    /// Charged; the handler is running (or its process died).
    Pending,
    /// The handler finished; the charge stands.
    Completed,
    /// The price was given back.
    Refunded,
}

impl CallState {
    /// The state as stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Refunded => "refunded",
        }
    }

    fn from_sql(row: &Row<'_>, idx: usize) -> rusqlite::Result<Self> {
        match row.get_ref(idx)?.as_str()? {
            "pending" => Ok(Self::Pending),
            "completed" => Ok(Self::Completed),
            "refunded" => Ok(Self::Refunded),
            other => Err(bad_column(
                idx,
                format!("unknown call state {other:?}").into(),
            )),
        }
    }
}

impl fmt::Display for CallState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One caller's balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balance {
    /// The caller.
    pub caller: PeerId,
    /// The balance in milliatoms.
    pub matoms: u64,
}

/// One paid call in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The entry's id.
    pub id: CallId,
    /// Who called and paid.
    pub caller: PeerId,
    /// The tool called.
    pub tool: String,
    /// The price charged, in atoms.
    pub price_atoms: u64,
    /// Where the call is.
    pub state: CallState,
    /// When it was charged.
    pub started_at: UnixTime,
    /// When it was completed or refunded.
    pub finished_at: Option<UnixTime>,
    /// Why it was refunded.
    pub reason: Option<String>,
    /// The caller's call key, if the call was keyed.
    pub call_key: Option<String>,
    /// Whether the key still blocks a second run (pending, or replayable).
    pub key_held: bool,
    /// Whether an outcome is kept for replay.
    pub outcome_kept: bool,
}

/// The calls of one caller pruned from the journal (see
/// [`MAX_JOURNAL_ROWS_PER_CALLER`]): what they moved stays counted here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrunedCalls {
    /// Completed calls pruned.
    pub completed: u64,
    /// The prices they kept, in atoms.
    pub completed_atoms: u64,
    /// Refunded calls pruned (they moved no money).
    pub refunded: u64,
}

/// What an operator did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditAction {
    /// [`Ledger::manual_credit`].
    Credit,
    /// [`Ledger::manual_refund`].
    Refund,
}

impl AuditAction {
    /// The action as stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Credit => "credit",
            Self::Refund => "refund",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One operator action on money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// The row's id; later actions have larger ids.
    pub id: i64,
    /// When it happened.
    pub at: UnixTime,
    /// Whose balance changed.
    pub caller: PeerId,
    /// What was done.
    pub action: AuditAction,
    /// How much was credited, in milliatoms.
    pub matoms: u64,
    /// The call a refund paid back.
    pub call: Option<CallId>,
    /// The operator's reason.
    pub reason: String,
}

/// A received tip as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TipRecord {
    /// The tip as received.
    pub tip: Tip,
    /// Whether it was credited (the tipper was allowed).
    pub credited: bool,
    /// When it was first received.
    pub received_at: UnixTime,
}

/// What [`Ledger::open`] returns: the ledger and what start-up recovery did.
#[derive(Debug)]
pub struct Opened {
    /// The open ledger.
    pub ledger: Ledger,
    /// How many calls left pending by a dead process were refunded.
    pub refunded: usize,
}

/// The SQLite ledger.
///
/// One connection behind a mutex, held for one transaction at a time: SQLite serialises
/// writers anyway, each transaction is short, and the harness reaches the ledger from
/// `spawn_blocking`, so a blocked caller blocks a blocking-pool thread, not the reactor.
#[derive(Debug)]
pub struct Ledger {
    conn: Mutex<Connection>,
    path: PathBuf,
    /// The data directory's lock, when this ledger serves calls ([`Ledger::open`]).
    _lock: Option<std::fs::File>,
}

impl Ledger {
    /// Open (creating on first use) the ledger in `dir`, then refund every call left
    /// pending by a process that died mid-call, with reason [`INTERRUPTED`].
    ///
    /// The refunds and their state changes commit in one transaction, so each happens
    /// exactly once however often open is retried.
    ///
    /// # Errors
    ///
    /// Each variant names the path: [`LedgerError::CreateDir`], [`LedgerError::NotAFile`],
    /// [`LedgerError::Open`], [`LedgerError::NotALedger`], [`LedgerError::Corrupt`],
    /// [`LedgerError::UnsupportedSchema`], [`LedgerError::InUse`], [`LedgerError::Lock`].
    /// A file that is not a usable ledger is never modified.
    pub fn open(dir: &Path, now: UnixTime) -> Result<Opened, LedgerError> {
        Self::open_waiting(dir, now, LOCK_WAIT)
    }

    /// For the operator's commands: [`open`](Self::open) when no process serves from
    /// `dir` (refunding what a dead one left pending), else [`attach`](Self::attach)
    /// beside it, without waiting for its lock. Also attaches when the lock file
    /// cannot be made (a read-only directory still reads).
    ///
    /// # Errors
    ///
    /// As [`Ledger::open`] but [`LedgerError::InUse`] and [`LedgerError::Lock`], and
    /// [`LedgerError::Missing`].
    pub fn open_for_operator(dir: &Path, now: UnixTime) -> Result<Opened, LedgerError> {
        match Self::open_waiting(dir, now, Duration::ZERO) {
            Err(LedgerError::InUse { .. } | LedgerError::Lock { .. }) => Ok(Opened {
                ledger: Self::attach(dir)?,
                refunded: 0,
            }),
            opened => opened,
        }
    }

    fn open_waiting(dir: &Path, now: UnixTime, wait: Duration) -> Result<Opened, LedgerError> {
        create_dir(dir)?;
        let path = dir.join(FILE_NAME);
        let lock = lock_dir(dir, &path, wait)?;
        let mut conn = connect(&path, true).map_err(|e| open_error(&path, e))?;
        let refunded = refund_interrupted(&mut conn, now).map_err(|e| match e {
            LedgerError::Sqlite(e) => open_error(&path, e),
            other => other,
        })?;
        Ok(Opened {
            ledger: Self {
                conn: Mutex::new(conn),
                path,
                _lock: Some(lock),
            },
            refunded,
        })
    }

    /// Open the existing ledger in `dir` beside the process that holds it (a running
    /// `brmcp serve`), for reads and the operator's credits and refunds. Takes no lock
    /// and refunds nothing: the calls pending there are in flight. The [`Billing`]
    /// calls that move calls and tips (and [`purge_expired`](Self::purge_expired)) are
    /// refused with [`LedgerError::NotOwner`]: they are the serving process's.
    ///
    /// # Errors
    ///
    /// As [`Ledger::open`] but [`LedgerError::InUse`] and [`LedgerError::Lock`], and
    /// [`LedgerError::Missing`] when there is no ledger, or one still being created.
    pub fn attach(dir: &Path) -> Result<Self, LedgerError> {
        let path = dir.join(FILE_NAME);
        if !path.exists() {
            return Err(LedgerError::Missing { path });
        }
        // Never creates the schema: a file without one is the owner's, mid-creation.
        let conn = connect(&path, false).map_err(|e| open_error(&path, e))?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
            _lock: None,
        })
    }

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

    /// The connection, for one transaction.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while the guard was held was inside a transaction, which rolled back
        // when it was dropped during unwinding, so the connection is still consistent.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Release the keys of finished calls whose replay window has closed, dropping
    /// their outcomes, and give the file's free pages back once more than
    /// [`VACUUM_FREE_PAGES`] collect; returns how many keys were released.
    ///
    /// [`Billing::charge`] does this too (and prunes the caller's journal past
    /// [`MAX_JOURNAL_ROWS_PER_CALLER`]), so calling it is only needed to reclaim space
    /// while no calls come.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn purge_expired(&self, now: UnixTime) -> Result<usize, LedgerError> {
        self.owner()?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let released = release_expired(&tx, now)?;
        reclaim(&tx)?;
        tx.commit()?;
        Ok(released)
    }

    /// Every caller's balance, by caller.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn balances(&self) -> Result<Vec<Balance>, LedgerError> {
        let conn = self.conn();
        let mut stmt = conn.prepare("SELECT caller, matoms FROM balances ORDER BY caller")?;
        let rows = stmt.query_map([], |row| {
            Ok(Balance {
                caller: peer(row, 0)?,
                matoms: amount(row, 1)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Credit `matoms` to `caller` by hand, recorded in the audit trail with `reason`;
    /// returns the new balance.
    ///
    /// # Errors
    ///
    /// [`LedgerError::AmountOutOfRange`] or a SQLite failure; nothing changes.
    pub fn manual_credit(
        &self,
        caller: &PeerId,
        matoms: u64,
        reason: &str,
        now: UnixTime,
    ) -> Result<u64, LedgerError> {
        let caller = caller.to_string();
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let balance = add_balance(&tx, &caller, matoms)?;
        audit(&tx, now, &caller, AuditAction::Credit, matoms, None, reason)?;
        tx.commit()?;
        Ok(balance)
    }

    /// Give back the price of a completed call by hand: the call becomes refunded with
    /// `reason`, recorded in the audit trail; returns the caller's new balance.
    ///
    /// A keyed call's stored outcome still replays: the caller got the result and was
    /// paid back, and a retry must not run it again.
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownCall`], [`LedgerError::NotRefundable`] (pending or already
    /// refunded), [`LedgerError::AmountOutOfRange`] or a SQLite failure; nothing changes.
    pub fn manual_refund(
        &self,
        call: CallId,
        reason: &str,
        now: UnixTime,
    ) -> Result<u64, LedgerError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = lookup(&tx, call)?;
        if found.state != CallState::Completed {
            return Err(LedgerError::NotRefundable {
                call,
                state: found.state,
            });
        }
        let matoms = found.price_matoms()?;
        let balance = add_balance(&tx, &found.caller, matoms)?;
        tx.execute(
            "UPDATE calls SET state = 'refunded', reason = ?2, finished_at = ?3 WHERE id = ?1",
            params![call.get(), reason, now.secs()],
        )?;
        audit(
            &tx,
            now,
            &found.caller,
            AuditAction::Refund,
            matoms,
            Some(call),
            reason,
        )?;
        tx.commit()?;
        Ok(balance)
    }

    /// The newest `limit` journal entries, newest first, of `caller` or of everyone.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn journal(
        &self,
        caller: Option<&PeerId>,
        limit: usize,
    ) -> Result<Vec<JournalEntry>, LedgerError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "{JOURNAL_SELECT} WHERE ?1 IS NULL OR caller = ?1 ORDER BY id DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(
            params![caller.map(PeerId::to_string), sql_limit(limit)],
            entry_from_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The totals of `caller`'s calls pruned from the journal; zero when none were.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn pruned(&self, caller: &PeerId) -> Result<PrunedCalls, LedgerError> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                "SELECT completed, completed_atoms, refunded FROM pruned WHERE caller = ?1",
                [caller.to_string()],
                |row| {
                    Ok(PrunedCalls {
                        completed: amount(row, 0)?,
                        completed_atoms: amount(row, 1)?,
                        refunded: amount(row, 2)?,
                    })
                },
            )
            .optional()?
            .unwrap_or_default())
    }

    /// One journal entry.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn journal_entry(&self, call: CallId) -> Result<Option<JournalEntry>, LedgerError> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                &format!("{JOURNAL_SELECT} WHERE id = ?1"),
                [call.get()],
                entry_from_row,
            )
            .optional()?)
    }

    /// The newest `limit` audit entries, newest first.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, LedgerError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, at, caller, action, matoms, call_id, reason FROM audit \
             ORDER BY id DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([sql_limit(limit)], |row| {
            let action = match row.get_ref(3)?.as_str()? {
                "credit" => AuditAction::Credit,
                "refund" => AuditAction::Refund,
                other => return Err(bad_column(3, format!("unknown action {other:?}").into())),
            };
            Ok(AuditEntry {
                id: row.get(0)?,
                at: UnixTime(row.get(1)?),
                caller: peer(row, 2)?,
                action,
                matoms: amount(row, 4)?,
                call: row.get::<_, Option<i64>>(5)?.map(CallId::new),
                reason: row.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The client confirmed clearing every tip with a sequence id up to `up_to`: none
    /// of them is delivered again, so a tip with such an id arriving later is new.
    /// Returns how many tips were marked. Allowed beside the serving process too
    /// ([`attach`](Self::attach)): it only marks.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn clear_tips(&self, up_to: u64) -> Result<usize, LedgerError> {
        let conn = self.conn();
        // Ids above 2^63 - 1 are stored negative (see `seq_to_sql`).
        Ok(conn.execute(
            "UPDATE tips SET cleared = 1 WHERE cleared = 0 AND \
             ((?1 >= 0 AND seq BETWEEN 0 AND ?1) OR (?1 < 0 AND (seq >= 0 OR seq <= ?1)))",
            [seq_to_sql(up_to)],
        )?)
    }

    /// The last tip received with sequence id `seq`, if any.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn tip(&self, seq: u64) -> Result<Option<TipRecord>, LedgerError> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                "SELECT caller, matoms, credited, received_at FROM tips WHERE seq = ?1 \
                 ORDER BY id DESC LIMIT 1",
                [seq_to_sql(seq)],
                |row| {
                    Ok(TipRecord {
                        tip: Tip {
                            seq,
                            caller: peer(row, 0)?,
                            matoms: amount(row, 1)?,
                        },
                        credited: row.get(2)?,
                        received_at: UnixTime(row.get(3)?),
                    })
                },
            )
            .optional()?)
    }
}

impl Billing for Ledger {
    fn charge(&self, request: &CallRequest<'_>, now: UnixTime) -> Result<Charge, LedgerError> {
        self.owner()?;
        let price_matoms =
            atoms_to_matoms(request.price_atoms).ok_or(LedgerError::AmountOutOfRange)?;
        let caller = request.caller.to_string();
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        release_expired(&tx, now)?;
        prune_journal(&tx, &caller)?;
        reclaim(&tx)?;

        if let Some(keyed) = request.keyed
            && let Some(answer) = key_answer(&tx, &caller, request.tool, keyed, now)?
        {
            // Keeps the expired keys released above.
            tx.commit()?;
            return Ok(answer);
        }

        let balance = balance(&tx, &caller)?;
        let Some(left) = balance.checked_sub(price_matoms) else {
            tx.commit()?;
            return Ok(Charge::Insufficient(Shortfall::new(
                request.price_atoms,
                balance,
            )));
        };
        if price_matoms > 0 {
            set_balance(&tx, &caller, left)?;
        }
        tx.execute(
            "INSERT INTO calls \
             (caller, tool, price_atoms, state, started_at, call_key, args_hash, key_held) \
             VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7)",
            params![
                caller,
                request.tool,
                amount_to_sql(request.price_atoms)?,
                now.secs(),
                request.keyed.map(|k| k.key.as_str()),
                request.keyed.map(|k| *k.args.as_bytes()),
                request.keyed.is_some(),
            ],
        )?;
        let call = CallId::new(tx.last_insert_rowid());
        tx.commit()?;
        Ok(Charge::Run(call))
    }

    fn held(
        &self,
        caller: &PeerId,
        tool: &str,
        keyed: Keyed<'_>,
        now: UnixTime,
    ) -> Result<Option<Charge>, LedgerError> {
        key_answer(&self.conn(), &caller.to_string(), tool, keyed, now)
    }

    fn complete(&self, call: CallId, outcome: &str, now: UnixTime) -> Result<(), LedgerError> {
        self.owner()?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = lookup_pending(&tx, call)?;
        close(&tx, &found, CallState::Completed, None, Some(outcome), now)?;
        tx.commit()?;
        Ok(())
    }

    fn refund(
        &self,
        call: CallId,
        reason: &str,
        outcome: Option<&str>,
        now: UnixTime,
    ) -> Result<(), LedgerError> {
        self.owner()?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = lookup_pending(&tx, call)?;
        refund_pending(&tx, &found, reason, outcome, now)?;
        tx.commit()?;
        Ok(())
    }

    fn record_tip(
        &self,
        tip: &Tip,
        allowed: bool,
        now: UnixTime,
    ) -> Result<TipOutcome, LedgerError> {
        self.owner()?;
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
            return Ok(TipOutcome::Duplicate);
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
        tx.execute(
            "INSERT INTO tips (seq, caller, matoms, credited, received_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![seq_to_sql(tip.seq), caller, matoms, allowed, now.secs()],
        )?;
        if allowed {
            add_balance(&tx, &caller, tip.matoms)?;
        }
        tx.commit()?;
        Ok(if allowed {
            TipOutcome::Credited
        } else {
            TipOutcome::NotCredited
        })
    }

    fn balance_matoms(&self, caller: &PeerId) -> Result<u64, LedgerError> {
        balance(&self.conn(), &caller.to_string())
    }
}

fn create_dir(dir: &Path) -> Result<(), LedgerError> {
    crate::secure_fs::create_dir(dir).map_err(|source| LedgerError::CreateDir {
        path: dir.to_owned(),
        source,
    })
}

/// Where [`connect`] failed, before it is tied to a path.
enum ConnectError {
    NotAFile,
    Missing,
    Sqlite(rusqlite::Error),
    Foreign(String),
    Corrupt(String),
    Schema(i32),
}

impl From<rusqlite::Error> for ConnectError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e)
    }
}

/// Open, check and (when new and `create`) create the database. Reads the file before
/// writing anything, so a file that is not a ledger is left exactly as it was.
fn connect(path: &Path, create: bool) -> Result<Connection, ConnectError> {
    // Other failures (permissions) are SQLite's to report.
    if std::fs::metadata(path).is_ok_and(|meta| !meta.is_file()) {
        return Err(ConnectError::NotAFile);
    }
    crate::secure_fs::prepare_sqlite(path)?;
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_WAIT)?;

    // First read of the file: garbage fails here with "file is not a database".
    let app_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let version: i32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let objects: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    let fresh = app_id == 0 && version == 0 && objects == 0;
    if fresh && !create {
        return Err(ConnectError::Missing);
    }
    if !fresh && app_id != APPLICATION_ID {
        return Err(ConnectError::Foreign(format!(
            "application id {app_id:#010x}, not {APPLICATION_ID:#010x}"
        )));
    }
    // Older schemas are migrated by the process that serves from the ledger only.
    if !fresh && version != SCHEMA_VERSION && !((1..SCHEMA_VERSION).contains(&version) && create) {
        return Err(ConnectError::Schema(version));
    }
    quick_check(&conn)?;

    if create {
        // Before WAL and the schema on a new file (SQLite ignores it after either);
        // one VACUUM on an older one.
        enable_incremental_vacuum(&conn)?;
    }
    let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    crate::secure_fs::seal_sqlite(path)?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
    if fresh {
        let tx = conn.unchecked_transaction()?;
        tx.execute_batch(SCHEMA)?;
        tx.pragma_update(None, "application_id", APPLICATION_ID)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit()?;
    } else if version < SCHEMA_VERSION {
        let tx = conn.unchecked_transaction()?;
        if version < 2 {
            tx.execute_batch(MIGRATE_1_TO_2)?;
        }
        tx.execute_batch(MIGRATE_2_TO_3)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit()?;
    }
    Ok(conn)
}

/// Take the data directory's lock (see [`LOCK_FILE_NAME`]), retrying for `wait`.
/// The OS drops it when the process dies, however it dies.
fn lock_dir(dir: &Path, db: &Path, wait: Duration) -> Result<std::fs::File, LedgerError> {
    let path = dir.join(LOCK_FILE_NAME);
    crate::secure_fs::refuse_symlink(&path).map_err(|source| LedgerError::Lock {
        path: path.clone(),
        source,
    })?;
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = match options.open(&path) {
        Ok(file) => file,
        Err(source) => return Err(LedgerError::Lock { path, source }),
    };
    let deadline = std::time::Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                std::thread::sleep(LOCK_RETRY);
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(LedgerError::InUse {
                    path: db.to_owned(),
                });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(LedgerError::Lock { path, source });
            }
        }
    }
}

/// `quick_check` rather than `integrity_check`: it finds damaged pages and records in
/// time linear in the file and skips the index cross-check, which would grow with the
/// journal on every start.
fn quick_check(conn: &Connection) -> Result<(), ConnectError> {
    let mut stmt = conn.prepare("PRAGMA quick_check")?;
    let rows = stmt
        .query_map([], |r| r.get::<_, String>(0))?
        .take(CHECK_LINES)
        .collect::<Result<Vec<_>, _>>()?;
    if rows == ["ok"] {
        return Ok(());
    }
    // A row may hold several lines; the error stays on one.
    let lines: Vec<&str> = rows.iter().flat_map(|row| row.lines()).collect();
    Err(ConnectError::Corrupt(
        lines[..lines.len().min(CHECK_LINES)].join("; "),
    ))
}

fn open_error(path: &Path, e: impl Into<ConnectError>) -> LedgerError {
    let path = path.to_owned();
    match e.into() {
        ConnectError::NotAFile => LedgerError::NotAFile { path },
        ConnectError::Missing => LedgerError::Missing { path },
        ConnectError::Foreign(detail) => LedgerError::NotALedger {
            path,
            source: detail.into(),
        },
        ConnectError::Corrupt(detail) => LedgerError::Corrupt { path, detail },
        ConnectError::Schema(found) => LedgerError::UnsupportedSchema { path, found },
        ConnectError::Sqlite(e) => match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => LedgerError::NotALedger {
                path,
                source: Box::new(e),
            },
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                LedgerError::InUse { path }
            }
            _ => LedgerError::Open { path, source: e },
        },
    }
}

/// Refund every pending call, in one transaction with the state changes. Their keys are
/// released: the caller's retry runs afresh, as it was paid back.
fn refund_interrupted(conn: &mut Connection, now: UnixTime) -> Result<usize, LedgerError> {
    // Immediate even with nothing to refund: the write lock it takes is what keeps other
    // processes out from here on.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let pending = {
        let mut stmt = tx.prepare(concat!(
            found_columns!(),
            ", id FROM calls WHERE state = 'pending'"
        ))?;
        stmt.query_map([], |row| found(row, CallId::new(row.get(4)?)))?
            .collect::<Result<Vec<_>, _>>()?
    };
    for call in &pending {
        // No outcome: the key is released, so the caller's retry runs afresh.
        refund_pending(&tx, call, INTERRUPTED, None, now)?;
    }
    tx.commit()?;
    Ok(pending.len())
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
        .query_row(
            "SELECT tool, args_hash, state, outcome FROM calls \
             WHERE caller = ?1 AND call_key = ?2 AND key_held = 1 \
             AND (state = 'pending' OR replay_until > ?3)",
            params![caller, keyed.key.as_str(), now.secs()],
            |row| {
                Ok((
                    row.get::<_, String>(0)?,
                    row.get::<_, Vec<u8>>(1)?,
                    CallState::from_sql(row, 2)?,
                    row.get::<_, Option<String>>(3)?,
                ))
            },
        )
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
    conn.query_row(
        concat!(found_columns!(), " FROM calls WHERE id = ?1"),
        [call.get()],
        |row| found(row, call),
    )
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
) -> Result<(), LedgerError> {
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
/// ask for it again.
fn close(
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

fn balance(conn: &Connection, caller: &str) -> Result<u64, LedgerError> {
    Ok(conn
        .query_row(
            "SELECT matoms FROM balances WHERE caller = ?1",
            [caller],
            |r| amount(r, 0),
        )
        .optional()?
        .unwrap_or(0))
}

fn set_balance(conn: &Connection, caller: &str, matoms: u64) -> Result<(), LedgerError> {
    conn.execute(
        "INSERT INTO balances (caller, matoms) VALUES (?1, ?2) \
         ON CONFLICT (caller) DO UPDATE SET matoms = excluded.matoms",
        params![caller, amount_to_sql(matoms)?],
    )?;
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
    conn.execute(
        "INSERT INTO audit (at, caller, action, matoms, call_id, reason) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            now.secs(),
            caller,
            action.as_str(),
            amount_to_sql(matoms)?,
            call.map(CallId::get),
            reason
        ],
    )?;
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
