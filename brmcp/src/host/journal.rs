//! The inbound PM journal of a data directory, and the Bison Relay client it is bound
//! to.
//!
//! Every PM the client delivers is recorded here before it is acknowledged, and handed
//! on (to the harness or the bridge's router) from here: record, then acknowledge,
//! then process. After a crash, what was recorded and not yet handed on is replayed at
//! the next start. The journal is also the PMs' one deduplication: a PM is a
//! redelivery when a PM with the same sequence id, sender and text is recorded and the
//! client has not yet confirmed clearing that id ([`PmJournal::cleared`]); the client
//! delivers nothing it cleared again, so a PM matching only a cleared row (a PM after
//! the client's logs were reset, whose ids start over) is new. A row loses its text
//! once handed on, and is deleted once it is also cleared (the client can deliver it no
//! more) and [`KEEP_HANDLED`] old: until then it tells what arrived, also after a
//! crash.
//!
//! Handed on means the router took it; what the router holds in memory when the
//! process dies is lost with it, and the session layer recovers (a replayed request of
//! a session the restarted server no longer has is answered "session not found", and
//! the bridge re-establishes the session and reissues the request under the same call
//! key, so a paid tool still runs at most once).
//!
//! The file is `<datadir>/`[`FILE_NAME`], beside the ledger; WAL with
//! `synchronous = FULL`, so a recorded PM survives a power cut once its record returns.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{BoxError, Clock as _, PeerId, SystemClock};
use brmcp_clientrpc::PmHandler;
use brmcp_clientrpc::ReceivedPm;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::secure_fs::{SqliteAccess, SqliteKind, StampError, StampedOpen};

/// The journal's file name inside the data directory.
pub const FILE_NAME: &str = "brmcp-inbox.sqlite";

/// `PRAGMA application_id` of the journal: "brmi" in ASCII.
pub const APPLICATION_ID: i32 = 0x6272_6d69;

/// The schema this code reads and writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i32 = 1;

/// Largest PM text kept: 1,887,437 bytes, the largest message a relay on the default
/// size policy routes (bisonrelay's `rpc.MaxMsgSizeV0`). No brmcp part comes near it (parts are a few
/// hundred KiB); a larger PM (a relay on the larger policy routes about 18.9 MB) is
/// recorded without its text, refused with a log line and acknowledged, so it neither
/// fills the journal nor comes back forever.
pub const MAX_PM_BYTES: usize = 1_887_437;

/// How long a PM handed on and cleared stays in the journal, without its text: one
/// hour, an audit of what arrived (a few hundred bytes a row; the rate limits bound
/// the rows).
pub const KEEP_HANDLED: Duration = Duration::from_secs(3600);

/// PMs handed on per journal read: bounds the memory of one batch.
const BATCH: usize = 64;

/// First delay before reading the journal again after a read failed; doubles up to
/// [`RETRY_MAX`].
const RETRY_INITIAL: Duration = Duration::from_millis(100);

/// Largest delay between attempts to read the journal.
const RETRY_MAX: Duration = Duration::from_secs(5);

/// How long a transaction waits for another connection's write.
const BUSY_WAIT: Duration = Duration::from_secs(5);

const SCHEMA: &str = "
CREATE TABLE pms (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The u64 sequence id bit for bit as a signed integer.
    seq INTEGER NOT NULL,
    sender TEXT NOT NULL,
    -- SHA-256 of the text: with seq and sender, the PM's identity.
    digest BLOB NOT NULL,
    -- NULL once handed on, or for a refused PM.
    body TEXT,
    received_at INTEGER NOT NULL,
    processed INTEGER NOT NULL CHECK (processed IN (0, 1)),
    cleared INTEGER NOT NULL DEFAULT 0 CHECK (cleared IN (0, 1))
) STRICT;
CREATE INDEX pms_uncleared ON pms (seq) WHERE cleared = 0;
CREATE INDEX pms_unprocessed ON pms (id) WHERE processed = 0;
-- The Bison Relay client this data directory serves (one row).
CREATE TABLE binding (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    identity TEXT NOT NULL,
    bound_at INTEGER NOT NULL
) STRICT;
";

