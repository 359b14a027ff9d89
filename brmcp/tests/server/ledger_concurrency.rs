//! Concurrent charges never spend the same milliatom twice.

use std::sync::{Arc, Barrier};

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{Billing, CallRequest, CallState, Charge, Ledger, Shortfall, Tip};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const THREADS: usize = 20;
const PRICE_ATOMS: u64 = 3;
const AFFORDABLE: usize = 5;

#[test]
fn twenty_threads_against_a_balance_for_five_calls() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Arc::new(Ledger::open(dir.path(), NOW).unwrap().ledger);
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms: PRICE_ATOMS * 1000 * AFFORDABLE as u64,
    };
    ledger.record_tip(&tip, true, NOW).unwrap();

    // The harness's view: a shared `dyn Billing`.
    let billing: Arc<dyn Billing> = ledger.clone();
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let billing = Arc::clone(&billing);
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                let request = CallRequest {
                    caller: ALICE,
                    tool: "fortune",
                    price_atoms: PRICE_ATOMS,
                    keyed: None,
                };
                billing.charge(&request, NOW).unwrap()
            })
        })
        .collect();
    let charges: Vec<Charge> = threads.into_iter().map(|t| t.join().unwrap()).collect();

    let ran = charges
        .iter()
        .filter(|c| matches!(c, Charge::Run(_)))
        .count();
    assert_eq!(ran, AFFORDABLE);
    for refused in charges.iter().filter(|c| !matches!(c, Charge::Run(_))) {
        assert_eq!(
            *refused,
            Charge::Insufficient(Shortfall {
                price_atoms: PRICE_ATOMS,
                balance_atoms: 0,
                shortfall_atoms: PRICE_ATOMS
            })
        );
    }
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 0);
    let journal = ledger.journal(None, 100).unwrap();
    assert_eq!(journal.len(), AFFORDABLE);
    assert!(journal.iter().all(|e| e.state == CallState::Pending));
}
