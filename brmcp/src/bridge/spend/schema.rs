//! The spend log's file: its identity, its schema, and the migration of older
//! versions, applied whenever the log is opened.

use std::path::Path;

use rusqlite::{Connection, params};

use super::SpendError;

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
    unconfirmed INTEGER NOT NULL DEFAULT 0,
    tip_pos INTEGER NOT NULL DEFAULT 0,
    outcome INTEGER,
    agent  TEXT    NOT NULL DEFAULT 'default',
    left_atoms INTEGER NOT NULL DEFAULT 0,
    call_key TEXT,
    pending_since INTEGER
);
CREATE INDEX IF NOT EXISTS spend_ts ON spend (ts);
CREATE TABLE IF NOT EXISTS credit_use (
    id        INTEGER PRIMARY KEY,
    ts        INTEGER NOT NULL,
    bot       TEXT    NOT NULL,
    tool      TEXT    NOT NULL,
    agent     TEXT    NOT NULL,
    atoms     INTEGER NOT NULL CHECK (atoms > 0),
    credit_of TEXT
);
CREATE INDEX IF NOT EXISTS credit_use_ts ON credit_use (ts);
CREATE TABLE IF NOT EXISTS tip_floor (
    id  INTEGER PRIMARY KEY CHECK (id = 1),
    pos INTEGER NOT NULL
);
";

/// Columns added after version 1, with their declarations: an older log gains them
/// when opened. `agent` (version 4): the rows before it were the default agent's.
/// `left_atoms` (version 5): the rows before it count as collected by their calls.
/// `call_key` (version 6): the rows before it name no call. `pending_since` (version
/// 7): a row without it is uncertain since its own reservation.
const ADDED_COLUMNS: [(&str, &str); 7] = [
    ("unconfirmed", "INTEGER NOT NULL DEFAULT 0"),
    ("tip_pos", "INTEGER NOT NULL DEFAULT 0"),
    ("outcome", "INTEGER"),
    ("agent", "TEXT NOT NULL DEFAULT 'default'"),
    ("left_atoms", "INTEGER NOT NULL DEFAULT 0"),
    ("call_key", "TEXT"),
    ("pending_since", "INTEGER"),
];

/// The schema version written to `PRAGMA user_version`.
/// Version 5 added `left_atoms` and the `credit_use` table (the credit module's
/// records of calls answered from credit at a bot); version 6 `call_key`, the call
/// journal's key of the call a payment was for; version 7 `pending_since`, when the
/// uncertainty a pending payment stands for began (see `SpendLog::stays_pending_for`).
const USER_VERSION: i32 = 7;

/// How long an open waits for another connection's lock.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Opens the log's database at `path`, refusing another application's, and brings
/// its schema to [`USER_VERSION`].
pub(super) fn open(path: &Path) -> Result<Connection, SpendError> {
    let (db, identity) = crate::secure_fs::open_sqlite(path, BUSY_WAIT)?;
    // Identified before anything is written: another program's file stays untouched.
    if identity.application_id != APPLICATION_ID && !identity.fresh {
        return Err(SpendError::Foreign(path.display().to_string()));
    }
    db.pragma_update(None, "journal_mode", "WAL")?;
    crate::secure_fs::seal_sqlite(path)?;
    db.pragma_update(None, "synchronous", "FULL")?;
    db.pragma_update(None, "application_id", APPLICATION_ID)?;
    db.execute_batch(SCHEMA)?;
    for (name, decl) in ADDED_COLUMNS {
        let present: bool = db.query_row(
            "SELECT count(*) FROM pragma_table_info('spend') WHERE name = ?1",
            params![name],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !present {
            db.execute_batch(&format!("ALTER TABLE spend ADD COLUMN {name} {decl}"))?;
        }
    }
    // An outcome settles at most one row.
    db.execute_batch("CREATE UNIQUE INDEX IF NOT EXISTS spend_outcome ON spend (outcome)")?;
    // A restart looks up a call's payment by its key.
    db.execute_batch("CREATE INDEX IF NOT EXISTS spend_call ON spend (call_key)")?;
    db.pragma_update(None, "user_version", USER_VERSION)?;
    Ok(db)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::spend::{
        Payment, Resolution, SPEND_FILE, SpendLog, Spender, TipOutcomeEvent,
    };
    use brmcp_adapters::PeerId;
    use brmcp_adapters::wire::UnixTime;

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
        assert_eq!(
            log.resolve_outcome(&TipOutcomeEvent {
                id: 1,
                bot: PeerId::from_bytes([1; 32]),
                atoms: 7,
                outcome: Ok(()),
            })
            .unwrap(),
            Resolution::Settled(1)
        );
        assert_eq!(log.spent_today(UnixTime(200)).unwrap(), 7);
        assert_eq!(
            entries[0].agent, "default",
            "older rows are the default agent's"
        );
        assert_eq!(log.spent_today_by(UnixTime(200), "default").unwrap(), 7);
    }

    #[test]
    fn a_version_4_log_gains_the_credit_records_its_payments_counted_collected() {
        let dir = tempfile::tempdir().unwrap();
        let old = Connection::open(dir.path().join(SPEND_FILE)).unwrap();
        old.pragma_update(None, "application_id", APPLICATION_ID)
            .unwrap();
        old.pragma_update(None, "user_version", 4).unwrap();
        old.execute_batch(
            "CREATE TABLE spend (id INTEGER PRIMARY KEY, ts INTEGER NOT NULL, \
             bot TEXT NOT NULL, tool TEXT NOT NULL, rail TEXT NOT NULL, \
             atoms INTEGER NOT NULL CHECK (atoms > 0), status TEXT NOT NULL \
             CHECK (status IN ('pending', 'paid', 'failed')), err TEXT, \
             unconfirmed INTEGER NOT NULL DEFAULT 0, tip_pos INTEGER NOT NULL DEFAULT 0, \
             outcome INTEGER, agent TEXT NOT NULL DEFAULT 'default');
             CREATE TABLE tip_floor (id INTEGER PRIMARY KEY CHECK (id = 1), pos INTEGER NOT NULL);
             INSERT INTO spend (ts, bot, tool, rail, atoms, status, agent) \
             VALUES (100, '0101010101010101010101010101010101010101010101010101010101010101', 't', 'tip', 7, 'paid', 'ci');",
        )
        .unwrap();
        drop(old);
        let log = SpendLog::open(dir.path(), UnixTime(200)).unwrap();
        assert!(
            log.uncollected(None).unwrap().is_empty(),
            "collected before"
        );
        assert_eq!(log.spent_today_by(UnixTime(200), "ci").unwrap(), 7);
        let bot = PeerId::from_bytes([1; 32]);
        let id = log
            .reserve_as(
                UnixTime(200),
                &Spender::agent("ci", None),
                Payment::new(&bot, "t", 5),
                100,
                0,
            )
            .unwrap()
            .unwrap();
        assert_eq!(log.left_of(id).unwrap(), 5);
        let used = log.collect(UnixTime(200), &bot, "x", "t", None, 6).unwrap();
        assert_eq!(used.others, vec![(Some("ci".to_owned()), 5), (None, 1)]);
        let version: i32 = Connection::open(dir.path().join(SPEND_FILE))
            .unwrap()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, USER_VERSION);
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
