//! The directory's and the registrant's SQLite files go through the secure open path:
//! the file 0600 and its directory 0700 whatever the umask, a symbolic link refused
//! (at the file or a sidecar), a file from before the stamp opened with its rows,
//! and another program's file refused by name and left unchanged.

#![cfg(unix)]

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use brmcp::adapters::mem::uid;
use brmcp::directory::{
    FUND_HISTORY_APPLICATION_ID, FUND_HISTORY_FILE, KEY_FILE, PayError, PayFuture, Payer,
    Registrant, RegistrantConfig, STORE_APPLICATION_ID, STORE_FILE, STORE_SCHEMA_VERSION, Store,
    TestSpec,
};

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn stamp(path: &Path) -> (i32, i32) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let id = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    let version = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    (id, version)
}

/// A payer that never pays (the files are all these tests look at).
struct NoPay;

impl Payer for NoPay {
    fn pay(&self, _: brmcp::adapters::PeerId, _: u64) -> PayFuture<'_> {
        Box::pin(async { Err(PayError::Failed("no payments here".into())) })
    }
}

fn registrant(dir: &Path) -> Result<Registrant, String> {
    let test = TestSpec {
        tool: "paid_echo".into(),
        args: None,
        max_atoms: 2000,
    };
    Registrant::new(RegistrantConfig::new("an echo", test, dir, NoPay))
}

/// A data directory made loose (0755, 0644) by an older version or a careless umask.
fn loose_dir(root: &Path) -> PathBuf {
    let dir = root.join("data");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

#[test]
fn the_store_is_private_and_refuses_links() {
    let root = tempfile::tempdir().unwrap();
    let dir = loose_dir(root.path());
    let path = dir.join(STORE_FILE);

    // A link at the store, or at its WAL, would make the directory write elsewhere.
    let elsewhere = root.path().join("elsewhere.sqlite");
    symlink(&elsewhere, &path).unwrap();
    let err = Store::open(&dir).unwrap_err().to_string();
    assert!(
        err.contains("symbolic link") && err.contains(STORE_FILE),
        "{err}"
    );
    assert!(!elsewhere.exists(), "nothing written through the link");
    std::fs::remove_file(&path).unwrap();
    symlink(&elsewhere, sidecar(&path, "-wal")).unwrap();
    let err = Store::open(&dir).unwrap_err().to_string();
    assert!(err.contains("symbolic link"), "{err}");
    assert!(!elsewhere.exists());
    std::fs::remove_file(sidecar(&path, "-wal")).unwrap();

    let store = Store::open(&dir).unwrap();
    store
        .update("a", |s| {
            s.entry.flag = "kept".into();
            Ok(())
        })
        .unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(mode(&sidecar(&path, "-wal")), 0o600);
    assert_eq!(stamp(&path), (STORE_APPLICATION_ID, STORE_SCHEMA_VERSION));
    drop(store);

    // A store made loose since is tightened at the next open.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = Store::open(&dir).unwrap();
    assert_eq!(mode(&path), 0o600);
    assert_eq!(store.get("a").unwrap().entry.flag, "kept");
}

#[tokio::test]
async fn the_directory_makes_its_data_directory_and_files_private() {
    let root = tempfile::tempdir().unwrap();
    let dir = loose_dir(root.path());
    let payer = NoPay;
    let directory = brmcp::directory::Directory::builder()
        .data_dir(&dir)
        .payer(payer)
        .self_uid(uid(1))
        .build()
        .unwrap();
    assert_eq!(mode(&dir), 0o700, "the data directory is tightened");
    assert_eq!(mode(&dir.join(STORE_FILE)), 0o600);
    assert_eq!(mode(&dir.join(KEY_FILE)), 0o600);
    let key = directory.public_key();
    drop(directory);

    // The signing key: a link is refused rather than read.
    let moved = root.path().join("key.json");
    std::fs::rename(dir.join(KEY_FILE), &moved).unwrap();
    symlink(&moved, dir.join(KEY_FILE)).unwrap();
    let err = brmcp::directory::Directory::builder()
        .data_dir(&dir)
        .payer(NoPay)
        .build()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("symbolic link") && err.contains(KEY_FILE),
        "{err}"
    );
    std::fs::remove_file(dir.join(KEY_FILE)).unwrap();
    std::fs::rename(&moved, dir.join(KEY_FILE)).unwrap();
    std::fs::set_permissions(dir.join(KEY_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
    let directory = brmcp::directory::Directory::builder()
        .data_dir(&dir)
        .payer(NoPay)
        .build()
        .unwrap();
    assert_eq!(directory.public_key(), key, "the same key, read again");
    assert_eq!(mode(&dir.join(KEY_FILE)), 0o600, "and tightened");
}

#[test]
fn a_store_from_before_the_stamp_opens_with_its_rows_and_a_foreign_file_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let path = dir.join(STORE_FILE);
    // What earlier versions wrote: the same tables, no application id or version.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE entries (uid TEXT PRIMARY KEY NOT NULL, entry TEXT NOT NULL,
                 fund_key TEXT NOT NULL DEFAULT '') STRICT, WITHOUT ROWID;
             INSERT INTO entries VALUES ('a', '{\"flag\":\"old\"}', '');",
        )
        .unwrap();
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = Store::open(dir).unwrap();
    assert_eq!(store.get("a").unwrap().entry.flag, "old");
    assert!(
        store.spends().unwrap().is_empty(),
        "the missing tables made"
    );
    drop(store);
    assert_eq!(stamp(&path), (STORE_APPLICATION_ID, STORE_SCHEMA_VERSION));
    assert_eq!(mode(&path), 0o600);

    // Another program's database is named and left exactly as it was.
    let other = tempfile::tempdir().unwrap();
    let foreign = other.path().join(STORE_FILE);
    {
        let conn = rusqlite::Connection::open(&foreign).unwrap();
        conn.execute_batch("CREATE TABLE notes (x TEXT); PRAGMA application_id = 7;")
            .unwrap();
    }
    let before = std::fs::read(&foreign).unwrap();
    let err = Store::open(other.path()).unwrap_err().to_string();
    assert!(
        err.contains(STORE_FILE) && err.contains("not a directory store"),
        "{err}"
    );
    assert_eq!(std::fs::read(&foreign).unwrap(), before, "unchanged");

    // So is a store of a later schema.
    let later = tempfile::tempdir().unwrap();
    {
        let conn = rusqlite::Connection::open(later.path().join(STORE_FILE)).unwrap();
        conn.execute_batch(&format!(
            "CREATE TABLE entries (uid TEXT); PRAGMA application_id = {STORE_APPLICATION_ID};
             PRAGMA user_version = {};",
            STORE_SCHEMA_VERSION + 1
        ))
        .unwrap();
    }
    let err = Store::open(later.path()).unwrap_err().to_string();
    assert!(err.contains("schema version 2"), "{err}");
}

