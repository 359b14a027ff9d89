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
use super::state::{Event, State};

/// The run of a call left for its agent's retry ([`Journal::leave`]): no process's
/// (a run is a random hex id).
const LEFT_RUN: &str = "left";

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

/// A call's outcome as kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The bot's `CallToolResult`, as JSON.
    Result(String),
    /// The JSON-RPC error the agent got, as JSON.
    Error(String),
    /// An outcome larger than [`MAX_KEPT_OUTCOME_BYTES`]: its size only.
    TooLarge(u64),
}

impl Outcome {
    fn columns(&self) -> (&'static str, String) {
        match self {
            Self::Result(json) => ("result", json.clone()),
            Self::Error(json) => ("error", json.clone()),
            Self::TooLarge(n) => ("too_large", n.to_string()),
        }
    }

    /// The outcome as kept: over the bound, its size.
    fn bounded(self) -> Self {
        match &self {
            Self::Result(json) | Self::Error(json) if json.len() > MAX_KEPT_OUTCOME_BYTES => {
                Self::TooLarge(json.len() as u64)
            }
            _ => self,
        }
    }
}

/// A call to record.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewCall<'a> {
    /// The agent's name.
    pub agent: &'a str,
    /// The agent's MCP session, if it has one.
    pub session: Option<&'a str>,
    /// The agent's request id, as JSON.
    pub request: &'a str,
    /// The key sent to the bot.
    pub key: &'a str,
    /// Whether the key is derived from the agent's own.
    pub own_key: bool,
    /// The bot (lowercase uid).
    pub bot: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The digest of the arguments.
    pub args: [u8; 32],
    /// The `tools/call` params as sent (name and arguments), as JSON.
    pub params: &'a str,
    /// The process's run.
    pub run: &'a str,
}

/// One journaled call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Row {
    pub id: i64,
    pub agent: String,
    pub key: String,
    pub own_key: bool,
    pub bot: String,
    pub tool: String,
    pub args: [u8; 32],
    pub params: String,
    pub state: State,
    pub price_atoms: u64,
    /// Atoms of a payment whose end was not recorded: it may have been made.
    pub paying_atoms: u64,
    pub paid_atoms: u64,
    pub spend_id: Option<i64>,
    pub outcome: Option<Outcome>,
    pub run: String,
    pub claimed: bool,
    pub created: i64,
    pub updated: i64,
}

impl Row {
    /// Paid, or a payment may have been made: never paid again automatically.
    pub(crate) const fn paid(&self) -> bool {
        self.paid_atoms > 0 || self.paying_atoms > 0
    }
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

const COLUMNS: &str = "id, agent, call_key, own_key, bot, tool, args, params, state, \
    price_atoms, paying_atoms, paid_atoms, spend_id, outcome_kind, outcome, run, claimed, \
    updated, created";

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn u64_of(n: i64) -> u64 {
    u64::try_from(n).unwrap_or_default()
}

/// A row as read, or what is wrong with it.
fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Result<Row, (i64, &'static str)>> {
    let id: i64 = r.get(0)?;
    let args: Vec<u8> = r.get(6)?;
    let Ok(args) = <[u8; 32]>::try_from(args) else {
        return Ok(Err((id, "arguments digest is not 32 bytes")));
    };
    let state: String = r.get(8)?;
    let Some(state) = State::parse(&state) else {
        return Ok(Err((id, "unknown state")));
    };
    let kind: Option<String> = r.get(13)?;
    let text: Option<String> = r.get(14)?;
    let outcome = match (kind.as_deref(), text) {
        (None, _) => None,
        (Some("result"), Some(t)) => Some(Outcome::Result(t)),
        (Some("error"), Some(t)) => Some(Outcome::Error(t)),
        (Some("too_large"), Some(t)) => match t.parse() {
            Ok(n) => Some(Outcome::TooLarge(n)),
            Err(_) => return Ok(Err((id, "outcome size is not a number"))),
        },
        _ => return Ok(Err((id, "outcome without its text"))),
    };
    Ok(Ok(Row {
        id,
        agent: r.get(1)?,
        key: r.get(2)?,
        own_key: r.get(3)?,
        bot: r.get(4)?,
        tool: r.get(5)?,
        args,
        params: r.get(7)?,
        state,
        price_atoms: u64_of(r.get(9)?),
        paying_atoms: u64_of(r.get(10)?),
        paid_atoms: u64_of(r.get(11)?),
        spend_id: r.get(12)?,
        outcome,
        run: r.get(15)?,
        claimed: r.get(16)?,
        updated: r.get(17)?,
        created: r.get(18)?,
    }))
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
        Ok(journal)
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

    /// Moves the call `id` by `event` if its state allows it, with `set` (SQL
    /// assignments over `?2`, `?3`) applied in the same write; the state it is in after.
    fn step(
        &self,
        id: i64,
        event: Event,
        set: &str,
        extra: (i64, Option<String>),
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        let mut db = self.db();
        let tx = db
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let Some(row) = self.rows(&tx, "WHERE id = ?1", params![id])?.pop() else {
            return Ok(None);
        };
        let paid = match event {
            // Whether a payment before this one settled.
            Event::Unpaid => row.paid_atoms > 0,
            _ => row.paid(),
        };
        let Some(next) = row.state.next(event, paid) else {
            return Ok(None);
        };
        let sql = format!(
            "UPDATE calls SET state = ?4, updated = ?5{}{set} WHERE id = ?1",
            if set.is_empty() { "" } else { ", " }
        );
        tx.execute(&sql, params![id, extra.0, extra.1, next.as_str(), now])
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Some(next))
    }

