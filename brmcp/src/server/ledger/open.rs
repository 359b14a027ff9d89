//! Opening the ledger: the directory lock, the file checks that refuse what is not a
//! usable ledger, schema creation and migration, and the refunds of calls a dead
//! process left pending.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use crate::secure_fs::{SqliteAccess, SqliteKind, StampError, StampedOpen};

#[cfg(doc)]
use super::Billing;
use super::checkpoint::Checkpoints;
use super::group_sync::GroupSync;
use super::notices;
use super::retention::{OutcomeBytes, PruneClock, ReleaseClock, enable_incremental_vacuum};
use super::{
    APPLICATION_ID, CallId, FILE_NAME, INTERRUPTED, LOCK_FILE_NAME, Ledger, LedgerError, Opened,
    SCHEMA_VERSION, WAL_SIZE_LIMIT, found, refund_pending,
};

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

/// Schema 3 to 4: where each charged call's caller waits (session and request id), and
/// whether the caller of a call refunded at open is still to be told. Calls charged
/// before have no origin; their callers are not told.
const MIGRATE_3_TO_4: &str = "
ALTER TABLE calls ADD COLUMN session TEXT;
ALTER TABLE calls ADD COLUMN request_id TEXT;
ALTER TABLE calls ADD COLUMN notify INTEGER NOT NULL DEFAULT 0 CHECK (notify IN (0, 1));
CREATE INDEX calls_notify ON calls (id) WHERE notify = 1;
";

/// Schema 4 to 5: keyed calls waiting for their caller's tip, and the credit reserved
/// for them (see `waiting`). Nothing waits yet.
const MIGRATE_4_TO_5: &str = "
CREATE TABLE waiting (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    caller TEXT NOT NULL,
    call_key TEXT NOT NULL,
    tool TEXT NOT NULL,
    args_hash BLOB NOT NULL,
    price_atoms INTEGER NOT NULL CHECK (price_atoms >= 0),
    refused_at INTEGER NOT NULL,
    reserved_matoms INTEGER NOT NULL DEFAULT 0 CHECK (reserved_matoms >= 0),
    expires_at INTEGER NOT NULL,
    -- The caller's event order: its latest refusal, and the tip that reserved for it.
    refused_seq INTEGER NOT NULL DEFAULT 0,
    reserved_seq INTEGER NOT NULL DEFAULT 0,
    UNIQUE (caller, call_key)
) STRICT;
CREATE INDEX waiting_expires ON waiting (expires_at);
";

/// Indexes added after schema 5 was fixed, made by the owner's open when missing.
/// `calls_prunable`: the rows the journal's pruning may drop, so that a caller's many
/// calls still holding their key (a busy caller's replay window) are not read again at
/// every charge. `calls_outcomes`: the outcomes kept for replay, which bounding them
/// reads at every keyed call's end, without the keys whose outcome already went.
const INDEXES_SINCE_SCHEMA_5: &str = "
CREATE INDEX IF NOT EXISTS calls_prunable ON calls (caller, id)
    WHERE key_held = 0 AND state != 'pending';
CREATE INDEX IF NOT EXISTS calls_outcomes ON calls (caller, id)
    WHERE key_held = 1 AND outcome IS NOT NULL;
";

/// Prepared statements the connection keeps: 64, every statement of the paid-call path
/// (about 20) with room, so no call parses its SQL again.
const STATEMENT_CACHE: usize = 64;

/// How long open waits for the directory lock. Rides out a previous process that is
/// still closing, or an operator command that took the lock while no server ran; a
/// live server holds it for its lifetime, so waiting longer gains nothing.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// How often open retries the directory lock within [`LOCK_WAIT`].
const LOCK_RETRY: Duration = Duration::from_millis(25);

/// How long a transaction waits for another connection's write (an operator's credit
/// beside the server, say). Every writer holds the lock for one short transaction.
pub(super) const BUSY_WAIT: Duration = Duration::from_secs(5);

/// How many `quick_check` complaints an error quotes; the first few name the damage.
const CHECK_LINES: usize = 4;

const SCHEMA: &str = include_str!("../ledger_schema.sql");

impl Ledger {
    /// Open (creating on first use) the ledger in `dir`, then refund every call left
    /// pending by a process that died mid-call, with reason [`INTERRUPTED`], and keep
    /// its caller to be told ([`Billing::interrupted`]).
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
        // Commits from here on are synced by group commit (see `group_sync`), and the
        // log checkpointed by the ledger itself (see `checkpoint`).
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(|e| open_error(&path, e))?;
        Checkpoints::hook(&conn);
        Ok(Opened {
            ledger: Self {
                conn: Mutex::new(conn),
                sync: Some(GroupSync::new(&path)),
                path,
                _lock: Some(lock),
                prunes: PruneClock::default(),
                outcomes: OutcomeBytes::default(),
                releases: ReleaseClock::default(),
                checkpoints: Checkpoints::default(),
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
            sync: None,
            _lock: None,
            prunes: PruneClock::default(),
            outcomes: OutcomeBytes::default(),
            releases: ReleaseClock::default(),
            checkpoints: Checkpoints::default(),
        })
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

/// The ledger as [`crate::secure_fs::StampedOpen`] opens it.
const KIND: SqliteKind = SqliteKind {
    what: "ledger",
    application_id: APPLICATION_ID,
    version: SCHEMA_VERSION,
    schema: SCHEMA,
    unstamped_table: "",
    migrations: &[
        MIGRATE_1_TO_2,
        MIGRATE_2_TO_3,
        MIGRATE_3_TO_4,
        MIGRATE_4_TO_5,
    ],
};

/// Open, check and (when new and `create`) create the database. Reads the file before
/// writing anything, so a file that is not a ledger is left exactly as it was. Older
/// schemas are migrated by the process that serves from the ledger only.
fn connect(path: &Path, create: bool) -> Result<Connection, ConnectError> {
    // Other failures (permissions) are SQLite's to report.
    if std::fs::metadata(path).is_ok_and(|meta| !meta.is_file()) {
        return Err(ConnectError::NotAFile);
    }
    let access = if create {
        SqliteAccess::Own
    } else {
        SqliteAccess::Attach
    };
    // First read of the file: garbage fails here with "file is not a database".
    let open = StampedOpen::check(path, BUSY_WAIT, &KIND, access).map_err(|e| match e {
        StampError::Sqlite(e) => ConnectError::Sqlite(e),
        StampError::Missing => ConnectError::Missing,
        StampError::Foreign(found) => ConnectError::Foreign(format!(
            "application id {:#010x}, not {APPLICATION_ID:#010x}",
            found.application_id
        )),
        StampError::Version(found) => ConnectError::Schema(found.user_version),
    })?;
    quick_check(&open.conn)?;
    if create {
        // Before WAL and the schema on a new file (SQLite ignores it after either);
        // one VACUUM on an older one.
        enable_incremental_vacuum(&open.conn)?;
    }
    let conn = open.finish()?;
    if create {
        // Indexes are not part of the file's format: a file of this schema version
        // made before one was added gets it here, and an older brmcp reading the file
        // keeps it up to date without knowing of it.
        conn.execute_batch(INDEXES_SINCE_SCHEMA_5)?;
    }
    conn.pragma_update(None, "foreign_keys", true)?;
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
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

/// Refund every pending call, in one transaction with the state changes and the notices
/// owed to their callers. Their keys are released: the caller's retry runs afresh, as it
/// was paid back.
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
        super::waiting::hold_for_retry(&tx, call.id, now)?;
        notices::mark(&tx, call.id)?;
    }
    tx.commit()?;
    Ok(pending.len())
}