#[test]
fn the_fund_history_is_private_refuses_links_and_keeps_older_rows() {
    let root = tempfile::tempdir().unwrap();
    let dir = loose_dir(root.path());
    let path = dir.join(FUND_HISTORY_FILE);

    let elsewhere = root.path().join("elsewhere.sqlite");
    symlink(&elsewhere, &path).unwrap();
    let err = registrant(&dir).unwrap_err();
    assert!(
        err.contains("symbolic link") && err.contains(FUND_HISTORY_FILE),
        "{err}"
    );
    assert!(!elsewhere.exists());
    std::fs::remove_file(&path).unwrap();

    let reg = registrant(&dir).unwrap();
    reg.record_fund(1000, &uid(2), 300).unwrap();
    assert_eq!(mode(&dir), 0o700);
    assert_eq!(mode(&path), 0o600);
    assert_eq!(stamp(&path).0, FUND_HISTORY_APPLICATION_ID);
    drop(reg);

    // A history written before the stamp: its spending still counts against the cap.
    let old = root.path().join("old");
    std::fs::create_dir(&old).unwrap();
    {
        let conn = rusqlite::Connection::open(old.join(FUND_HISTORY_FILE)).unwrap();
        conn.execute_batch(
            "CREATE TABLE fund_history (id INTEGER PRIMARY KEY AUTOINCREMENT,
                 ts INTEGER NOT NULL, directory_uid TEXT NOT NULL, atoms INTEGER NOT NULL) STRICT;
             INSERT INTO fund_history (ts, directory_uid, atoms) VALUES (1000, 'd', 700);",
        )
        .unwrap();
    }
    let reg = registrant(&old).unwrap();
    assert_eq!(reg.total_since(0).unwrap(), 700);
    drop(reg);
    assert_eq!(
        stamp(&old.join(FUND_HISTORY_FILE)).0,
        FUND_HISTORY_APPLICATION_ID
    );
    assert_eq!(mode(&old.join(FUND_HISTORY_FILE)), 0o600);

    // The directory's store is not a fund history: refused, unchanged.
    let mixed = root.path().join("mixed");
    std::fs::create_dir_all(mixed.join("x")).unwrap();
    drop(Store::open(&mixed.join("x")).unwrap());
    std::fs::rename(
        mixed.join("x").join(STORE_FILE),
        mixed.join(FUND_HISTORY_FILE),
    )
    .unwrap();
    let err = registrant(&mixed).unwrap_err();
    assert!(
        err.contains(FUND_HISTORY_FILE) && err.contains("not a registrant fund history"),
        "{err}"
    );
}
