//! The call journal's file: one row per agent `tools/call`, written before each step of
//! the call is taken, in SQLite.
//!
//! **Bounds.** Rows live for [`HELD_SECS`] after their last change (the harness's
//! replay window: past it, the bot no longer answers the key either). Per agent at most
//! [`MAX_CALLS_PER_AGENT`](super::bounds::MAX_CALLS_PER_AGENT) rows and
//! [`MAX_BYTES_PER_AGENT`](super::bounds::MAX_BYTES_PER_AGENT) of arguments and outcomes;
//! an outcome over [`MAX_KEPT_OUTCOME_BYTES`] is not kept, only its size. Over a bound,
//! the agent's oldest finished rows go first (delivered or cancelled), then its
//! undelivered outcomes of unpaid calls, and last its undelivered outcomes of paid
//! calls; a call in flight is never evicted: a new call that would need it is refused.

use brmcp_adapters::protocol::OUTCOME_TTL_SECS;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::{Connection, TransactionBehavior, params};

use super::bounds::{Bounds, make_room};

mod retries;
mod rows;
mod steps;

use rows::{COLUMNS, read_row};
pub(crate) use rows::{NewCall, Outcome, Row};
pub(crate) use steps::Handing;

/// The journal's file name inside the data directory.
pub const CALLS_FILE: &str = "mcpcalls.sqlite";

/// How long a call is kept after its last change, in seconds: the harness's replay
/// window for a call key ([`OUTCOME_TTL_SECS`], 30 minutes, WIRE.md §10).
pub(crate) const HELD_SECS: i64 = OUTCOME_TTL_SECS as i64;

/// Largest outcome kept, in bytes: 1 MiB, the harness's own bound on a replayed result
/// (`server::MAX_OUTCOME_BYTES`); the bot would not replay a larger one either.
pub(crate) const MAX_KEPT_OUTCOME_BYTES: usize = 1 << 20;

/// `PRAGMA application_id` of a call journal: "brcj" in ASCII.
const APPLICATION_ID: i32 = 0x6272_636a;

/// The schema version written to `PRAGMA user_version`.
const USER_VERSION: i32 = 1;

/// How long an open waits for another connection's lock.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS calls (
    id          INTEGER PRIMARY KEY,
    agent       TEXT    NOT NULL,
    session     TEXT,
    request     TEXT    NOT NULL,
    call_key    TEXT    NOT NULL,
    own_key     INTEGER NOT NULL,
    bot         TEXT    NOT NULL,
    tool        TEXT    NOT NULL,
    args        BLOB    NOT NULL CHECK (length(args) = 32),
    params      TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN
        ('recorded', 'sent', 'paying', 'paid', 'answered', 'delivered', 'cancelled')),
    price_atoms INTEGER NOT NULL DEFAULT 0,
    paying_atoms INTEGER NOT NULL DEFAULT 0,
    paid_atoms  INTEGER NOT NULL DEFAULT 0,
    spend_id    INTEGER,
    outcome_kind TEXT CHECK (outcome_kind IN ('result', 'error', 'too_large')),
    outcome     TEXT,
    run         TEXT    NOT NULL,
    claimed     INTEGER NOT NULL DEFAULT 0,
    created     INTEGER NOT NULL,
    updated     INTEGER NOT NULL,
    UNIQUE (bot, call_key)
);
CREATE INDEX IF NOT EXISTS calls_agent ON calls (agent, id);
CREATE INDEX IF NOT EXISTS calls_updated ON calls (updated);
";

/// Why the journal failed; each names its file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// SQLite failed (also: the file is not a database, or is damaged).
    #[error("call journal {path}: {source}")]
    Sqlite {
        /// The journal's file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file is another application's database.
    #[error("call journal {0}: not a brmcp call journal")]
    Foreign(PathBuf),
    /// A row holds what this journal never writes.
    #[error("call journal {path}: row {id}: {what}")]
    Damaged {
        /// The journal's file.
        path: PathBuf,
        /// The row.
        id: i64,
        /// What is wrong with it.
        what: &'static str,
    },
}

/// How recording a call went.
#[derive(Debug)]
pub(crate) enum Recorded {
    /// Recorded under this id.
    New(i64),
    /// The bot already has a call of this key in the journal.
    Exists,
    /// The agent's calls in flight fill its bounds.
    Full,
}

/// The call journal of one data directory.
#[derive(Debug)]
pub(crate) struct Journal {
    db: Mutex<Connection>,
    path: PathBuf,
    bounds: Bounds,
}

impl Journal {
    /// Opens (or creates) the journal in `dir` and drops the rows past [`HELD_SECS`].
    ///
    /// # Errors
    /// A file that cannot be opened, is not a database, or is another application's.
    pub(crate) fn open(dir: &Path, now: i64) -> Result<Self, JournalError> {
        let path = dir.join(CALLS_FILE);
        let sqlite = |source| JournalError::Sqlite {
            path: path.clone(),
            source,
        };
        let (db, identity) = crate::secure_fs::open_sqlite(&path, BUSY_WAIT).map_err(sqlite)?;
        // Identified before anything is written: another program's file stays untouched.
        if identity.application_id != APPLICATION_ID && !identity.fresh {
            return Err(JournalError::Foreign(path));
        }
        db.pragma_update(None, "journal_mode", "WAL")
            .map_err(sqlite)?;
        crate::secure_fs::seal_sqlite(&path).map_err(sqlite)?;
        db.pragma_update(None, "synchronous", "FULL")
            .map_err(sqlite)?;
        db.pragma_update(None, "application_id", APPLICATION_ID)
            .map_err(sqlite)?;
        db.execute_batch(SCHEMA).map_err(sqlite)?;
        db.pragma_update(None, "user_version", USER_VERSION)
            .map_err(sqlite)?;
        let journal = Self {
            db: Mutex::new(db),
            path,
            bounds: Bounds::default(),
        };
        journal.expire(now)?;
        journal.drop_claims()?;
        Ok(journal)
    }