    /// Before a send of the call.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn sent(&self, id: i64, now: i64) -> Result<Option<State>, JournalError> {
        self.step(id, Event::Send, "", (0, None), now)
    }

    /// Before a payment of `atoms` (the tool's price `price_atoms`) is made.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn paying(
        &self,
        id: i64,
        price_atoms: u64,
        atoms: u64,
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        self.step(
            id,
            Event::Pay,
            "paying_atoms = ?2, price_atoms = CAST(?3 AS INTEGER)",
            (i64_of(atoms), Some(price_atoms.to_string())),
            now,
        )
    }

    /// The payment settled; `spend_id` is its spend-log row, if found.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn paid(
        &self,
        id: i64,
        spend_id: Option<i64>,
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        self.step(
            id,
            Event::Paid,
            "paid_atoms = paid_atoms + paying_atoms, paying_atoms = 0, \
             spend_id = COALESCE(CAST(?3 AS INTEGER), spend_id)",
            (0, spend_id.map(|s| s.to_string())),
            now,
        )
    }

    /// The payment was not made.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn unpaid(&self, id: i64, now: i64) -> Result<Option<State>, JournalError> {
        self.step(id, Event::Unpaid, "paying_atoms = 0", (0, None), now)
    }

    /// The bot's outcome, kept (bounded); delivered at once if `deliver`. Room is made
    /// within the agent's bounds; an outcome that does not fit is kept as its size.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn answer(
        &self,
        id: i64,
        outcome: Outcome,
        deliver: bool,
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        let mut outcome = outcome.bounded();
        if let Some(row) = self.get(id)? {
            let (_, text) = outcome.columns();
            let bytes = i64::try_from(text.len()).unwrap_or(i64::MAX);
            let db = self.db();
            // This row is in flight while room is made, so it is never the one evicted.
            if !make_room(&db, self.bounds, &row.agent, 0, bytes).map_err(|e| self.err(e))? {
                outcome = Outcome::TooLarge(u64_of(bytes));
            }
        }
        let (kind, text) = outcome.columns();
        let set = format!("outcome_kind = '{kind}', outcome = ?3");
        let answered = self.step(id, Event::Answer, &set, (0, Some(text)), now)?;
        if answered.is_some() && deliver {
            return self.deliver(id, now);
        }
        Ok(answered)
    }

    /// The outcome is handed to the agent.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn deliver(&self, id: i64, now: i64) -> Result<Option<State>, JournalError> {
        self.step(id, Event::Deliver, "", (0, None), now)
    }

    /// The agent stopped waiting.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn cancel(&self, id: i64, now: i64) -> Result<Option<State>, JournalError> {
        self.step(id, Event::Cancel, "", (0, None), now)
    }

    /// This run takes the call `id` over, to run it from where it stands.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn reopen(
        &self,
        id: i64,
        run: &str,
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        self.step(
            id,
            Event::Reopen,
            "run = ?3, claimed = 1",
            (0, Some(run.to_owned())),
            now,
        )
    }

    /// A paid call whose answer did not come while its agent waited (its credit had
    /// not reached the bot) is left for the agent's retry: no run holds it (so a
    /// retry of the same tool and arguments, or of its agent's own key, takes it over,
    /// paid, under its key; the next start resumes it), and it is not answered.
    /// Whether it was left (only a call paid or being paid is).
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn leave(&self, id: i64, now: i64) -> Result<bool, JournalError> {
        let changed = self
            .db()
            .execute(
                "UPDATE calls SET run = ?2, claimed = 0, updated = ?3 \
                 WHERE id = ?1 AND state IN ('paying', 'paid')",
                params![id, LEFT_RUN, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(changed == 1)
    }

    /// The oldest call of an earlier run that `agent` made to `bot` with `tool` and
    /// these arguments under a key of the bridge's, not delivered nor cancelled nor
    /// taken by another retry: taken now (`claimed`), for the agent's retry.
    ///
    /// # Errors
    /// SQLite's, a damaged row.
    pub(crate) fn claim_retry(
        &self,
        agent: &str,
        bot: &str,
        tool: &str,
        args: &[u8; 32],
        run: &str,
        now: i64,
    ) -> Result<Option<Row>, JournalError> {
        let mut db = self.db();
        let tx = db
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let found = self
            .rows(
                &tx,
                "WHERE agent = ?1 AND bot = ?2 AND tool = ?3 AND args = ?4 AND own_key = 0 \
                 AND claimed = 0 AND run != ?5 AND state NOT IN ('delivered', 'cancelled') \
                 AND updated >= ?6 ORDER BY id LIMIT 1",
                params![
                    agent,
                    bot,
                    tool,
                    args.as_slice(),
                    run,
                    now.saturating_sub(HELD_SECS)
                ],
            )?
            .pop();
        if let Some(row) = &found {
            tx.execute(
                "UPDATE calls SET claimed = 1 WHERE id = ?1",
                params![row.id],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
        }
        Ok(found.map(|mut r| {
            r.claimed = true;
            r
        }))
    }

    /// Gives a claimed call back for the agent's next retry (the retry stopped waiting).
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn release(&self, id: i64) -> Result<(), JournalError> {
        self.db()
            .execute(
                "UPDATE calls SET claimed = 0 WHERE id = ?1 AND state NOT IN ('delivered', 'cancelled')",
                params![id],
            )
            .map(drop)
            .map_err(|e| self.err(e))
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
