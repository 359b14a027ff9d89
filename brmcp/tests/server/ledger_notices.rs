//! The notices owed to the callers of interrupted calls: a charge keeps where its caller
//! waits (session and request id); the refund at open marks the caller to be told in the
//! same transaction; the mark lasts until `told` (a crash before it tells again, never
//! refunds again), lapses after the notice window, and is never made for a call whose
//! origin is unknown: charged without one, with a request id too long to keep, or before
//! schema 4 (a schema 3 ledger is migrated).

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::{SessionId, UnixTime};
use brmcp::server::{
    ArgsHash, CallKey, CallRequest, Charge, FILE_NAME, Interrupted, Keyed, Ledger,
    MAX_REQUEST_ID_BYTES, NOTICE_WINDOW_SECS, Origin, SCHEMA_VERSION, Tip,
};
use rmcp::model::RequestId;

use crate::support::ledger::schema_version;

const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const NOW: UnixTime = UnixTime(1_767_225_600);

/// Alice's funds, in milliatoms.
const FUNDS: u64 = 100_000;

fn sid(n: u8) -> SessionId {
    SessionId::from_entropy([n; 8])
}

/// Opens the ledger in `dir`, funding Alice (the tip's redelivery on later opens credits
/// nothing); returns it and its refunds.
fn open(dir: &std::path::Path) -> (Ledger, usize) {
    let opened = Ledger::open(dir, NOW).unwrap();
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms: FUNDS,
    };
    opened.ledger.record_tip(&tip, true, NOW).unwrap();
    (opened.ledger, opened.refunded)
}

/// Charges a keyed call of 10 atoms from `origin`, leaving it pending.
fn charge(ledger: &Ledger, key: &str, origin: Option<Origin<'_>>) {
    let key = CallKey::new(key).unwrap();
    let request = CallRequest {
        caller: ALICE,
        tool: "slow",
        price_atoms: 10,
        keyed: Some(Keyed {
            key: &key,
            args: ArgsHash::of_value(&serde_json::json!({})),
        }),
    };
    assert!(matches!(
        ledger.charge_from(&request, origin, NOW).unwrap(),
        Charge::Run(_)
    ));
}

#[test]
fn an_interrupted_call_is_owed_a_notice_until_told_and_refunded_once() {
    let dir = tempfile::tempdir().unwrap();
    let (ledger, _) = open(dir.path());
    let id = RequestId::String("req-7".into());
    charge(
        &ledger,
        "notice-key-1",
        Some(Origin {
            sid: sid(1),
            request_id: &id,
        }),
    );
    let long = RequestId::String("i".repeat(MAX_REQUEST_ID_BYTES).into());
    charge(
        &ledger,
        "notice-key-2",
        Some(Origin {
            sid: sid(2),
            request_id: &long,
        }),
    );
    charge(&ledger, "notice-key-3", None);
    assert!(
        ledger.interrupted(NOW).unwrap().is_empty(),
        "nothing refunded yet"
    );
    drop(ledger);

    // The process died: all three are refunded, one caller can be told.
    let (ledger, refunded) = open(dir.path());
    assert_eq!(refunded, 3);
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), FUNDS);
    let owed = ledger.interrupted(NOW).unwrap();
    let [notice]: [Interrupted; 1] = owed.try_into().unwrap();
    assert_eq!(
        (
            notice.caller,
            notice.sid,
            &notice.request_id,
            notice.tool.as_str()
        ),
        (ALICE, sid(1), &id, "slow")
    );
    assert_eq!(notice.refunded_at, NOW);
    drop(ledger);

    // Killed before telling: told on the next start, not refunded again.
    let (ledger, refunded) = open(dir.path());
    assert_eq!(refunded, 0);
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), FUNDS);
    let owed = ledger.interrupted(NOW).unwrap();
    assert_eq!(owed.len(), 1);
    ledger.told(owed[0].call).unwrap();
    assert!(ledger.interrupted(NOW).unwrap().is_empty());
    drop(ledger);
    let (ledger, _) = open(dir.path());
    assert!(ledger.interrupted(NOW).unwrap().is_empty());
}

#[test]
fn a_notice_lapses_after_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let (ledger, _) = open(dir.path());
    let id = RequestId::Number(3);
    let origin = Origin {
        sid: sid(3),
        request_id: &id,
    };
    charge(&ledger, "notice-key-4", Some(origin));
    drop(ledger);
    let (ledger, _) = open(dir.path());
    let window_end = NOW.saturating_add(NOTICE_WINDOW_SECS);
    assert_eq!(ledger.interrupted(window_end).unwrap().len(), 1);
    let late = window_end.saturating_add(1);
    assert!(ledger.interrupted(late).unwrap().is_empty());
    assert!(
        ledger.interrupted(NOW).unwrap().is_empty(),
        "dropped, not hidden"
    );
}

#[test]
fn a_schema_3_ledger_is_migrated_and_its_pending_calls_refunded_untold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    {
        let (ledger, _) = open(dir.path());
        charge(&ledger, "notice-key-5", None);
    }
    {
        // Back to schema 3 as it was shipped: no call origins.
        let db = rusqlite::Connection::open(&path).unwrap();
        db.execute_batch(
            "DROP TABLE waiting; DROP INDEX calls_notify; ALTER TABLE calls DROP COLUMN notify; \
             ALTER TABLE calls DROP COLUMN request_id; ALTER TABLE calls DROP COLUMN session;",
        )
        .unwrap();
        db.pragma_update(None, "user_version", 3).unwrap();
    }
    assert!(Ledger::attach(dir.path()).is_err(), "attach never migrates");
    let (ledger, refunded) = open(dir.path());
    assert_eq!(refunded, 1);
    assert!(ledger.interrupted(NOW).unwrap().is_empty());
    // Charges keep their origin from now on.
    let id = RequestId::Number(9);
    charge(
        &ledger,
        "notice-key-6",
        Some(Origin {
            sid: sid(6),
            request_id: &id,
        }),
    );
    drop(ledger);
    let (ledger, refunded) = open(dir.path());
    assert_eq!(refunded, 1);
    assert_eq!(ledger.interrupted(NOW).unwrap().len(), 1);
    drop(ledger);
    assert_eq!(schema_version(&path), SCHEMA_VERSION);
}