    /// Claims are a process's: one the previous process held (a retry it gave an
    /// answer whose response never ended, say, when it was killed) is given back, so
    /// the agent's next retry takes the call.
    fn drop_claims(&self) -> Result<usize, JournalError> {
        self.db()
            .execute(
                "UPDATE calls SET claimed = 0 \
                 WHERE claimed = 1 AND state NOT IN ('delivered', 'cancelled')",
                [],
            )
            .map_err(|e| self.err(e))
    }

    /// The journal with other bounds (tests of the bounds).
    #[cfg(test)]
    pub(crate) fn with_bounds(mut self, bounds: Bounds) -> Self {
        self.bounds = bounds;
        self
    }

    fn db(&self) -> MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn err(&self, source: rusqlite::Error) -> JournalError {
        JournalError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn rows(
        &self,
        db: &Connection,
        filter: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<Row>, JournalError> {
        let sql = format!("SELECT {COLUMNS} FROM calls {filter}");
        let mut stmt = db.prepare(&sql).map_err(|e| self.err(e))?;
        let read = stmt
            .query_map(args, read_row)
            .map_err(|e| self.err(e))?
            .collect::<rusqlite::Result<Vec<_>>>()
            .map_err(|e| self.err(e))?;
        read.into_iter()
            .map(|r| {
                r.map_err(|(id, what)| JournalError::Damaged {
                    path: self.path.clone(),
                    id,
                    what,
                })
            })
            .collect()
    }

    /// Drops the rows whose last change is older than [`HELD_SECS`].
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn expire(&self, now: i64) -> Result<usize, JournalError> {
        self.db()
            .execute(
                "DELETE FROM calls WHERE updated < ?1",
                params![now.saturating_sub(HELD_SECS)],
            )
            .map_err(|e| self.err(e))
    }

    /// Records a call before its first send, making room within its agent's bounds.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn record(&self, call: &NewCall<'_>, now: i64) -> Result<Recorded, JournalError> {
        let mut db = self.db();
        let tx = db
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        tx.execute(
            "DELETE FROM calls WHERE updated < ?1",
            params![now.saturating_sub(HELD_SECS)],
        )
        .map_err(|e| self.err(e))?;
        let exists: bool = tx
            .query_row(
                "SELECT count(*) > 0 FROM calls WHERE bot = ?1 AND call_key = ?2",
                params![call.bot, call.key],
                |r| r.get(0),
            )
            .map_err(|e| self.err(e))?;
        if exists {
            return Ok(Recorded::Exists);
        }
        let bytes = i64::try_from(call.params.len()).unwrap_or(i64::MAX);
        if !make_room(&tx, self.bounds, call.agent, 1, bytes).map_err(|e| self.err(e))? {
            return Ok(Recorded::Full);
        }
        tx.execute(
            "INSERT INTO calls (agent, session, request, call_key, own_key, bot, tool, args, \
             params, state, run, created, updated) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'recorded', ?10, ?11, ?11)",
            params![
                call.agent,
                call.session,
                call.request,
                call.key,
                call.own_key,
                call.bot,
                call.tool,
                call.args.as_slice(),
                call.params,
                call.run,
                now
            ],
        )
        .map_err(|e| self.err(e))?;
        let id = tx.last_insert_rowid();
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Recorded::New(id))
    }

    /// The call `id`.
    ///
    /// # Errors
    /// SQLite's, a damaged row.
    pub(crate) fn get(&self, id: i64) -> Result<Option<Row>, JournalError> {
        Ok(self.rows(&self.db(), "WHERE id = ?1", params![id])?.pop())
    }

    /// The call of `key` at `bot`.
    ///
    /// # Errors
    /// SQLite's, a damaged row.
    pub(crate) fn by_key(&self, bot: &str, key: &str) -> Result<Option<Row>, JournalError> {
        Ok(self
            .rows(
                &self.db(),
                "WHERE bot = ?1 AND call_key = ?2",
                params![bot, key],
            )?
            .pop())
    }

    /// The calls of `agent` at `bot` after the row `after`, oldest first, at most `limit`.
    ///
    /// # Errors
    /// SQLite's, a damaged row.
    pub(crate) fn of_agent(
        &self,
        agent: &str,
        bot: &str,
        after: i64,
        limit: usize,
    ) -> Result<Vec<Row>, JournalError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(
            &self.db(),
            "WHERE agent = ?1 AND bot = ?2 AND id > ?3 ORDER BY id LIMIT ?4",
            params![agent, bot, after, limit],
        )
    }

    /// The calls of earlier runs still in flight, oldest first: to resume.
    ///
    /// # Errors
    /// SQLite's, a damaged row.
    pub(crate) fn in_flight_before(&self, run: &str) -> Result<Vec<Row>, JournalError> {
        self.rows(
            &self.db(),
            "WHERE run != ?1 AND state IN ('recorded', 'sent', 'paying', 'paid') ORDER BY id",
            params![run],
        )
    }

    /// Every call, oldest first (tests, status).
    ///
    /// # Errors
    /// SQLite's, a damaged row.
    #[cfg(test)]
    pub(crate) fn all(&self) -> Result<Vec<Row>, JournalError> {
        self.rows(&self.db(), "ORDER BY id", [])
    }
}
