//! A keyed call runs and pays at most once per (caller, key); its outcome replays for
//! 30 minutes, across restarts, and a key reused for another call is refused.

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    ArgsHash, CallId, CallKey, CallRequest, Charge, KeyConflict, Keyed, Ledger, MAX_OUTCOME_BYTES,
    OUTCOME_TTL_SECS, Tip,
};
use serde_json::json;

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);
const BOB: PeerId = PeerId::from_bytes([0xb0; 32]);
const OUTCOME: &str = r#"{"content":[{"type":"text","text":"{\"fortune\":\"soon\"}"}],"structuredContent":{"fortune":"soon"}}"#;

fn at(secs: u64) -> UnixTime {
    NOW.saturating_add(secs)
}

fn funded() -> (tempfile::TempDir, Ledger) {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    for (seq, caller) in [(1, ALICE), (2, BOB)] {
        let tip = Tip {
            seq,
            caller,
            matoms: 100_000,
        };
        ledger.record_tip(&tip, true, NOW).unwrap();
    }
    (dir, ledger)
}

fn request<'a>(
    caller: PeerId,
    tool: &'a str,
    key: &'a CallKey,
    args: serde_json::Value,
) -> CallRequest<'a> {
    CallRequest {
        caller,
        tool,
        price_atoms: 10,
        keyed: Some(Keyed {
            key,
            args: ArgsHash::of_value(&args),
        }),
    }
}

fn run(charge: Charge) -> CallId {
    match charge {
        Charge::Run(call) => call,
        other => panic!("expected Run, got {other:?}"),
    }
}

#[test]
fn outcome_replays_across_reopen_within_30_minutes_not_after() {
    let (dir, ledger) = funded();
    let key = CallKey::new("retry-me-please").unwrap();
    let call = request(ALICE, "fortune", &key, json!({"n": 1}));
    let id = run(ledger.charge(&call, NOW).unwrap());
    ledger.complete(id, OUTCOME, at(5)).unwrap();
    drop(ledger);

    let ledger = Ledger::open(dir.path(), at(60)).unwrap().ledger;
    // Key order of the arguments does not matter.
    let again = request(ALICE, "fortune", &key, json!({"n": 1}));
    assert_eq!(
        ledger.charge(&again, at(60)).unwrap(),
        Charge::Replay(OUTCOME.into())
    );
    // Last second of the window (it opened at completion, second 5).
    assert_eq!(
        ledger.charge(&again, at(5 + OUTCOME_TTL_SECS - 1)).unwrap(),
        Charge::Replay(OUTCOME.into())
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 90_000);
    drop(ledger);

    // After the window the key is free: the same call runs and pays again.
    let late = at(5 + OUTCOME_TTL_SECS);
    let ledger = Ledger::open(dir.path(), late).unwrap().ledger;
    let second = run(ledger.charge(&again, late).unwrap());
    assert_ne!(second, id);
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 80_000);
    let journal = ledger.journal(Some(&ALICE), 10).unwrap();
    assert_eq!(journal.len(), 2);
    assert!(!journal[1].key_held && !journal[1].outcome_kept);
    assert_eq!(journal[1].call_key.as_deref(), Some("retry-me-please"));
}

#[test]
fn key_reused_for_another_tool_or_other_arguments_is_refused() {
    let (_dir, ledger) = funded();
    let key = CallKey::new("one-key-one-call").unwrap();
    let id = run(ledger
        .charge(&request(ALICE, "fortune", &key, json!({"a": 1})), NOW)
        .unwrap());

    // While it runs.
    assert_eq!(
        ledger
            .charge(&request(ALICE, "fortune", &key, json!({"a": 1})), NOW)
            .unwrap(),
        Charge::InProgress
    );
    assert_eq!(
        ledger
            .charge(&request(ALICE, "weather", &key, json!({"a": 1})), NOW)
            .unwrap(),
        Charge::KeyConflict(KeyConflict::OtherTool)
    );
    ledger.complete(id, OUTCOME, NOW).unwrap();

    // After it finished.
    assert_eq!(
        ledger
            .charge(&request(ALICE, "fortune", &key, json!({"a": 2})), NOW)
            .unwrap(),
        Charge::KeyConflict(KeyConflict::OtherArguments)
    );
    assert_eq!(
        ledger
            .charge(&request(ALICE, "weather", &key, json!({"a": 1})), NOW)
            .unwrap(),
        Charge::KeyConflict(KeyConflict::OtherTool)
    );
    assert_eq!(
        KeyConflict::OtherArguments.to_string(),
        "call key already used with other arguments"
    );
    // Only the first call paid.
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 90_000);

    // Another caller's identical key is unrelated.
    run(ledger
        .charge(&request(BOB, "weather", &key, json!({"b": 0})), NOW)
        .unwrap());
    assert_eq!(ledger.balance_matoms(&BOB).unwrap(), 90_000);
}

