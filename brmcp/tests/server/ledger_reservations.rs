//! The ledger's reservations: a credited tip is reserved for the caller's waiting calls
//! in its own transaction, bounded per caller, only for allowed tippers, released when a
//! key is reused for another call or when its wait ends, shown in the operator's totals
//! and balances; a schema 4 ledger is migrated.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    ArgsHash, CallKey, CallRequest, Charge, FILE_NAME, Keyed, Ledger, MATOMS_PER_ATOM,
    MAX_WAITING_PER_CALLER, RESERVATION_WAIT_SECS, SCHEMA_VERSION, Tip,
};
use serde_json::json;

use crate::support::ledger::schema_version;

const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const NOW: UnixTime = UnixTime(1_767_225_600);
const PRICE: u64 = 10;

fn key(n: usize) -> CallKey {
    CallKey::new(&format!("waiting-key-{n}")).unwrap()
}

fn charge(ledger: &Ledger, key: &CallKey, args: serde_json::Value, now: UnixTime) -> Charge {
    let request = CallRequest {
        caller: ALICE,
        tool: "document",
        price_atoms: PRICE,
        keyed: Some(Keyed {
            key,
            args: ArgsHash::of_value(&args),
        }),
    };
    ledger.charge(&request, now).unwrap()
}

fn tip(ledger: &Ledger, seq: u64, atoms: u64, allowed: bool) {
    let tip = Tip {
        seq,
        caller: ALICE,
        matoms: atoms * MATOMS_PER_ATOM,
    };
    ledger.record_tip(&tip, allowed, NOW).unwrap();
}

fn reserved(ledger: &Ledger, now: UnixTime) -> u64 {
    ledger.reserved_matoms(&ALICE, now).unwrap()
}

#[test]
fn waiting_calls_are_bounded_per_caller() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let extra = 6;
    for n in 0..MAX_WAITING_PER_CALLER + extra {
        assert!(matches!(
            charge(&ledger, &key(n), json!({}), NOW),
            Charge::Insufficient(_)
        ));
    }
    // A tip covering every refused call reserves for the bound's worth only; the rest
    // stays spendable by any call.
    let calls = (MAX_WAITING_PER_CALLER + extra) as u64;
    tip(&ledger, 1, calls * PRICE, true);
    let bound = MAX_WAITING_PER_CALLER as u64 * PRICE * MATOMS_PER_ATOM;
    assert_eq!(reserved(&ledger, NOW), bound);
    let totals = ledger.totals(NOW).unwrap();
    assert_eq!(totals.reserved_matoms, bound);
    assert_eq!(totals.balances_matoms, calls * PRICE * MATOMS_PER_ATOM);
    let balances = ledger.balances().unwrap();
    assert_eq!(balances[0].reserved_matoms, bound);
    // The calls past the bound did not wait: they run from the unreserved rest.
    for n in MAX_WAITING_PER_CALLER..MAX_WAITING_PER_CALLER + extra {
        assert!(matches!(
            charge(&ledger, &key(n), json!({}), NOW),
            Charge::Run(_)
        ));
    }
    assert!(matches!(
        charge(&ledger, &key(10_000), json!({}), NOW),
        Charge::Insufficient(_)
    ));
}

#[test]
fn a_tip_not_credited_reserves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    assert!(matches!(
        charge(&ledger, &key(1), json!({}), NOW),
        Charge::Insufficient(_)
    ));
    tip(&ledger, 1, PRICE, false);
    assert_eq!(reserved(&ledger, NOW), 0);
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 0);
}

#[test]
fn a_key_reused_for_other_arguments_releases_its_reservation() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let k = key(1);
    assert!(matches!(
        charge(&ledger, &k, json!({"doc": 1}), NOW),
        Charge::Insufficient(_)
    ));
    tip(&ledger, 1, PRICE, true);
    assert_eq!(reserved(&ledger, NOW), PRICE * MATOMS_PER_ATOM);
    // The same key for other arguments is not the call the tip was for: it may not
    // spend the reservation, and replacing the waiting call releases it.
    let other = charge(&ledger, &k, json!({"doc": 2}), NOW);
    assert!(matches!(other, Charge::Insufficient(_)), "{other:?}");
    assert_eq!(reserved(&ledger, NOW), 0);
    assert!(matches!(
        charge(&ledger, &k, json!({"doc": 2}), NOW),
        Charge::Run(_)
    ));
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 0);
}