/// Why a journal operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmJournalError {
    /// SQLite failed (open, read or write), at this file.
    #[error("pm journal {}: {source}", .path.display())]
    Sqlite {
        /// The journal file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file is not a brmcp PM journal (another application's, or a newer schema).
    #[error("pm journal {}: not a brmcp journal of schema {SCHEMA_VERSION} ({detail})", .path.display())]
    Foreign {
        /// The journal file.
        path: PathBuf,
        /// What gave it away.
        detail: String,
    },
    /// The data directory is bound to another Bison Relay client.
    #[error(
        "data directory {} belongs to the Bison Relay client {bound}, but the client \
         reached now is {found}: point the clientrpc config back at {bound}, or start \
         fresh with a new, empty data directory for {found}",
        .dir.display()
    )]
    OtherClient {
        /// The data directory.
        dir: PathBuf,
        /// The client it first served.
        bound: PeerId,
        /// The client reached now.
        found: PeerId,
    },
}

/// What [`PmJournal::record`] did with a PM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recorded {
    /// New: recorded, to be handed on.
    New,
    /// A redelivery of a PM recorded and not yet cleared: nothing changed.
    Duplicate,
    /// Longer than [`MAX_PM_BYTES`]: recorded without its text, never handed on.
    Refused,
}

/// A recorded PM not yet handed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournaledPm {
    /// The journal's row id (order of arrival).
    pub id: i64,
    /// The client's sequence id.
    pub seq: u64,
    /// Who sent it.
    pub from: PeerId,
    /// The text.
    pub body: String,
}

/// The PM journal of one data directory.
#[derive(Debug)]
pub struct PmJournal {
    conn: Mutex<Connection>,
    path: PathBuf,
    dir: PathBuf,
}

