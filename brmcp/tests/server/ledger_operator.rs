//! The operator's calls: balances, manual credit and refund with an audit trail, and the
//! journal filtered by caller.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    AuditAction, AuditEntry, Balance, CallId, CallRequest, CallState, Charge, Ledger, LedgerError,
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
                matoms: 4_000,
                reserved_matoms: 0,
            },
            Balance {
                caller: BOB,
                matoms: 7_000,
                reserved_matoms: 0,
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

#[test]
fn an_operator_attaches_beside_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        matches!(Ledger::attach(dir.path()), Err(LedgerError::Missing { .. })),
        "nothing to attach to yet"
    );
    let owner = Ledger::open(dir.path(), NOW).unwrap().ledger;
    owner.manual_credit(&ALICE, 30_000, "prepaid", NOW).unwrap();
    // A call in flight in the owner's process.
    let in_flight = charge(&owner, ALICE, "fortune", 10);

    let operator = Ledger::attach(dir.path()).unwrap();
    // Calls and tips are the owner's.
    assert!(matches!(
        operator.charge(
            &CallRequest {
                caller: ALICE,
                tool: "fortune",
                price_atoms: 1,
                keyed: None,
            },
            NOW
        ),
        Err(LedgerError::NotOwner)
    ));
    assert!(matches!(
        operator.complete(in_flight, "{}", NOW),
        Err(LedgerError::NotOwner)
    ));
    assert!(matches!(
        operator.purge_expired(NOW),
        Err(LedgerError::NotOwner)
    ));
    // The operator sees the owner's state and leaves its pending call alone.
    assert_eq!(operator.balance_matoms(&ALICE).unwrap(), 20_000);
    let entry = operator.journal_entry(in_flight).unwrap().unwrap();
    assert_eq!(entry.state, CallState::Pending);
    // Its credit reaches the owner at once.
    operator
        .manual_credit(&BOB, 5_000, "goodwill", NOW)
        .unwrap();
    assert_eq!(owner.balance_matoms(&BOB).unwrap(), 5_000);
    // The owner's writes go on beside it.
    owner.complete(in_flight, "{}", NOW).unwrap();
    assert_eq!(
        operator.journal_entry(in_flight).unwrap().unwrap().state,
        CallState::Completed
    );
    // Serving calls is still one process's: a second owner is refused.
    assert!(matches!(
        Ledger::open(dir.path(), NOW),
        Err(LedgerError::InUse { .. })
    ));
    drop(operator);
    drop(owner);
    let reopened = Ledger::open(dir.path(), NOW).unwrap();
    assert_eq!(reopened.refunded, 0);
    assert_eq!(reopened.ledger.balance_matoms(&ALICE).unwrap(), 20_000);
}

#[test]
fn attaching_to_a_ledger_not_created_yet_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    // The owner has created the file but not its schema yet.
    let path = dir.path().join(brmcp::server::FILE_NAME);
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(
        Ledger::attach(dir.path()),
        Err(LedgerError::Missing { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), b"");
    let opened = Ledger::open(dir.path(), NOW).unwrap();
    assert_eq!(opened.ledger.balance_matoms(&ALICE).unwrap(), 0);
}

#[test]
fn an_owner_opening_beside_an_operator_refunds_what_a_dead_owner_left() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Ledger::open(dir.path(), NOW).unwrap().ledger;
    owner.manual_credit(&ALICE, 30_000, "prepaid", NOW).unwrap();
    let interrupted = charge(&owner, ALICE, "fortune", 10);
    let operator = Ledger::attach(dir.path()).unwrap();
    // The owner dies mid-call; the operator's connection stays open.
    drop(owner);
    let opened = Ledger::open(dir.path(), NOW).unwrap();
    assert_eq!(opened.refunded, 1);
    assert_eq!(operator.balance_matoms(&ALICE).unwrap(), 30_000);
    assert_eq!(
        operator.journal_entry(interrupted).unwrap().unwrap().state,
        CallState::Refunded
    );
}

#[test]
fn open_for_operator_owns_a_free_directory_and_attaches_to_a_held_one() {
    let dir = tempfile::tempdir().unwrap();
    let owner = Ledger::open(dir.path(), NOW).unwrap().ledger;
    owner.manual_credit(&ALICE, 30_000, "prepaid", NOW).unwrap();
    let in_flight = charge(&owner, ALICE, "fortune", 10);
    // Held: attached at once, the pending call left alone.
    let beside = Ledger::open_for_operator(dir.path(), NOW).unwrap();
    assert_eq!(beside.refunded, 0);
    assert!(matches!(
        beside.ledger.purge_expired(NOW),
        Err(LedgerError::NotOwner)
    ));
    drop(beside);
    drop(owner);
    // Free: opened as the owner, refunding what the dead owner left pending.
    let opened = Ledger::open_for_operator(dir.path(), NOW).unwrap();
    assert_eq!(opened.refunded, 1);
    assert_eq!(
        opened
            .ledger
            .journal_entry(in_flight)
            .unwrap()
            .unwrap()
            .state,
        CallState::Refunded
    );
    assert_eq!(opened.ledger.purge_expired(NOW).unwrap(), 0);
}
