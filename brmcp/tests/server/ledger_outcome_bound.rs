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