impl PmJournal {
    /// Opens (creating on first use) the journal in `dir`.
    ///
    /// # Errors
    ///
    /// [`PmJournalError::Sqlite`], or [`PmJournalError::Foreign`] for a file that is not a
    /// brmcp journal (left untouched).
    pub fn open(dir: &Path) -> Result<Self, PmJournalError> {
        let path = dir.join(FILE_NAME);
        let conn = connect(&path).map_err(|e| match e {
            Open::Sqlite(source) => PmJournalError::Sqlite {
                path: path.clone(),
                source,
            },
            Open::Foreign(detail) => PmJournalError::Foreign {
                path: path.clone(),
                detail,
            },
        })?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
            dir: dir.to_owned(),
        })
    }

    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic while the guard was held was inside a transaction, which rolled back.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sql(&self, source: rusqlite::Error) -> PmJournalError {
        PmJournalError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    /// Binds the data directory to `identity` if it is bound to nobody yet; checks it
    /// otherwise.
    ///
    /// # Errors
    ///
    /// [`PmJournalError::OtherClient`] when it is bound to another client (the error says
    /// how to start fresh), or [`PmJournalError::Sqlite`].
    pub fn bind(&self, identity: &PeerId, now: UnixTime) -> Result<(), PmJournalError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sql(e))?;
        let bound: Option<String> = tx
            .query_row("SELECT identity FROM binding WHERE one = 1", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.sql(e))?;
        match bound {
            None => {
                tx.execute(
                    "INSERT INTO binding (one, identity, bound_at) VALUES (1, ?1, ?2)",
                    params![identity.to_string(), now.secs()],
                )
                .map_err(|e| self.sql(e))?;
                tx.commit().map_err(|e| self.sql(e))?;
                tracing::info!(client = %identity, dir = %self.dir.display(), "data directory bound to its Bison Relay client");
                Ok(())
            }
            Some(bound) if bound == identity.to_string() => Ok(()),
            Some(bound) => Err(PmJournalError::OtherClient {
                dir: self.dir.clone(),
                bound: bound.parse().map_err(|_| PmJournalError::Foreign {
                    path: self.path.clone(),
                    detail: format!("binding {bound:?} is not a user id"),
                })?,
                found: *identity,
            }),
        }
    }

    /// The client this data directory is bound to, if any.
    ///
    /// # Errors
    ///
    /// [`PmJournalError::Sqlite`] or [`PmJournalError::Foreign`].
    pub fn bound(&self) -> Result<Option<PeerId>, PmJournalError> {
        let bound: Option<String> = self
            .conn()
            .query_row("SELECT identity FROM binding WHERE one = 1", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.sql(e))?;
        bound
            .map(|b| {
                b.parse().map_err(|_| PmJournalError::Foreign {
                    path: self.path.clone(),
                    detail: format!("binding {b:?} is not a user id"),
                })
            })
            .transpose()
    }

    /// Records one PM the client delivered; durable when it returns.
    ///
    /// # Errors
    ///
    /// [`PmJournalError::Sqlite`]: the PM is not recorded (do not acknowledge it).
    pub fn record(
        &self,
        seq: u64,
        from: &PeerId,
        body: &str,
        now: UnixTime,
    ) -> Result<Recorded, PmJournalError> {
        let digest = Sha256::digest(body.as_bytes()).to_vec();
        let sender = from.to_string();
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sql(e))?;
        let seen = tx
            .query_row(
                "SELECT 1 FROM pms WHERE seq = ?1 AND cleared = 0 AND sender = ?2 AND digest = ?3",
                params![seq_to_sql(seq), sender, digest],
                |_| Ok(()),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        if seen.is_some() {
            return Ok(Recorded::Duplicate);
        }
        let refused = body.len() > MAX_PM_BYTES;
        tx.execute(
            "INSERT INTO pms (seq, sender, digest, body, received_at, processed) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                seq_to_sql(seq),
                sender,
                digest,
                (!refused).then_some(body),
                now.secs(),
                refused
            ],
        )
        .map_err(|e| self.sql(e))?;
        tx.commit().map_err(|e| self.sql(e))?;
        if refused {
            tracing::warn!(
                seq,
                from = %from,
                bytes = body.len(),
                max = MAX_PM_BYTES,
                "PM too large: refused (recorded without its text and acknowledged)"
            );
            return Ok(Recorded::Refused);
        }
        Ok(Recorded::New)
    }

    /// The client confirmed clearing every PM with a sequence id up to `up_to`: marks
    /// them cleared, and deletes the rows handed on, cleared and older than
    /// [`KEEP_HANDLED`]. Returns how many were deleted.
    ///
    /// # Errors
    ///
    /// [`PmJournalError::Sqlite`].
    pub fn cleared(&self, up_to: u64, now: UnixTime) -> Result<usize, PmJournalError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sql(e))?;
        // Ids above 2^63 - 1 are stored negative: `0..=up_to` is the stored range
        // `0..=bound` for a non-negative bound, else everything non-negative plus
        // `..=bound`.
        tx.execute(
            "UPDATE pms SET cleared = 1 WHERE cleared = 0 AND \
             ((?1 >= 0 AND seq BETWEEN 0 AND ?1) OR (?1 < 0 AND (seq >= 0 OR seq <= ?1)))",
            [seq_to_sql(up_to)],
        )
        .map_err(|e| self.sql(e))?;
        let keep = i64::try_from(KEEP_HANDLED.as_secs()).unwrap_or(i64::MAX);
        let deleted = tx
            .execute(
                "DELETE FROM pms WHERE cleared = 1 AND processed = 1 AND received_at < ?1",
                [now.secs().saturating_sub(keep)],
            )
            .map_err(|e| self.sql(e))?;
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(deleted)
    }

    /// Up to `limit` recorded PMs not yet handed on, oldest first.
    ///
    /// # Errors
    ///
    /// [`PmJournalError::Sqlite`].
    pub fn unprocessed(&self, limit: usize) -> Result<Vec<JournaledPm>, PmJournalError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare(
                "SELECT id, seq, sender, body FROM pms WHERE processed = 0 ORDER BY id LIMIT ?1",
            )
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, String>(2)?,
                    row.get::<_, Option<String>>(3)?,
                ))
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, seq, sender, body) = row.map_err(|e| self.sql(e))?;
            let from = sender.parse().map_err(|_| PmJournalError::Foreign {
                path: self.path.clone(),
                detail: format!("sender {sender:?} is not a user id"),
            })?;
            out.push(JournaledPm {
                id,
                seq: seq_from_sql(seq),
                from,
                body: body.unwrap_or_default(),
            });
        }
        Ok(out)
    }

    /// The PM `id` was handed on: drops its text.
    ///
    /// # Errors
    ///
    /// [`PmJournalError::Sqlite`].
    pub fn processed(&self, id: i64) -> Result<(), PmJournalError> {
        self.conn()
            .execute(
                "UPDATE pms SET processed = 1, body = NULL WHERE id = ?1",
                [id],
            )
            .map_err(|e| self.sql(e))?;
        Ok(())
    }

    /// How many rows the journal holds (recorded and not yet both handed on and
    /// cleared).
    ///
    /// # Errors
    ///
    /// [`PmJournalError::Sqlite`].
    pub fn len(&self) -> Result<usize, PmJournalError> {
        let n: i64 = self
            .conn()
            .query_row("SELECT count(*) FROM pms", [], |r| r.get(0))
            .map_err(|e| self.sql(e))?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    /// Whether the journal holds no row.
    ///
    /// # Errors
    ///
    /// [`PmJournalError::Sqlite`].
    pub fn is_empty(&self) -> Result<bool, PmJournalError> {
        Ok(self.len()? == 0)
    }
}

