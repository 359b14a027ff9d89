//! The spend log: every payment the bridge made or tried, in SQLite.
//!
//! `<datadir>/`[`SPEND_FILE`] has one row per payment: `pending` from the moment the
//! daily budget is reserved until the payment settles, then `paid` or `failed`. The
//! rolling daily total counts `pending` and `paid` rows of the last 24 hours. A pending
//! row the bridge stopped waiting for is marked unconfirmed ([`SpendLog::unconfirm`]);
//! only such rows are settled by a tip outcome that arrives later
//! ([`SpendLog::resolve`]), so a late event never settles a payment still in flight.
//! [`SpendLog::reserve`] checks the daily cap and inserts the row in one `BEGIN
//! IMMEDIATE` transaction, so concurrent payments can never exceed the cap together
//! (the Go bridge's check-then-record race).

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

/// The spend log's file name inside the data directory.
pub const SPEND_FILE: &str = "mcpspend.sqlite";

/// The rolling window of the daily cap: 24 hours, in seconds.
pub const DAY_SECS: i64 = 24 * 60 * 60;

/// Settled rows older than this are pruned when the log is opened: 90 days. The daily
/// cap needs one day; the rest is the user's history.
pub const KEEP_SECS: i64 = 90 * DAY_SECS;

/// `PRAGMA application_id` of a spend log: "brsp" in ASCII.
const APPLICATION_ID: i32 = 0x6272_7370;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS spend (
    id     INTEGER PRIMARY KEY,
    ts     INTEGER NOT NULL,
    bot    TEXT    NOT NULL,
    tool   TEXT    NOT NULL,
    rail   TEXT    NOT NULL,
    atoms  INTEGER NOT NULL CHECK (atoms > 0),
    status TEXT    NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    err    TEXT,
    unconfirmed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS spend_ts ON spend (ts);
";

/// Where a payment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendStatus {
    /// Reserved or in flight; counts toward the daily cap.
    Pending,
    /// Settled; counts toward the daily cap.
    Paid,
    /// Not made; does not count.
    Failed,
}

impl SpendStatus {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Paid => "paid",
            Self::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "pending" => Self::Pending,
            "paid" => Self::Paid,
            _ => Self::Failed,
        }
    }
}

/// One row of the spend log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpendEntry {
    /// The row's id.
    pub id: i64,
    /// When the payment was reserved, unix seconds.
    pub ts: i64,
    /// The bot paid (lowercase uid).
    pub bot: String,
    /// The tool the payment was for.
    pub tool: String,
    /// How it was paid: `"tip"`.
    pub rail: String,
    /// The amount, in atoms.
    pub atoms: u64,
    /// Where it stands.
    pub status: SpendStatus,
    /// Why it failed.
    pub err: Option<String>,
    /// Pending with nobody waiting for it: the bridge gave up waiting for the tip's
    /// confirmation (or an earlier run did); its outcome may still arrive.
    pub unconfirmed: bool,
}

/// Why the spend log failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpendError {
    /// SQLite failed.
    #[error("spend log: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The file is another application's database.
    #[error("spend log: {0} is not a brmcp spend log")]
    Foreign(String),
}

/// Whether paying `atoms` with `spent` already counted stays within `daily_cap`; a cap
/// of 0 never pays.
pub(crate) const fn fits_daily_cap(spent: u64, atoms: u64, daily_cap: u64) -> bool {
    daily_cap != 0 && spent.saturating_add(atoms) <= daily_cap
}

/// The reservation refused: the daily cap would be exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverDailyCap {
    /// Atoms pending or paid in the last 24 hours.
    pub spent: u64,
}

/// The spend log of one data directory.
#[derive(Debug)]
pub struct SpendLog {
    db: Mutex<Connection>,
}

fn i64_of(atoms: u64) -> i64 {
    i64::try_from(atoms).unwrap_or(i64::MAX)
}

