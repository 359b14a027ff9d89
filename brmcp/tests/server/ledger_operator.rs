//! The operator's calls: balances, manual credit and refund with an audit trail, and the
//! journal filtered by caller.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    AuditAction, AuditEntry, Balance, Billing, CallId, CallRequest, CallState, Charge, Ledger,
    LedgerError,
};

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const BOB: PeerId = PeerId::from_bytes([0xb0; 32]);

fn charge(ledger: &Ledger, caller: PeerId, tool: &str, price_atoms: u64) -> CallId {
    let request = CallRequest {
        caller,
        tool,
        price_atoms,
        keyed: None,
    };
    match ledger.charge(&request, NOW).unwrap() {
        Charge::Run(call) => call,
        other => panic!("expected Run, got {other:?}"),
    }
}

#[test]
fn manual_credit_and_refund_are_audited() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;

    let t1 = UnixTime(NOW.0 + 10);
    assert_eq!(
        ledger
            .manual_credit(&ALICE, 50_500, "paid on-chain", t1)
            .unwrap(),
        50_500
    );
    let call = charge(&ledger, ALICE, "fortune", 20);
    ledger.complete(call, "{}", NOW).unwrap();
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 30_500);

    let t2 = UnixTime(NOW.0 + 20);
    assert_eq!(
        ledger.manual_refund(call, "bad fortune", t2).unwrap(),
        50_500
    );
    let entry = ledger.journal_entry(call).unwrap().unwrap();
    assert_eq!(entry.state, CallState::Refunded);
    assert_eq!(entry.reason.as_deref(), Some("bad fortune"));

    let audit = ledger.audit(10).unwrap();
    assert_eq!(audit.len(), 2);
    assert_eq!(
        audit[0],
        AuditEntry {
            id: audit[0].id,
            at: t2,
            caller: ALICE,
            action: AuditAction::Refund,
            matoms: 20_000,
            call: Some(call),
            reason: "bad fortune".into(),
        }
    );
    assert_eq!(
        audit[1],
        AuditEntry {
            id: audit[1].id,
            at: t1,
            caller: ALICE,
            action: AuditAction::Credit,
            matoms: 50_500,
            call: None,
            reason: "paid on-chain".into(),
        }
    );
    assert!(audit[0].id > audit[1].id);
    assert_eq!(ledger.audit(1).unwrap().len(), 1);

    // A refunded call cannot be refunded again, nor can a pending one by hand.
    assert!(matches!(
        ledger.manual_refund(call, "twice", t2),
        Err(LedgerError::NotRefundable {
            state: CallState::Refunded,
            ..
        })
    ));
    let pending = charge(&ledger, ALICE, "fortune", 1);
    let err = ledger.manual_refund(pending, "early", t2).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("ledger: call {pending} is pending, only a completed call can be refunded")
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 49_500);
    assert_eq!(ledger.audit(10).unwrap().len(), 2);
}

#[test]
fn balances_and_journal_by_caller() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    ledger.manual_credit(&BOB, 9_000, "test", NOW).unwrap();
    ledger.manual_credit(&ALICE, 5_000, "test", NOW).unwrap();
    let a1 = charge(&ledger, ALICE, "fortune", 1);
    let b1 = charge(&ledger, BOB, "weather", 2);
    let a2 = charge(&ledger, ALICE, "echo", 0);

    assert_eq!(
        ledger.balances().unwrap(),
        [
            Balance {
                caller: ALICE,
                matoms: 4_000
            },
            Balance {
                caller: BOB,
                matoms: 7_000
            },
        ]
    );

    let ids = |entries: Vec<brmcp::server::JournalEntry>| -> Vec<CallId> {
        entries.into_iter().map(|e| e.id).collect()
    };
    assert_eq!(ids(ledger.journal(None, 10).unwrap()), [a2, b1, a1]);
    assert_eq!(ids(ledger.journal(Some(&ALICE), 10).unwrap()), [a2, a1]);
    assert_eq!(ids(ledger.journal(Some(&ALICE), 1).unwrap()), [a2]);
    assert_eq!(ids(ledger.journal(Some(&BOB), 10).unwrap()), [b1]);
    let bob = &ledger.journal(Some(&BOB), 10).unwrap()[0];
    assert_eq!(
        (bob.caller, bob.tool.as_str(), bob.price_atoms),
        (BOB, "weather", 2)
    );
}