/// The host's PM handler on a journal: records each PM (the host acknowledges it
/// after) and wakes the [`forward`] task that hands it on.
#[derive(Debug, Clone)]
pub struct JournalHandler {
    journal: Arc<PmJournal>,
    wake: Arc<Notify>,
}

impl JournalHandler {
    /// A handler recording into `journal`; `wake` is the forwarder's.
    pub const fn new(journal: Arc<PmJournal>, wake: Arc<Notify>) -> Self {
        Self { journal, wake }
    }
}

impl PmHandler for JournalHandler {
    async fn handle_pm(&self, pm: ReceivedPm) -> Result<(), BoxError> {
        let journal = self.journal.clone();
        let now = SystemClock.now();
        let recorded = tokio::task::spawn_blocking(move || {
            journal.record(pm.sequence_id, &pm.uid, &pm.msg.message, now)
        })
        .await??;
        if recorded == Recorded::New {
            self.wake.notify_one();
        }
        Ok(())
    }

    async fn cleared(&self, up_to: u64) -> Result<(), BoxError> {
        let journal = self.journal.clone();
        let now = SystemClock.now();
        tokio::task::spawn_blocking(move || journal.cleared(up_to, now)).await??;
        Ok(())
    }
}

/// Hands every recorded PM not yet handed on to `deliver`, oldest first: first what a
/// previous run left, then each PM as it is recorded (`wake`). Ends when `deliver`
/// fails (its receiver stopped: a router waits while busy and fails only once closed);
/// that PM and the later ones stay in the journal for the next start.
pub async fn forward<F, Fut>(journal: Arc<PmJournal>, wake: Arc<Notify>, deliver: F)
where
    F: Fn(PeerId, String) -> Fut + Send,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    let mut delay = RETRY_INITIAL;
    loop {
        let batch = {
            let journal = journal.clone();
            tokio::task::spawn_blocking(move || journal.unprocessed(BATCH)).await
        };
        let batch = match batch {
            Ok(Ok(batch)) => batch,
            Ok(Err(e)) => {
                tracing::error!(error = %e, ?delay, "pm journal unreadable; retrying");
                tokio::time::sleep(delay).await;
                delay = delay.saturating_mul(2).min(RETRY_MAX);
                continue;
            }
            // The runtime is shutting down.
            Err(_) => return,
        };
        if batch.is_empty() {
            wake.notified().await;
            continue;
        }
        for pm in batch {
            if let Err(e) = deliver(pm.from, pm.body.clone()).await {
                // The receiver waits while it is busy and fails only once it stopped.
                tracing::debug!(seq = pm.seq, error = %e, "PM receiver gone; the PM is handed on at the next start");
                return;
            }
            tracing::debug!(seq = pm.seq, from = %pm.from, "PM handed on");
            delay = RETRY_INITIAL;
            let journal = journal.clone();
            let id = pm.id;
            match tokio::task::spawn_blocking(move || journal.processed(id)).await {
                Ok(Ok(())) => {}
                // Handed on again after a restart: the session layer answers it.
                Ok(Err(e)) => tracing::warn!(seq = pm.seq, error = %e, "PM handed on, not marked"),
                Err(_) => return,
            }
        }
    }
}

/// The journal as [`crate::secure_fs::StampedOpen`] opens it.
const KIND: SqliteKind = SqliteKind {
    what: "PM journal",
    application_id: APPLICATION_ID,
    version: SCHEMA_VERSION,
    schema: SCHEMA,
    unstamped_table: "",
    migrations: &[],
};

enum Open {
    Sqlite(rusqlite::Error),
    Foreign(String),
}

fn connect(path: &Path) -> Result<Connection, Open> {
    let open =
        StampedOpen::check(path, BUSY_WAIT, &KIND, SqliteAccess::Own).map_err(|e| match e {
            StampError::Sqlite(e) => Open::Sqlite(e),
            StampError::Foreign(found) | StampError::Version(found) => Open::Foreign(format!(
                "application id {:#010x}, schema {}",
                found.application_id, found.user_version
            )),
            StampError::Missing => Open::Foreign("no schema".into()),
        })?;
    open.finish().map_err(Open::Sqlite)
}

/// A sequence id bit for bit as a SQLite integer.
const fn seq_to_sql(seq: u64) -> i64 {
    i64::from_ne_bytes(seq.to_ne_bytes())
}