impl SpendLog {
    /// Opens (or creates) the log in `dir` and prunes settled rows older than
    /// [`KEEP_SECS`].
    ///
    /// # Errors
    /// [`SpendError`] when the file cannot be opened or is not a spend log.
    pub fn open(dir: &Path, now: UnixTime) -> Result<Self, SpendError> {
        let path = dir.join(SPEND_FILE);
        crate::secure_fs::prepare_sqlite(&path)?;
        let db = Connection::open(&path)?;
        db.busy_timeout(std::time::Duration::from_secs(5))?;
        db.pragma_update(None, "journal_mode", "WAL")?;
        crate::secure_fs::seal_sqlite(&path)?;
        db.pragma_update(None, "synchronous", "FULL")?;
        let app: i32 = db.pragma_query_value(None, "application_id", |r| r.get(0))?;
        let tables: i64 = db.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        if app != APPLICATION_ID && (app != 0 || tables != 0) {
            return Err(SpendError::Foreign(path.display().to_string()));
        }
        db.pragma_update(None, "application_id", APPLICATION_ID)?;
        db.execute_batch(SCHEMA)?;
        // Version 1 had no `unconfirmed` column.
        let has_unconfirmed: bool = db.query_row(
            "SELECT count(*) FROM pragma_table_info('spend') WHERE name = 'unconfirmed'",
            [],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !has_unconfirmed {
            db.execute_batch(
                "ALTER TABLE spend ADD COLUMN unconfirmed INTEGER NOT NULL DEFAULT 0",
            )?;
        }
        db.pragma_update(None, "user_version", 2)?;
        db.execute(
            "DELETE FROM spend WHERE status != 'pending' AND ts < ?1",
            params![now.0.saturating_sub(KEEP_SECS)],
        )?;
        Ok(Self { db: Mutex::new(db) })
    }

    /// Marks every pending row unconfirmed: called by a bridge starting on this log,
    /// for the payments an earlier run was waiting for when it stopped. Their outcomes
    /// can then settle them ([`resolve`](Self::resolve)). Returns how many.
    ///
    /// # Errors
    /// SQLite's.
    pub fn unconfirm_left_pending(&self) -> Result<usize, SpendError> {
        Ok(self.db().execute(
            "UPDATE spend SET unconfirmed = 1 WHERE status = 'pending' AND unconfirmed = 0",
            [],
        )?)
    }

    fn db(&self) -> MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Atoms pending or paid in the 24 hours before `now`.
    ///
    /// # Errors
    /// SQLite's.
    pub fn spent_today(&self, now: UnixTime) -> Result<u64, SpendError> {
        Ok(spent(&self.db(), now)?)
    }

    /// Reserves `atoms` for a payment to `bot` if the daily total stays within
    /// `daily_cap`, as one transaction; the row starts `pending`.
    ///
    /// # Errors
    /// `Ok(Err(OverDailyCap))` when it would not fit; `Err` for SQLite's errors.
    pub fn reserve(
        &self,
        now: UnixTime,
        bot: &PeerId,
        tool: &str,
        atoms: u64,
        daily_cap: u64,
    ) -> Result<Result<i64, OverDailyCap>, SpendError> {
        let mut db = self.db();
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let spent = spent(&tx, now)?;
        if !fits_daily_cap(spent, atoms, daily_cap) {
            return Ok(Err(OverDailyCap { spent }));
        }
        tx.execute(
            "INSERT INTO spend (ts, bot, tool, rail, atoms, status) VALUES (?1, ?2, ?3, 'tip', ?4, 'pending')",
            params![now.0, bot.to_string(), tool, i64_of(atoms)],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Ok(id))
    }

    /// Settles a pending row: `Ok` is paid, `Err(reason)` failed.
    ///
    /// # Errors
    /// SQLite's.
    pub fn settle(&self, id: i64, outcome: Result<(), &str>) -> Result<bool, SpendError> {
        let (status, err) = match outcome {
            Ok(()) => (SpendStatus::Paid, None),
            Err(e) => (SpendStatus::Failed, Some(e)),
        };
        let n = self.db().execute(
            "UPDATE spend SET status = ?2, err = ?3 WHERE id = ?1 AND status = 'pending'",
            params![id, status.as_str(), err],
        )?;
        Ok(n == 1)
    }

    /// Marks a pending row unconfirmed: the bridge stopped waiting for its payment,
    /// which may still complete. It keeps counting toward the daily cap.
    ///
    /// # Errors
    /// SQLite's.
    pub fn unconfirm(&self, id: i64) -> Result<bool, SpendError> {
        let n = self.db().execute(
            "UPDATE spend SET unconfirmed = 1 WHERE id = ?1 AND status = 'pending'",
            params![id],
        )?;
        Ok(n == 1)
    }

    /// Resolves the oldest unconfirmed payment of the 24 hours before `now` to `bot` of
    /// exactly `atoms` (a tip that settled, or failed, after the bridge stopped waiting
    /// for it). Payments still awaited are never touched. `false` if none matches.
    ///
    /// # Errors
    /// SQLite's.
    pub fn resolve(
        &self,
        bot: &PeerId,
        atoms: u64,
        outcome: Result<(), &str>,
        now: UnixTime,
    ) -> Result<bool, SpendError> {
        let id: Option<i64> = self
            .db()
            .query_row(
                "SELECT id FROM spend WHERE status = 'pending' AND unconfirmed = 1 \
                 AND bot = ?1 AND atoms = ?2 AND ts > ?3 ORDER BY id LIMIT 1",
                params![
                    bot.to_string(),
                    i64_of(atoms),
                    now.0.saturating_sub(DAY_SECS)
                ],
                |r| r.get(0),
            )
            .optional()?;
        match id {
            Some(id) => self.settle(id, outcome),
            None => Ok(false),
        }
    }

    /// Every row, oldest first.
    ///
    /// # Errors
    /// SQLite's.
    pub fn entries(&self) -> Result<Vec<SpendEntry>, SpendError> {
        let db = self.db();
        let mut stmt = db
            .prepare("SELECT id, ts, bot, tool, rail, atoms, status, err, unconfirmed FROM spend ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok(SpendEntry {
                id: r.get(0)?,
                ts: r.get(1)?,
                bot: r.get(2)?,
                tool: r.get(3)?,
                rail: r.get(4)?,
                atoms: u64::try_from(r.get::<_, i64>(5)?).unwrap_or(0),
                status: SpendStatus::parse(&r.get::<_, String>(6)?),
                err: r.get(7)?,
                unconfirmed: r.get(8)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

fn spent(db: &Connection, now: UnixTime) -> rusqlite::Result<u64> {
    let total: i64 = db.query_row(
        "SELECT COALESCE(SUM(atoms), 0) FROM spend WHERE status != 'failed' AND ts > ?1",
        params![now.0.saturating_sub(DAY_SECS)],
        |r| r.get(0),
    )?;
    Ok(u64::try_from(total).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(n: u8) -> PeerId {
        PeerId::from_bytes([n; 32])
    }

    #[test]
    fn reserve_respects_the_rolling_window_and_failures_free_budget() {
        let dir = tempfile::tempdir().unwrap();
        let log = SpendLog::open(dir.path(), UnixTime(1_000_000)).unwrap();
        let t0 = UnixTime(1_000_000);
        let a = log.reserve(t0, &bot(1), "t", 600, 1000).unwrap().unwrap();
        assert_eq!(
            log.reserve(t0, &bot(1), "t", 500, 1000).unwrap(),
            Err(OverDailyCap { spent: 600 })
        );
        assert!(log.settle(a, Err("no route")).unwrap());
        assert!(!log.settle(a, Ok(())).unwrap(), "settled once");
        let b = log.reserve(t0, &bot(1), "t", 1000, 1000).unwrap().unwrap();
        assert!(log.settle(b, Ok(())).unwrap());
        assert_eq!(log.spent_today(t0).unwrap(), 1000);
        // 24 h later the paid row has left the window.
        let t1 = UnixTime(t0.0 + DAY_SECS);
        assert_eq!(log.spent_today(t1).unwrap(), 0);
        assert!(log.reserve(t1, &bot(1), "t", 1000, 1000).unwrap().is_ok());
        assert_eq!(
            log.reserve(t1, &bot(1), "t", 1, 0).unwrap(),
            Err(OverDailyCap { spent: 1000 }),
            "a cap of 0 never pays"
        );
    }

    #[test]
    fn resolve_takes_the_oldest_matching_unconfirmed_row() {
        let dir = tempfile::tempdir().unwrap();
        let t = UnixTime(5_000_000);
        let log = SpendLog::open(dir.path(), t).unwrap();
        let first = log.reserve(t, &bot(1), "t", 5, 100).unwrap().unwrap();
        let second = log.reserve(t, &bot(1), "t", 5, 100).unwrap().unwrap();
        assert!(
            !log.resolve(&bot(1), 5, Ok(()), t).unwrap(),
            "both still awaited"
        );
        assert!(log.unconfirm(first).unwrap());
        assert!(!log.resolve(&bot(2), 5, Ok(()), t).unwrap(), "other bot");
        assert!(!log.resolve(&bot(1), 6, Ok(()), t).unwrap(), "other amount");
        let next_day = UnixTime(t.0 + DAY_SECS);
        assert!(
            !log.resolve(&bot(1), 5, Ok(()), next_day).unwrap(),
            "older than a day"
        );
        assert!(log.resolve(&bot(1), 5, Err("expired"), t).unwrap());
        let entries = log.entries().unwrap();
        assert_eq!(entries[0].id, first);
        assert_eq!(entries[0].status, SpendStatus::Failed);
        assert_eq!(entries[0].err.as_deref(), Some("expired"));
        assert_eq!(entries[1].id, second);
        assert_eq!(entries[1].status, SpendStatus::Pending);
        assert!(!entries[1].unconfirmed);
        assert!(
            !log.resolve(&bot(1), 5, Ok(()), t).unwrap(),
            "still awaited"
        );
        assert_eq!(log.spent_today(t).unwrap(), 5);
        drop(log);
        // Reopened, a read leaves it as it is; a bridge starting on the log takes it
        // as left pending by an earlier run: unconfirmed, resolvable.
        let log = SpendLog::open(dir.path(), t).unwrap();
        assert!(!log.entries().unwrap()[1].unconfirmed);
        assert_eq!(log.unconfirm_left_pending().unwrap(), 1);
        assert!(log.entries().unwrap()[1].unconfirmed);
        assert!(log.resolve(&bot(1), 5, Ok(()), t).unwrap());
        assert_eq!(log.entries().unwrap()[1].status, SpendStatus::Paid);
    }

    #[test]
    fn open_prunes_old_settled_rows_but_keeps_pending_ones() {
        let dir = tempfile::tempdir().unwrap();
        let t = UnixTime(10_000_000);
        let log = SpendLog::open(dir.path(), t).unwrap();
        let paid = log.reserve(t, &bot(1), "t", 1, 10).unwrap().unwrap();
        log.settle(paid, Ok(())).unwrap();
        log.reserve(t, &bot(1), "t", 2, 10).unwrap().unwrap();
        drop(log);
        let later = UnixTime(t.0 + KEEP_SECS + 1);
        let log = SpendLog::open(dir.path(), later).unwrap();
        let entries = log.entries().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].atoms, 2);
    }

    #[test]
    fn a_version_1_log_gains_the_unconfirmed_column() {
        let dir = tempfile::tempdir().unwrap();
        let old = Connection::open(dir.path().join(SPEND_FILE)).unwrap();
        old.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        old.pragma_update(None, "user_version", 1).unwrap();
        old.execute_batch(
            "CREATE TABLE spend (id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, \
             bot TEXT NOT NULL, tool TEXT NOT NULL, rail TEXT NOT NULL, \
             atoms INTEGER NOT NULL CHECK (atoms > 0), status TEXT NOT NULL \
             CHECK (status IN ('pending', 'paid', 'failed')), err TEXT);
             INSERT INTO spend (ts, bot, tool, rail, atoms, status) \
             VALUES (100, '0101010101010101010101010101010101010101010101010101010101010101', 't', 'tip', 7, 'pending');",
        )
        .unwrap();
        drop(old);
        let log = SpendLog::open(dir.path(), UnixTime(200)).unwrap();
        assert_eq!(log.unconfirm_left_pending().unwrap(), 1);
        let entries = log.entries().unwrap();
        assert!(entries[0].unconfirmed, "left pending by an earlier run");
        assert!(log.resolve(&bot(1), 7, Ok(()), UnixTime(200)).unwrap());
        assert_eq!(log.spent_today(UnixTime(200)).unwrap(), 7);
    }

    #[test]
    fn a_foreign_database_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let other = Connection::open(dir.path().join(SPEND_FILE)).unwrap();
        other.execute_batch("CREATE TABLE x (y);").unwrap();
        drop(other);
        assert!(matches!(
            SpendLog::open(dir.path(), UnixTime(1)),
            Err(SpendError::Foreign(_))
        ));
    }
}
