//! A tip is identified by its sequence id, its caller and its amount: the same id
//! with another caller or amount is another tip, credited; a tip repeating an id the
//! client confirmed clearing is a redelivery within the replay window
//! (`TIP_REPLAY_WINDOW_SECS`: a stream reopened while an ack was in flight, a client
//! that lost an ack in a crash) and new after it (the client's logs were reset). A
//! schema 1 ledger is migrated with its tips.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{FILE_NAME, Ledger, SCHEMA_VERSION, TIP_REPLAY_WINDOW_SECS, Tip, TipOutcome};

use crate::support::ledger::schema_version;

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const BOB: PeerId = PeerId::from_bytes([0xb0; 32]);

/// A moment past the replay window of a tip received at [`NOW`].
fn after_window() -> UnixTime {
    UnixTime(NOW.0 + i64::try_from(TIP_REPLAY_WINDOW_SECS).unwrap() + 1)
}

fn tip(seq: u64, caller: PeerId, matoms: u64) -> Tip {
    Tip {
        seq,
        caller,
        matoms,
    }
}

#[test]
fn a_reused_id_with_another_caller_or_amount_is_credited() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let first = tip(100, ALICE, 10_000_000);
    assert_eq!(
        ledger.record_tip(&first, true, NOW).unwrap(),
        TipOutcome::Credited
    );
    // Same id, another caller: another client's tip, or one after a log reset.
    assert_eq!(
        ledger
            .record_tip(&tip(100, BOB, 10_000_000), true, NOW)
            .unwrap(),
        TipOutcome::Credited
    );
    // Same id and caller, another amount.
    assert_eq!(
        ledger
            .record_tip(&tip(100, ALICE, 2_000), true, NOW)
            .unwrap(),
        TipOutcome::Credited
    );
    // The redeliveries of each are still recognised.
    for t in [first, tip(100, BOB, 10_000_000), tip(100, ALICE, 2_000)] {
        assert_eq!(
            ledger.record_tip(&t, true, NOW).unwrap(),
            TipOutcome::Duplicate
        );
    }
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 10_002_000);
    assert_eq!(ledger.balance_matoms(&BOB).unwrap(), 10_000_000);
}

#[test]
fn a_cleared_id_replayed_within_the_window_is_a_duplicate_and_new_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let t = tip(4_294_967_393, ALICE, 10_000_000);
    assert_eq!(
        ledger.record_tip(&t, true, NOW).unwrap(),
        TipOutcome::Credited
    );
    // Not cleared yet: a redelivery.
    assert_eq!(
        ledger.record_tip(&t, true, NOW).unwrap(),
        TipOutcome::Duplicate
    );
    assert_eq!(ledger.clear_tips(t.seq).unwrap(), 1);
    // Cleared, and replayed anyway (a stream reopened while the ack was in flight, or
    // a client that lost the ack in a crash): still a redelivery, up to the window's
    // last second.
    let last = UnixTime(after_window().0 - 1);
    for at in [NOW, last] {
        assert_eq!(
            ledger.record_tip(&t, true, at).unwrap(),
            TipOutcome::Duplicate,
            "at {at:?}"
        );
    }
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 10_000_000);
    // Past the window the same identity is a new tip (the client's logs were reset
    // and its ids started over), and its own redelivery a duplicate.
    let later = after_window();
    assert_eq!(
        ledger.record_tip(&t, true, later).unwrap(),
        TipOutcome::Credited
    );
    assert_eq!(
        ledger.record_tip(&t, true, later).unwrap(),
        TipOutcome::Duplicate
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 20_000_000);
    // Clearing below an id leaves it uncleared.
    assert_eq!(ledger.clear_tips(t.seq - 1).unwrap(), 0);
    assert_eq!(
        ledger.record_tip(&t, true, later).unwrap(),
        TipOutcome::Duplicate
    );
    // Another caller or amount under the cleared id is another tip, in the window.
    assert_eq!(ledger.clear_tips(t.seq).unwrap(), 1);
    assert_eq!(
        ledger
            .record_tip(&tip(t.seq, BOB, 10_000_000), true, later)
            .unwrap(),
        TipOutcome::Credited
    );
    assert_eq!(
        ledger
            .record_tip(&tip(t.seq, ALICE, 5), true, later)
            .unwrap(),
        TipOutcome::Credited
    );
}

