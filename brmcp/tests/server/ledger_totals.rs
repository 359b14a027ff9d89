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

#[test]
fn daily_revenue_counts_calls_and_completed_prices_per_day_and_tool() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    ledger
        .manual_credit(&ALICE, 10_000 * MATOMS_PER_ATOM, "t", NOW)
        .unwrap();
    let day = 24 * 60 * 60;
    let at = |days_ago: i64, secs: i64| UnixTime(NOW.0 - days_ago * day + secs);
    let charge_tool = |tool: &str, price_atoms: u64, when: UnixTime| {
        let request = CallRequest {
            caller: ALICE,
            tool,
            price_atoms,
            keyed: None,
        };
        match ledger.charge(&request, when).unwrap() {
            Charge::Run(call) => call,
            other => panic!("expected Run, got {other:?}"),
        }
    };
    // Out of a 3-day window (NOW is a day's first second): not counted.
    let old = charge_tool("fortune", 1000, at(3, 0));
    ledger.complete(old, "{}", at(3, 1)).unwrap();
    // Two days ago: two fortunes, one refunded (a call, but no revenue).
    let a = charge_tool("fortune", 10, at(2, 5));
    ledger.complete(a, "{}", at(2, 6)).unwrap();
    let b = charge_tool("fortune", 10, at(2, 7));
    ledger.refund(b, "handler error", None, at(2, 8)).unwrap();
    // Today: a fortune and a weather call, the latter still running.
    let c = charge_tool("fortune", 30, at(0, 10));
    ledger.complete(c, "{}", at(0, 11)).unwrap();
    let _running = charge_tool("weather", 50, at(0, 12));

    let rows = ledger.daily_revenue(at(0, 100), 3).unwrap();
    let got: Vec<(i64, &str, u64, u64)> = rows
        .iter()
        .map(|r| (r.day, r.tool.as_str(), r.calls, r.earned_atoms))
        .collect();
    assert_eq!(
        got,
        [
            (NOW.0 - 2 * day, "fortune", 2, 10),
            (NOW.0, "fortune", 1, 30),
            (NOW.0, "weather", 1, 0),
        ]
    );
}
