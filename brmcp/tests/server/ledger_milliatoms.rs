//! Balances are milliatoms: tip remainders below one atom add up instead of being lost.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{CallRequest, Charge, Ledger, Shortfall, Tip, TipOutcome};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);

fn paid(price_atoms: u64) -> CallRequest<'static> {
    CallRequest {
        caller: ALICE,
        tool: "fortune",
        price_atoms,
        keyed: None,
    }
}

#[test]
fn sub_atom_tips_add_up_and_a_charge_leaves_the_remainder() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let tip = |seq, matoms| Tip {
        seq,
        caller: ALICE,
        matoms,
    };

    assert_eq!(
        ledger.record_tip(&tip(1, 1_500), true, NOW).unwrap(),
        TipOutcome::Credited
    );
    assert_eq!(
        ledger.record_tip(&tip(2, 500), true, NOW).unwrap(),
        TipOutcome::Credited
    );
    // 2 atoms, not the 1 atom a per-tip floor would give.
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 2_000);

    // A 3-atom price is refused with the balance in whole atoms.
    assert_eq!(
        ledger.charge(&paid(3), NOW).unwrap(),
        Charge::Insufficient(Shortfall {
            price_atoms: 3,
            balance_atoms: 2,
            shortfall_atoms: 1
        })
    );

    assert!(matches!(
        ledger.charge(&paid(1), NOW).unwrap(),
        Charge::Run(_)
    ));
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 1_000);
}

#[test]
fn a_remainder_below_one_atom_is_kept_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let tip = Tip {
        seq: 7,
        caller: ALICE,
        matoms: 1_999,
    };
    ledger.record_tip(&tip, true, NOW).unwrap();
    let Charge::Run(call) = ledger.charge(&paid(1), NOW).unwrap() else {
        panic!("1999 matoms cover 1 atom");
    };
    // Completed: a call left pending would be refunded by the reopen.
    ledger.complete(call, "{}", NOW).unwrap();
    drop(ledger);

    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 999);
    // 999 matoms is 0 whole atoms: a 1-atom call is short by exactly 1.
    assert_eq!(
        ledger.charge(&paid(1), NOW).unwrap(),
        Charge::Insufficient(Shortfall {
            price_atoms: 1,
            balance_atoms: 0,
            shortfall_atoms: 1
        })
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 999);
}
