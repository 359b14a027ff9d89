//! One caller sending large results at the rate limit for longer than two replay
//! windows: the journal keeps at most its bound of rows for the caller, the money of
//! the pruned rows stays counted, and once the replay window has passed the file gives
//! its space back instead of staying at its largest.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    CallKey, CallRequest, CallState, Charge, DEFAULT_CALLS_PER_MINUTE, FILE_NAME, Ledger,
    MAX_JOURNAL_ROWS_PER_CALLER, MAX_OUTCOME_BYTES_PER_CALLER, OUTCOME_TTL_SECS, PRUNE_EVERY,
    SCHEMA_VERSION, Tip, VACUUM_FREE_PAGES,
};

use crate::support::ledger::{document_call, ledger_bytes};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const TIP_MATOMS: u64 = 100_000_000;

/// Result bytes per call: large enough that a replay window's worth overflows the
/// per-caller outcome bound.
const RESULT_LEN: usize = 32 << 10;

/// Calls made: past the row bound, and at the rate limit longer than two replay windows.
const CALLS: usize = MAX_JOURNAL_ROWS_PER_CALLER + 256;

/// The ledger's files, once the replay window has passed, at most: the rows the bound
/// keeps (well under 1 MiB) plus the free pages the file may keep.
const SETTLED_BYTES: u64 = (1 << 20) + VACUUM_FREE_PAGES as u64 * 4096;

fn key(n: usize) -> CallKey {
    CallKey::new(&format!("call-number-{n:05}")).expect("key")
}

fn request(key: &CallKey) -> CallRequest<'_> {
    document_call(ALICE, key)
}

#[test]
fn a_caller_at_the_rate_limit_keeps_the_ledger_within_its_bound() {
    let interval = 60 / u64::from(DEFAULT_CALLS_PER_MINUTE);
    assert!(CALLS as u64 * interval > 2 * OUTCOME_TTL_SECS);

    let dir = tempfile::tempdir().expect("dir");
    let ledger = Ledger::open(dir.path(), NOW).expect("open").ledger;
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms: TIP_MATOMS,
    };
    ledger.record_tip(&tip, true, NOW).expect("tip");

    let outcome = format!("{{\"text\":\"{}\"}}", "x".repeat(RESULT_LEN));
    let mut largest = 0;
    let mut most_rows = 0;
    for n in 0..CALLS {
        let at = NOW.saturating_add(n as u64 * interval);
        let key = key(n);
        let Charge::Run(call) = ledger.charge(&request(&key), at).expect("charge") else {
            panic!("call {n} did not run");
        };
        ledger.complete(call, &outcome, at).expect("complete");
        largest = largest.max(ledger_bytes(dir.path()));
        if n % 64 == 0 || n + 1 == CALLS {
            let rows = ledger.journal(Some(&ALICE), usize::MAX).expect("journal");
            most_rows = most_rows.max(rows.len());
        }
    }
    let running = (MAX_OUTCOME_BYTES_PER_CALLER + (8 << 20)) as u64;
    assert!(
        largest <= running,
        "ledger files reached {largest} bytes, bound {running}"
    );
    // Pruned every PRUNE_EVERY charges: never more than that many rows past the bound.
    assert!(
        (MAX_JOURNAL_ROWS_PER_CALLER..MAX_JOURNAL_ROWS_PER_CALLER + PRUNE_EVERY as usize)
            .contains(&most_rows),
        "{most_rows} rows kept, bound {MAX_JOURNAL_ROWS_PER_CALLER} + {PRUNE_EVERY}"
    );

    // The pruned calls' money is counted: credits = balance + every completed price.
    let journal = ledger.journal(Some(&ALICE), usize::MAX).expect("journal");
    let pruned = ledger.pruned(&ALICE).expect("pruned");
    assert_eq!(pruned.completed as usize, CALLS - journal.len());
    let kept_atoms: u64 = journal
        .iter()
        .filter(|e| e.state == CallState::Completed)
        .map(|e| e.price_atoms)
        .sum();
    let balance = ledger.balance_matoms(&ALICE).expect("balance");
    assert_eq!(
        TIP_MATOMS,
        balance + (kept_atoms + pruned.completed_atoms) * 1000
    );
    // The newest call still replays.
    let end = NOW.saturating_add((CALLS as u64 - 1) * interval);
    assert!(matches!(
        ledger
            .charge(&request(&key(CALLS - 1)), end)
            .expect("replay"),
        Charge::Replay(_)
    ));

    // Past the last replay window no outcome is kept, and the file shrinks.
    let settled = end.saturating_add(OUTCOME_TTL_SECS);
    ledger.purge_expired(settled).expect("purge");
    let journal = ledger.journal(Some(&ALICE), usize::MAX).expect("journal");
    assert!(journal.iter().all(|e| !e.outcome_kept && !e.key_held));
    drop(ledger);
    let bytes = ledger_bytes(dir.path());
    assert!(
        bytes <= SETTLED_BYTES,
        "ledger files hold {bytes} bytes past the replay window, bound {SETTLED_BYTES}"
    );
}

/// A schema 2 ledger, made before the pruned totals and incremental vacuum, is
/// migrated by the serving process: its tables gain `pruned`, the file its vacuum mode.
#[test]
fn a_schema_2_ledger_is_migrated_to_incremental_vacuum() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join(FILE_NAME);
    let tip = Tip {
        seq: 7,
        caller: ALICE,
        matoms: 5000,
    };
    {
        let ledger = Ledger::open(dir.path(), NOW).expect("open").ledger;
        ledger.record_tip(&tip, true, NOW).expect("tip");
    }
    {
        // Back to schema 2 as it was shipped: no pruned table, no call origins, no auto
        // vacuum.
        let db = rusqlite::Connection::open(&path).expect("db");
        db.execute_batch(
            "DROP TABLE waiting; DROP TABLE pruned; DROP INDEX calls_notify; ALTER TABLE calls DROP COLUMN notify; \
             ALTER TABLE calls DROP COLUMN request_id; ALTER TABLE calls DROP COLUMN session; \
             PRAGMA auto_vacuum = NONE; VACUUM;",
        )
        .expect("downgrade");
        db.pragma_update(None, "user_version", 2).expect("version");
        let mode: i64 = db
            .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .expect("mode");
        assert_eq!(mode, 0);
    }
    assert!(Ledger::attach(dir.path()).is_err(), "attach never migrates");
    let ledger = Ledger::open(dir.path(), NOW).expect("open").ledger;
    assert_eq!(ledger.balance_matoms(&ALICE).expect("balance"), 5000);
    assert_eq!(ledger.pruned(&ALICE).expect("pruned").completed, 0);
    drop(ledger);
    let db = rusqlite::Connection::open(&path).expect("db");
    let (version, mode): (i32, i64) = (
        db.query_row("PRAGMA user_version", [], |r| r.get(0))
            .expect("version"),
        db.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .expect("mode"),
    );
    assert_eq!((version, mode), (SCHEMA_VERSION, 2));
}
