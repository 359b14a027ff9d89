//! A tip is credited once per sequence id, however often and however late it is
//! redelivered; a tip from a caller not allowed is recorded but not credited.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{Ledger, Tip, TipOutcome, TipRecord};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const MALLORY: PeerId = PeerId::from_bytes([0x66; 32]);

#[test]
fn redelivered_tip_is_credited_once_also_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let tip = Tip {
        seq: 42,
        caller: ALICE,
        matoms: 5_000,
    };

    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    assert_eq!(
        ledger.record_tip(&tip, true, NOW).unwrap(),
        TipOutcome::Credited
    );
    assert_eq!(
        ledger.record_tip(&tip, true, NOW).unwrap(),
        TipOutcome::Duplicate
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 5_000);
    drop(ledger);

    // A year later, after a restart.
    let later = UnixTime(NOW.0 + 365 * 24 * 3600);
    let ledger = Ledger::open(dir.path(), later).unwrap().ledger;
    assert_eq!(
        ledger.record_tip(&tip, true, later).unwrap(),
        TipOutcome::Duplicate
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 5_000);
    assert_eq!(
        ledger.tip(42).unwrap(),
        Some(TipRecord {
            tip,
            credited: true,
            received_at: NOW
        })
    );
}

#[test]
fn tip_from_a_caller_not_allowed_is_recorded_not_credited() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let tip = Tip {
        seq: 9,
        caller: MALLORY,
        matoms: 3_000,
    };
    assert_eq!(
        ledger.record_tip(&tip, false, NOW).unwrap(),
        TipOutcome::NotCredited
    );
    assert_eq!(ledger.balance_matoms(&MALLORY).unwrap(), 0);
    assert!(ledger.balances().unwrap().is_empty());
    assert_eq!(ledger.tip(9).unwrap().map(|r| r.credited), Some(false));

    // Being allowed later does not turn the recorded tip into credit.
    assert_eq!(
        ledger.record_tip(&tip, true, NOW).unwrap(),
        TipOutcome::Duplicate
    );
    assert_eq!(ledger.balance_matoms(&MALLORY).unwrap(), 0);
}

#[test]
fn sequence_ids_use_all_64_bits() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    for (seq, matoms) in [(u64::MAX, 1), (1 << 63, 10), (0, 100)] {
        let tip = Tip {
            seq,
            caller: ALICE,
            matoms,
        };
        assert_eq!(
            ledger.record_tip(&tip, true, NOW).unwrap(),
            TipOutcome::Credited
        );
        assert_eq!(ledger.tip(seq).unwrap().map(|r| r.tip), Some(tip));
    }
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 111);
    assert_eq!(ledger.tip(1).unwrap(), None);
}