#[test]
fn refund_with_outcome_replays_it_and_without_releases_the_key() {
    let (_dir, ledger) = funded();
    let failed = CallKey::new("handler-failed").unwrap();
    let call = request(ALICE, "fortune", &failed, json!({}));
    let id = run(ledger.charge(&call, NOW).unwrap());
    let error = r#"{"content":[{"type":"text","text":"no fortune today"}],"isError":true}"#;
    ledger
        .refund(id, "handler error", Some(error), NOW)
        .unwrap();
    assert_eq!(
        ledger.charge(&call, NOW).unwrap(),
        Charge::Replay(error.into())
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 100_000);

    let abandoned = CallKey::new("harness-gave-up").unwrap();
    let call = request(ALICE, "fortune", &abandoned, json!({}));
    let id = run(ledger.charge(&call, NOW).unwrap());
    ledger.refund(id, "cancelled", None, NOW).unwrap();
    run(ledger.charge(&call, NOW).unwrap());
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 90_000);
}

#[test]
fn oversized_outcome_is_not_kept_but_the_key_still_blocks_a_rerun() {
    let (_dir, ledger) = funded();
    let key = CallKey::new("huge-result").unwrap();
    let call = request(ALICE, "dump", &key, json!({}));
    let id = run(ledger.charge(&call, NOW).unwrap());
    let huge = "x".repeat(MAX_OUTCOME_BYTES + 1);
    ledger.complete(id, &huge, NOW).unwrap();
    assert!(!ledger.journal_entry(id).unwrap().unwrap().outcome_kept);
    assert_eq!(
        ledger.charge(&call, NOW).unwrap(),
        Charge::OutcomeNotRetained
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 90_000);
}

#[test]
fn free_keyed_calls_use_the_same_api() {
    let (_dir, ledger) = funded();
    let key = CallKey::new("free-and-keyed").unwrap();
    let mut call = request(ALICE, "echo", &key, json!({"text": "hi"}));
    call.price_atoms = 0;
    let id = run(ledger.charge(&call, NOW).unwrap());
    ledger.complete(id, r#"{"echo":"hi"}"#, NOW).unwrap();
    assert_eq!(
        ledger.charge(&call, at(1)).unwrap(),
        Charge::Replay(r#"{"echo":"hi"}"#.into())
    );
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 100_000);
}

#[test]
fn purge_expired_drops_outcomes_past_the_window() {
    let (_dir, ledger) = funded();
    let keys = [
        CallKey::new("purge-key-1").unwrap(),
        CallKey::new("purge-key-2").unwrap(),
    ];
    for (i, key) in keys.iter().enumerate() {
        let id = run(ledger
            .charge(&request(ALICE, "fortune", key, json!({})), NOW)
            .unwrap());
        ledger.complete(id, OUTCOME, at(i as u64 * 100)).unwrap();
    }
    assert_eq!(ledger.purge_expired(at(OUTCOME_TTL_SECS - 1)).unwrap(), 0);
    assert_eq!(ledger.purge_expired(at(OUTCOME_TTL_SECS)).unwrap(), 1);
    assert_eq!(ledger.purge_expired(at(OUTCOME_TTL_SECS)).unwrap(), 0);
    assert_eq!(ledger.purge_expired(at(OUTCOME_TTL_SECS + 100)).unwrap(), 1);
    let journal = ledger.journal(None, 10).unwrap();
    assert!(journal.iter().all(|e| !e.outcome_kept && !e.key_held));
}

#[test]
fn held_answers_like_charge_without_charging() {
    let (_dir, ledger) = funded();
    let key = CallKey::new("held-key-01").unwrap();
    let call = request(ALICE, "fortune", &key, json!({"n": 1}));
    let keyed = call.keyed.unwrap();
    // A free key holds nothing.
    assert_eq!(ledger.held(&ALICE, "fortune", keyed, NOW).unwrap(), None);

    let id = run(ledger.charge(&call, NOW).unwrap());
    assert_eq!(
        ledger.held(&ALICE, "fortune", keyed, NOW).unwrap(),
        Some(Charge::InProgress)
    );
    ledger.complete(id, OUTCOME, at(10)).unwrap();
    assert_eq!(
        ledger.held(&ALICE, "fortune", keyed, at(10)).unwrap(),
        Some(Charge::Replay(OUTCOME.into()))
    );
    let other = request(ALICE, "fortune", &key, json!({"n": 2}));
    assert_eq!(
        ledger
            .held(&ALICE, "fortune", other.keyed.unwrap(), at(10))
            .unwrap(),
        Some(Charge::KeyConflict(KeyConflict::OtherArguments))
    );
    assert_eq!(
        ledger.held(&ALICE, "weather", keyed, at(10)).unwrap(),
        Some(Charge::KeyConflict(KeyConflict::OtherTool))
    );
    // Bob's identical key is free.
    assert_eq!(ledger.held(&BOB, "fortune", keyed, at(10)).unwrap(), None);
    // The window closes 30 minutes after completion, before any purge runs.
    assert_eq!(
        ledger
            .held(&ALICE, "fortune", keyed, at(10 + OUTCOME_TTL_SECS - 1))
            .unwrap(),
        Some(Charge::Replay(OUTCOME.into()))
    );
    assert_eq!(
        ledger
            .held(&ALICE, "fortune", keyed, at(10 + OUTCOME_TTL_SECS))
            .unwrap(),
        None
    );
    // Asking changed nothing: one charge, and the key still held in the journal.
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 90_000);
    assert!(ledger.journal_entry(id).unwrap().unwrap().key_held);
}
