//! A charge debits and journals in one step; complete and refund close the entry; a
//! caller short of money changes nothing and learns the numbers.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    ArgsHash, CallId, CallKey, CallRequest, CallState, Charge, JournalEntry, Keyed, Ledger,
    LedgerError, Shortfall, Tip,
};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);

fn funded(matoms: u64) -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms,
    };
    ledger.record_tip(&tip, true, NOW).unwrap();
    (dir, ledger)
}

fn run(charge: Charge) -> CallId {
    match charge {
        Charge::Run(call) => call,
        other => panic!("expected Run, got {other:?}"),
    }
}

#[test]
fn charge_debits_and_journals_pending_then_complete_stores_the_outcome() {
    let (_dir, ledger) = funded(12_345);
    let key = CallKey::new("key-0001").unwrap();
    let args = ArgsHash::of_value(&serde_json::json!({"q": "luck"}));
    let request = CallRequest {
        caller: ALICE,
        tool: "fortune",
        price_atoms: 10,
        keyed: Some(Keyed { key: &key, args }),
    };

    let call = run(ledger.charge(&request, NOW).unwrap());
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 2_345);
    assert_eq!(
        ledger.journal_entry(call).unwrap(),
        Some(JournalEntry {
            id: call,
            caller: ALICE,
            tool: "fortune".into(),
            price_atoms: 10,
            state: CallState::Pending,
            started_at: NOW,
            finished_at: None,
            reason: None,
            call_key: Some("key-0001".into()),
            key_held: true,
            outcome_kept: false,
        })
    );

    let outcome = r#"{"content":[{"type":"text","text":"{\"fortune\":\"yes\"}"}]}"#;
    let done = UnixTime(NOW.0 + 2);
    ledger.complete(call, outcome, done).unwrap();
    let entry = ledger.journal_entry(call).unwrap().unwrap();
    assert_eq!(entry.state, CallState::Completed);
    assert_eq!(entry.finished_at, Some(done));
    assert!(entry.outcome_kept);
    // The charge stands and the stored outcome replays, byte for byte, without paying.
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 2_345);
    assert_eq!(
        ledger.charge(&request, done).unwrap(),
        Charge::Replay(outcome.into())
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 2_345);

    // A finished call cannot be finished again.
    assert!(matches!(
        ledger.complete(call, outcome, done),
        Err(LedgerError::NotPending {
            state: CallState::Completed,
            ..
        })
    ));
    assert!(matches!(
        ledger.refund(call, "late", None, done),
        Err(LedgerError::NotPending { .. })
    ));
    assert!(matches!(
        ledger.complete(CallId::new(999), outcome, done),
        Err(LedgerError::UnknownCall(id)) if id == CallId::new(999)
    ));
}

#[test]
fn refund_restores_the_exact_milliatoms() {
    let (_dir, ledger) = funded(7_777);
    let request = CallRequest {
        caller: ALICE,
        tool: "fortune",
        price_atoms: 7,
        keyed: None,
    };
    let call = run(ledger.charge(&request, NOW).unwrap());
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 777);

    ledger
        .refund(call, "handler error", None, UnixTime(NOW.0 + 1))
        .unwrap();
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 7_777);
    let entry = ledger.journal_entry(call).unwrap().unwrap();
    assert_eq!(entry.state, CallState::Refunded);
    assert_eq!(entry.reason.as_deref(), Some("handler error"));
    assert_eq!(entry.finished_at, Some(UnixTime(NOW.0 + 1)));

    // Refunded once only.
    assert!(matches!(
        ledger.refund(call, "again", None, NOW),
        Err(LedgerError::NotPending {
            state: CallState::Refunded,
            ..
        })
    ));
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 7_777);
}

#[test]
fn insufficient_balance_changes_nothing_and_reports_the_numbers() {
    let (_dir, ledger) = funded(4_999);
    let key = CallKey::new("key-0002").unwrap();
    let request = CallRequest {
        caller: ALICE,
        tool: "fortune",
        price_atoms: 10_000,
        keyed: Some(Keyed {
            key: &key,
            args: ArgsHash::of_arguments(None),
        }),
    };
    let charge = ledger.charge(&request, NOW).unwrap();
    let expected = Shortfall {
        price_atoms: 10_000,
        balance_atoms: 4,
        shortfall_atoms: 9_996,
    };
    assert_eq!(charge, Charge::Insufficient(expected));
    assert_eq!(
        expected.payment_required_json("fortune"),
        r#"{"error":"payment_required","tool":"fortune","priceAtoms":10000,"balanceAtoms":4,"shortfallAtoms":9996,"acceptedRails":["tip"]}"#
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 4_999);
    assert!(ledger.journal(None, 10).unwrap().is_empty());

    // The key was not consumed: once funded, the same key runs for real.
    let tip = Tip {
        seq: 2,
        caller: ALICE,
        matoms: 10_000_000,
    };
    ledger.record_tip(&tip, true, NOW).unwrap();
    run(ledger.charge(&request, NOW).unwrap());
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 4_999);
}

#[test]
fn a_free_call_journals_at_price_zero() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let request = CallRequest {
        caller: ALICE,
        tool: "echo",
        price_atoms: 0,
        keyed: None,
    };
    let call = run(ledger.charge(&request, NOW).unwrap());
    ledger.complete(call, "{}", NOW).unwrap();
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 0);
    let entry = ledger.journal_entry(call).unwrap().unwrap();
    assert_eq!((entry.price_atoms, entry.state), (0, CallState::Completed));
    // Unkeyed: nothing could ask for the outcome again, so it is not stored.
    assert!(!entry.outcome_kept);
}
