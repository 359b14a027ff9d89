//! The ledger is one versioned SQLite file in WAL mode, created on first open.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{APPLICATION_ID, FILE_NAME, LOCK_FILE_NAME, Ledger, SCHEMA_VERSION};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);

#[test]
fn first_open_creates_a_versioned_wal_database() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("data").join("brmcp");
    let opened = Ledger::open(&nested, NOW).unwrap();
    assert_eq!(opened.refunded, 0);
    let ledger = opened.ledger;
    assert_eq!(ledger.path(), nested.join(FILE_NAME));
    ledger.manual_credit(&ALICE, 1_000, "first", NOW).unwrap();

    // The database with its WAL and WAL index, and the directory's lock file.
    let mut names: Vec<String> = std::fs::read_dir(&nested)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            FILE_NAME.to_owned(),
            format!("{FILE_NAME}-shm"),
            format!("{FILE_NAME}-wal"),
            LOCK_FILE_NAME.to_owned()
        ]
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(ledger.path()), 0o600);
        assert_eq!(mode(&nested.join(LOCK_FILE_NAME)), 0o600);
        assert_eq!(mode(&nested), 0o700);
    }
    drop(ledger);

    let conn = rusqlite::Connection::open(nested.join(FILE_NAME)).unwrap();
    let journal_mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    let version: i32 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let app_id: i32 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        (journal_mode.as_str(), version, app_id),
        ("wal", SCHEMA_VERSION, APPLICATION_ID)
    );
    drop(conn);

    // And it opens again with its data.
    let ledger = Ledger::open(&nested, NOW).unwrap().ledger;
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 1_000);
}