#[test]
fn a_reservation_lasts_its_wait_and_no_longer() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    assert!(matches!(
        charge(&ledger, &key(1), json!({}), NOW),
        Charge::Insufficient(_)
    ));
    tip(&ledger, 1, PRICE, true);
    let before = UnixTime(NOW.0 + RESERVATION_WAIT_SECS as i64 - 1);
    assert!(matches!(
        charge(&ledger, &key(2), json!({}), before),
        Charge::Insufficient(_)
    ));
    let after = UnixTime(NOW.0 + RESERVATION_WAIT_SECS as i64);
    assert_eq!(reserved(&ledger, after), 0);
    assert!(matches!(
        charge(&ledger, &key(2), json!({}), after),
        Charge::Run(_)
    ));
    // The expired call's retry finds no credit left.
    assert!(matches!(
        charge(&ledger, &key(1), json!({}), after),
        Charge::Insufficient(_)
    ));
}

#[test]
fn a_schema_4_ledger_is_migrated_and_reserves() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    drop(Ledger::open(dir.path(), NOW).unwrap());
    {
        // Back to schema 4 as it was shipped: nothing waits.
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch("DROP TABLE waiting;").unwrap();
        db.pragma_update(None, "user_version", 4).unwrap();
    }
    assert!(Ledger::attach(dir.path()).is_err(), "attach never migrates");
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    assert!(matches!(
        charge(&ledger, &key(1), json!({}), NOW),
        Charge::Insufficient(_)
    ));
    tip(&ledger, 1, PRICE, true);
    assert_eq!(reserved(&ledger, NOW), PRICE * MATOMS_PER_ATOM);
    drop(ledger);
    assert_eq!(schema_version(&path), SCHEMA_VERSION);
}

/// A keyed call cut after its charge, by a stop (`interrupt`) or by a process that died
/// mid-call (refunded at the next open), is refunded with its credit reserved for its
/// retry under its key: another call of the caller arriving first is refused for
/// payment, not run on that credit, and the retry is charged from it.
#[test]
fn a_cut_calls_refund_is_reserved_for_its_retry() {
    let dir = tempfile::tempdir().unwrap();
    let price = PRICE * MATOMS_PER_ATOM;
    {
        let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
        tip(&ledger, 1, PRICE, true);
        let Charge::Run(call) = charge(&ledger, &key(1), json!({}), NOW) else {
            panic!("charged from the tip");
        };
        ledger.interrupt(call, NOW).unwrap();
        assert_eq!(reserved(&ledger, NOW), price, "held for the retry");
        assert!(matches!(
            charge(&ledger, &key(2), json!({}), NOW),
            Charge::Insufficient(_)
        ));
        assert!(matches!(
            charge(&ledger, &key(1), json!({}), NOW),
            Charge::Run(_)
        ));
        assert_eq!(reserved(&ledger, NOW), 0, "spent by the retry");
        // The call refused meanwhile gets the next tip, and is cut by a crash with the
        // retry: both pending when the process dies.
        tip(&ledger, 2, PRICE, true);
        let Charge::Run(_) = charge(&ledger, &key(2), json!({}), NOW) else {
            panic!("charged from its tip");
        };
    }
    let opened = Ledger::open(dir.path(), NOW).unwrap();
    assert_eq!(opened.refunded, 2, "both pending");
    let ledger = opened.ledger;
    assert_eq!(reserved(&ledger, NOW), 2 * price, "each held for its retry");
    assert!(matches!(
        charge(&ledger, &key(3), json!({}), NOW),
        Charge::Insufficient(_)
    ));
    assert!(matches!(
        charge(&ledger, &key(1), json!({}), NOW),
        Charge::Run(_)
    ));
    assert_eq!(reserved(&ledger, NOW), price, "key 2's hold waits on");
    // Never retried, such a hold ends with the wait, as any reservation does.
    let later = UnixTime(NOW.0 + RESERVATION_WAIT_SECS as i64 + 1);
    assert_eq!(reserved(&ledger, later), 0);
    assert!(matches!(
        charge(&ledger, &key(3), json!({}), later),
        Charge::Run(_)
    ));
}
