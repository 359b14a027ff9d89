//! The ledger's totals for `brmcp serve status`: balances summed, calls, earnings and
//! refunds of the last 24 hours, pending calls; older calls fall out of the window.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    CallId, CallRequest, Charge, Ledger, LedgerTotals, MATOMS_PER_ATOM, TOTALS_WINDOW_SECS,
};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const BOB: PeerId = PeerId::from_bytes([0xb0; 32]);

fn charge(ledger: &Ledger, caller: PeerId, price_atoms: u64, at: UnixTime) -> CallId {
    let request = CallRequest {
        caller,
        tool: "fortune",
        price_atoms,
        keyed: None,
    };
    match ledger.charge(&request, at).unwrap() {
        Charge::Run(call) => call,
        other => panic!("expected Run, got {other:?}"),
    }
}

#[test]
fn totals_sum_balances_and_count_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    assert_eq!(ledger.totals(NOW).unwrap(), LedgerTotals::default());
    let old = UnixTime(NOW.0 - TOTALS_WINDOW_SECS - 1);
    ledger
        .manual_credit(&ALICE, 1_000 * MATOMS_PER_ATOM, "t", old)
        .unwrap();
    ledger
        .manual_credit(&BOB, 500 * MATOMS_PER_ATOM, "t", old)
        .unwrap();
    // A day and a second ago: out of the window.
    let ancient = charge(&ledger, ALICE, 100, old);
    ledger.complete(ancient, "{}", old).unwrap();
    // In the window: one completed, one refunded, one still pending.
    let done = charge(&ledger, ALICE, 10, NOW);
    ledger.complete(done, "{}", NOW).unwrap();
    let failed = charge(&ledger, BOB, 20, NOW);
    ledger.refund(failed, "handler error", None, NOW).unwrap();
    let _running = charge(&ledger, BOB, 30, NOW);

    let totals = ledger.totals(NOW).unwrap();
    assert_eq!(totals.callers, 2);
    // 1000 - 100 - 10 and 500 - 20 + 20 - 30, in milliatoms.
    assert_eq!(totals.balances_matoms, (890 + 470) * MATOMS_PER_ATOM);
    assert_eq!(totals.calls_24h, 3);
    assert_eq!(totals.earned_atoms_24h, 10);
    assert_eq!(totals.refunds_24h, 1);
    assert_eq!(totals.pending, 1);

    // A day later only the pending call still counts.
    let later = UnixTime(NOW.0 + TOTALS_WINDOW_SECS + 1);
    let totals = ledger.totals(later).unwrap();
    assert_eq!(
        (
            totals.calls_24h,
            totals.earned_atoms_24h,
            totals.refunds_24h,
            totals.pending
        ),
        (0, 0, 0, 1)
    );
}