#[test]
fn clearing_covers_every_id_up_to_the_bound_over_all_64_bits() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    for seq in [5, 1 << 62, 1 << 63, u64::MAX - 1, u64::MAX] {
        ledger.record_tip(&tip(seq, ALICE, 1), true, NOW).unwrap();
    }
    assert_eq!(ledger.clear_tips(1 << 63).unwrap(), 3, "5, 2^62 and 2^63");
    assert_eq!(ledger.clear_tips(u64::MAX - 1).unwrap(), 1);
    assert_eq!(ledger.clear_tips(u64::MAX).unwrap(), 1);
    assert_eq!(
        ledger
            .record_tip(&tip(u64::MAX, ALICE, 1), true, after_window())
            .unwrap(),
        TipOutcome::Credited
    );
}

#[test]
fn clearing_is_allowed_beside_the_serving_process() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    ledger.record_tip(&tip(7, ALICE, 1), true, NOW).unwrap();
    let attached = Ledger::attach(dir.path()).unwrap();
    assert_eq!(attached.clear_tips(7).unwrap(), 1);
    assert_eq!(
        ledger
            .record_tip(&tip(7, ALICE, 1), true, after_window())
            .unwrap(),
        TipOutcome::Credited
    );
}

/// Schema 1 as it was shipped.
const SCHEMA_1: &str = "CREATE TABLE balances (
    caller TEXT PRIMARY KEY NOT NULL,
    matoms INTEGER NOT NULL CHECK (matoms >= 0)
) STRICT, WITHOUT ROWID;
CREATE TABLE tips (
    seq INTEGER PRIMARY KEY NOT NULL,
    caller TEXT NOT NULL,
    matoms INTEGER NOT NULL CHECK (matoms >= 0),
    credited INTEGER NOT NULL CHECK (credited IN (0, 1)),
    received_at INTEGER NOT NULL
) STRICT;
CREATE TABLE calls (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    caller TEXT NOT NULL,
    tool TEXT NOT NULL,
    price_atoms INTEGER NOT NULL CHECK (price_atoms >= 0),
    state TEXT NOT NULL CHECK (state IN ('pending', 'completed', 'refunded')),
    started_at INTEGER NOT NULL,
    finished_at INTEGER,
    reason TEXT,
    call_key TEXT,
    args_hash BLOB,
    key_held INTEGER NOT NULL DEFAULT 0 CHECK (key_held IN (0, 1)),
    outcome TEXT,
    replay_until INTEGER,
    CHECK (key_held = 0 OR call_key IS NOT NULL)
) STRICT;
CREATE UNIQUE INDEX calls_by_key ON calls (caller, call_key) WHERE key_held = 1;
CREATE INDEX calls_by_caller ON calls (caller, id);
CREATE INDEX calls_pending ON calls (id) WHERE state = 'pending';
CREATE INDEX calls_replay_until ON calls (replay_until) WHERE key_held = 1;
CREATE TABLE audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    caller TEXT NOT NULL,
    action TEXT NOT NULL CHECK (action IN ('credit', 'refund')),
    matoms INTEGER NOT NULL CHECK (matoms >= 0),
    call_id INTEGER REFERENCES calls (id),
    reason TEXT NOT NULL
) STRICT;
";

#[test]
fn a_schema_1_ledger_is_migrated_with_its_tips() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = rusqlite::Connection::open(dir.path().join(FILE_NAME)).unwrap();
        db.execute_batch(SCHEMA_1).unwrap();
        db.pragma_update(None, "application_id", 0x6272_6d63)
            .unwrap();
        db.pragma_update(None, "user_version", 1).unwrap();
        db.execute(
            "INSERT INTO tips (seq, caller, matoms, credited, received_at) VALUES (?1, ?2, 5000, 1, ?3)",
            rusqlite::params![42, ALICE.to_string(), NOW.secs()],
        )
        .unwrap();
        db.execute(
            "INSERT INTO balances (caller, matoms) VALUES (?1, 5000)",
            [ALICE.to_string()],
        )
        .unwrap();
    }
    // Beside a server of the old schema, nothing is migrated.
    assert!(Ledger::attach(dir.path()).is_err());
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    assert_eq!(
        ledger.record_tip(&tip(42, ALICE, 5000), true, NOW).unwrap(),
        TipOutcome::Duplicate,
        "the migrated tip still recognises its redelivery"
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 5000);
    drop(ledger);
    assert_eq!(schema_version(&dir.path().join(FILE_NAME)), SCHEMA_VERSION);
}