const fn seq_from_sql(seq: i64) -> u64 {
    u64::from_ne_bytes(seq.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(b: u8) -> PeerId {
        PeerId::from_bytes([b; 32])
    }

    const NOW: UnixTime = UnixTime(1_800_000_000);

    #[test]
    fn a_redelivery_is_a_duplicate_until_cleared_then_new() {
        let dir = tempfile::tempdir().unwrap();
        let journal = PmJournal::open(dir.path()).unwrap();
        assert_eq!(
            journal.record(7, &peer(1), "hi", NOW).unwrap(),
            Recorded::New
        );
        assert_eq!(
            journal.record(7, &peer(1), "hi", NOW).unwrap(),
            Recorded::Duplicate
        );
        // Same id, other sender or text: another PM (ids reused by a reset client).
        assert_eq!(
            journal.record(7, &peer(2), "hi", NOW).unwrap(),
            Recorded::New
        );
        assert_eq!(
            journal.record(7, &peer(1), "ho", NOW).unwrap(),
            Recorded::New
        );
        journal.cleared(7, NOW).unwrap();
        // The client delivers nothing it cleared again: the same PM once more is new.
        assert_eq!(
            journal.record(7, &peer(1), "hi", NOW).unwrap(),
            Recorded::New
        );
        let pending = journal.unprocessed(10).unwrap();
        assert_eq!(pending.len(), 4);
        assert_eq!(pending[0].body, "hi");
    }

    #[test]
    fn rows_go_once_handed_on_cleared_and_old() {
        let dir = tempfile::tempdir().unwrap();
        let journal = PmJournal::open(dir.path()).unwrap();
        let later = UnixTime(NOW.0 + 3601);
        journal.record(5, &peer(1), "a", NOW).unwrap();
        journal.record(6, &peer(1), "c", NOW).unwrap();
        journal.record(u64::MAX, &peer(1), "b", NOW).unwrap();
        let [a, c, b] = <[JournaledPm; 3]>::try_from(journal.unprocessed(10).unwrap()).unwrap();
        assert_eq!(b.seq, u64::MAX);
        journal.processed(a.id).unwrap();
        journal.processed(c.id).unwrap();
        assert_eq!(
            journal.cleared(5, later).unwrap(),
            1,
            "6 is not cleared yet"
        );
        assert_eq!(journal.cleared(6, NOW).unwrap(), 0, "kept for KEEP_HANDLED");
        // Clearing past 2^63 covers the low ids too.
        assert_eq!(
            journal.cleared(u64::MAX, later).unwrap(),
            1,
            "b is not handed on yet"
        );
        journal.processed(b.id).unwrap();
        assert_eq!(journal.cleared(u64::MAX, later).unwrap(), 1);
        assert!(journal.is_empty().unwrap());
    }

    #[test]
    fn a_pm_too_large_is_refused_and_never_handed_on() {
        let dir = tempfile::tempdir().unwrap();
        let journal = PmJournal::open(dir.path()).unwrap();
        let big = "x".repeat(MAX_PM_BYTES + 1);
        assert_eq!(
            journal.record(9, &peer(1), &big, NOW).unwrap(),
            Recorded::Refused
        );
        assert_eq!(
            journal.record(9, &peer(1), &big, NOW).unwrap(),
            Recorded::Duplicate
        );
        assert!(journal.unprocessed(10).unwrap().is_empty());
        journal.cleared(9, UnixTime(NOW.0 + 3601)).unwrap();
        assert!(journal.is_empty().unwrap());
    }

    #[test]
    fn the_directory_is_bound_to_the_first_client() {
        let dir = tempfile::tempdir().unwrap();
        let journal = PmJournal::open(dir.path()).unwrap();
        journal.bind(&peer(1), NOW).unwrap();
        journal.bind(&peer(1), NOW).unwrap();
        let again = PmJournal::open(dir.path()).unwrap();
        let e = again.bind(&peer(2), NOW).unwrap_err();
        assert!(matches!(e, PmJournalError::OtherClient { .. }), "{e}");
        let text = e.to_string();
        assert!(
            text.contains(&peer(1).to_string()) && text.contains("new, empty data directory"),
            "{text}"
        );
        assert_eq!(again.bound().unwrap(), Some(peer(1)));
    }

    #[test]
    fn a_foreign_file_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        let other = Connection::open(&path).unwrap();
        other.execute_batch("CREATE TABLE t (x)").unwrap();
        drop(other);
        let e = PmJournal::open(dir.path()).unwrap_err();
        assert!(matches!(e, PmJournalError::Foreign { .. }), "{e}");
    }
}
