//! Call keys (Go `TestCallKeyIdempotency`): an unfunded keyed call is refused without
//! consuming its key; once funded the same key runs and pays once; a duplicate replays
//! the exact result without running or paying; a new key runs and pays again. Keys are
//! per caller, and a key that is not a string of 8 to 128 bytes is ignored.

use std::sync::Arc;

use crate::support::*;
use rmcp::model::RequestMetaObject;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_runs_and_pays_at_most_once() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(fortune(&probe, 500)), clock, dir);
    let alice = client(&env.fabric, ALICE).await;
    let args = serde_json::json!({});

    // Unfunded: refused, and the key is not pinned to the refusal.
    let refused = call(&alice, "fortune", args.clone(), Some("key-00000001")).await;
    assert!(text(&refused).contains("payment_required"));
    assert_eq!(probe.runs(), 0);

    tip(&env.harness, 1, ALICE, 1_000_000).await;
    let first = call(&alice, "fortune", args.clone(), Some("key-00000001")).await;
    assert!(!is_error(&first), "{first:?}");
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 500_000);

    // The duplicate replays the same result, byte for byte, without running or paying.
    let again = call(&alice, "fortune", args.clone(), Some("key-00000001")).await;
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&first).unwrap()
    );
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 500_000);
    assert_eq!(env.harness.stats().replayed, 1);

    // A new key is a new call.
    let second = call(&alice, "fortune", args.clone(), Some("key-00000002")).await;
    assert_ne!(text(&second), text(&first));
    assert_eq!(probe.runs(), 2);
    assert_eq!(balance(&env.harness, ALICE).await, 0);

    // Bob's identical key is his own: refused for his own (empty) balance.
    let bob = client(&env.fabric, BOB).await;
    let bobs = call(&bob, "fortune", args, Some("key-00000001")).await;
    assert!(text(&bobs).contains("payment_required"), "{}", text(&bobs));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_keys_are_ignored() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(fortune(&probe, 1)), clock, dir);
    let alice = client(&env.fabric, ALICE).await;
    tip(&env.harness, 1, ALICE, 100_000).await;

    let bad_keys = [
        serde_json::json!("short"),
        serde_json::json!("k".repeat(129)),
        serde_json::json!(12345678),
        serde_json::json!(null),
    ];
    for key in bad_keys {
        for _ in 0..2 {
            let mut params = params("fortune", serde_json::json!({}), None);
            let mut meta = RequestMetaObject::default();
            meta.insert("brmcp/callKey".into(), key.clone());
            params.meta = Some(meta);
            let result = alice.call_tool(params).await.unwrap();
            assert!(!is_error(&result), "{result:?}");
        }
    }
    // Each call ran and paid: the keys were ignored.
    assert_eq!(probe.runs(), 8);
    assert_eq!(balance(&env.harness, ALICE).await, 92_000);
    assert_eq!(env.harness.stats().replayed, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_keyed_call_runs_once_too() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(echo(&probe)), clock, dir);
    let alice = client(&env.fabric, ALICE).await;
    let args = serde_json::json!({"text": "once"});
    let first = call(&alice, "echo", args.clone(), Some("free-key-1")).await;
    let again = call(&alice, "echo", args, Some("free-key-1")).await;
    assert_eq!(first, again);
    assert_eq!(probe.runs(), 1);
}
