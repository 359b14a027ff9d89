//! One caller completing keyed calls with large results at the rate limit: the outcomes
//! the journal keeps for it stay within their per-caller bound, the oldest go first,
//! and a retry of a dropped one is refused clearly instead of running again.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    CallKey, CallRequest, Charge, DEFAULT_CALLS_PER_MINUTE, Ledger, MAX_OUTCOME_BYTES_PER_CALLER,
    Tip,
};

use crate::support::ledger::{document_call, ledger_bytes};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);

/// Result bytes per call: large, as a tool returning a document would.
const RESULT_LEN: usize = 450_000;

/// Calls made: twice what the bound holds.
const CALLS: usize = 2 * MAX_OUTCOME_BYTES_PER_CALLER / RESULT_LEN;

fn key(n: usize) -> CallKey {
    CallKey::new(&format!("call-number-{n:04}")).expect("key")
}

fn request(key: &CallKey) -> CallRequest<'_> {
    document_call(ALICE, key)
}

#[test]
fn large_outcomes_of_one_caller_stay_within_the_bound() {
    let dir = tempfile::tempdir().expect("dir");
    let ledger = Ledger::open(dir.path(), NOW).expect("open").ledger;
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms: 10_000_000,
    };
    ledger.record_tip(&tip, true, NOW).expect("tip");

    let interval = 60 / u64::from(DEFAULT_CALLS_PER_MINUTE);
    let mut largest = 0;
    for n in 0..CALLS {
        let at = NOW.saturating_add(n as u64 * interval);
        let key = key(n);
        let Charge::Run(call) = ledger.charge(&request(&key), at).expect("charge") else {
            panic!("call {n} did not run");
        };
        let outcome = format!("{{\"text\":\"{}\"}}", "x".repeat(RESULT_LEN));
        ledger.complete(call, &outcome, at).expect("complete");
        largest = largest.max(ledger_bytes(dir.path()));
    }
    // Without the bound the files hold every outcome: CALLS * RESULT_LEN bytes.
    let bound = (MAX_OUTCOME_BYTES_PER_CALLER + (8 << 20)) as u64;
    assert!(
        largest <= bound,
        "ledger files reached {largest} bytes, bound {bound}"
    );

    let end = NOW.saturating_add(CALLS as u64 * interval);
    // The newest outcome replays; the oldest was dropped and its retry is refused.
    let newest = key(CALLS - 1);
    assert!(matches!(
        ledger.charge(&request(&newest), end).expect("replay"),
        Charge::Replay(_)
    ));
    let oldest = key(0);
    assert_eq!(
        ledger.charge(&request(&oldest), end).expect("retry"),
        Charge::OutcomeNotRetained
    );
    // Every call was paid once, retries included.
    assert_eq!(
        ledger.balance_matoms(&ALICE).expect("balance"),
        10_000_000 - CALLS as u64 * 1000
    );
}

/// The outcomes one caller keeps, at most, whatever their size (the ledger's count
/// bound).
const MAX_OUTCOMES: usize = 1024;

/// Keyed calls of `ALICE` numbered `from..to`, each completed with `outcome`.
fn complete_calls(ledger: &Ledger, from: usize, to: usize, outcome: &str) {
    for n in from..to {
        let key = key(n);
        let Charge::Run(call) = ledger.charge(&request(&key), NOW).expect("charge") else {
            panic!("call {n} did not run");
        };
        ledger.complete(call, outcome, NOW).expect("complete");
    }
}

fn kept_outcomes(ledger: &Ledger) -> usize {
    let journal = ledger.journal(Some(&ALICE), usize::MAX).expect("journal");
    journal.iter().filter(|e| e.outcome_kept).count()
}

#[test]
fn small_outcomes_are_bounded_by_count_and_large_ones_by_bytes_across_restarts() {
    let dir = tempfile::tempdir().expect("dir");
    let open = || Ledger::open(dir.path(), NOW).expect("open").ledger;
    let ledger = open();
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms: 100_000_000,
    };
    ledger.record_tip(&tip, true, NOW).expect("tip");

    // Small outcomes: the newest MAX_OUTCOMES stay, the oldest go first.
    complete_calls(&ledger, 0, MAX_OUTCOMES + 10, "{\"text\":\"small\"}");
    assert_eq!(kept_outcomes(&ledger), MAX_OUTCOMES);
    assert_eq!(
        ledger.charge(&request(&key(9)), NOW).expect("retry"),
        Charge::OutcomeNotRetained
    );
    assert!(matches!(
        ledger.charge(&request(&key(10)), NOW).expect("replay"),
        Charge::Replay(_)
    ));

    // Large outcomes, half the byte bound before a restart and more after it: the
    // restarted ledger knows nothing of what the caller keeps and still bounds it.
    let large = format!("{{\"text\":\"{}\"}}", "x".repeat(RESULT_LEN));
    let half = MAX_OUTCOME_BYTES_PER_CALLER / 2 / RESULT_LEN;
    let start = MAX_OUTCOMES + 10;
    complete_calls(&ledger, start, start + half, &large);
    drop(ledger);
    let ledger = open();
    complete_calls(&ledger, start + half, start + 3 * half, &large);
    let journal = ledger.journal(Some(&ALICE), usize::MAX).expect("journal");
    let kept_large = journal
        .iter()
        .filter(|e| e.outcome_kept && e.call_key.as_deref() >= Some(key(start).as_str()))
        .count();
    assert!(
        kept_large * RESULT_LEN <= MAX_OUTCOME_BYTES_PER_CALLER,
        "{kept_large} outcomes of {RESULT_LEN} bytes kept past the bound"
    );
    assert!(matches!(
        ledger
            .charge(&request(&key(start + 3 * half - 1)), NOW)
            .expect("replay"),
        Charge::Replay(_)
    ));
}
