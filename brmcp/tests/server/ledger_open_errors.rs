//! A database that is not a usable ledger is a clear start-up error and is never reset.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{FILE_NAME, LOCK_FILE_NAME, Ledger, LedgerError, Tip};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);

fn open_err(dir: &std::path::Path) -> LedgerError {
    Ledger::open(dir, NOW).expect_err("open must fail")
}

#[test]
fn garbage_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let garbage: Vec<u8> = (0..8192u32).map(|i| (i * 7 + 3) as u8).collect();
    std::fs::write(&path, &garbage).unwrap();

    let err = open_err(dir.path());
    assert!(matches!(err, LedgerError::NotALedger { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "ledger: database at {} is not a brmcp ledger: file is not a database",
            path.display()
        )
    );
    assert_eq!(std::fs::read(&path).unwrap(), garbage);
    // Nothing was created beside it but the directory's lock file.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, [FILE_NAME, LOCK_FILE_NAME]);
}

#[test]
fn short_garbage_file_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    std::fs::write(&path, b"{\"balances\":{}}\n").unwrap();
    assert!(matches!(
        open_err(dir.path()),
        LedgerError::NotALedger { .. }
    ));
    assert_eq!(std::fs::read(&path).unwrap(), b"{\"balances\":{}}\n");
}

#[test]
fn a_directory_where_the_file_should_be_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    std::fs::create_dir(&path).unwrap();
    let err = open_err(dir.path());
    assert!(matches!(err, LedgerError::NotAFile { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "ledger: database path {} is not a regular file",
            path.display()
        )
    );
}

#[test]
fn another_applications_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch("CREATE TABLE notes (body TEXT); INSERT INTO notes VALUES ('mine');")
        .unwrap();
    let before = std::fs::read(&path).unwrap();

    let err = open_err(dir.path());
    assert!(matches!(err, LedgerError::NotALedger { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "ledger: database at {} is not a brmcp ledger: application id 0x00000000, not 0x62726d63",
            path.display()
        )
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[test]
fn damaged_pages_are_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    {
        // Every table and index has a root page, so even a small ledger spans pages.
        let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
        let tip = Tip {
            seq: 1,
            caller: ALICE,
            matoms: 1,
        };
        ledger.record_tip(&tip, true, NOW).unwrap();
    }
    let path = dir.path().join(FILE_NAME);
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() >= 3 * 4096, "{} bytes", bytes.len());
    // Scribble over the second page (the root of `balances`), keeping its type byte.
    for b in &mut bytes[4096 + 8..2 * 4096] {
        *b = 0xee;
    }
    std::fs::write(&path, &bytes).unwrap();

    let err = open_err(dir.path());
    assert!(matches!(err, LedgerError::Corrupt { .. }), "{err:?}");
    let prefix = format!(
        "ledger: database at {} failed its integrity check: *** in database main ***; ",
        path.display()
    );
    assert!(err.to_string().starts_with(&prefix), "{err}");
    assert!(!err.to_string().contains('\n'), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_second_open_while_the_first_lives_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let first = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let err = open_err(dir.path());
    assert!(matches!(err, LedgerError::InUse { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "ledger: database at {} is in use by another process (it holds brmcp.sqlite.lock)",
            first.path().display()
        )
    );
    drop(first);
    Ledger::open(dir.path(), NOW).unwrap();
}
