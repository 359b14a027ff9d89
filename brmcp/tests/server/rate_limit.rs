//! The per-caller rate limit (Go `TestRateLimit`): with 2 calls a minute, two calls
//! run, the third is refused with `rate limited; retry later`, another caller is not
//! affected, and a token comes back after 30 seconds. Listing tools spends nothing; a
//! replayed duplicate spends nothing; a call refused for payment keeps its token for its
//! paid reissue, so a burst of paid calls at the limit all run once paid for.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use brmcp::server::{DEFAULT_CALLS_PER_MINUTE, RATE_LIMITED};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_per_minute_per_caller() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(
        builder.calls_per_minute(2).tool(echo(&probe)),
        clock.clone(),
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;
    let bob = client(&env.fabric, BOB).await;
    let args = || serde_json::json!({"text": "t"});

    for _ in 0..5 {
        alice.list_all_tools().await.unwrap();
    }
    assert!(!is_error(&call(&alice, "echo", args(), None).await));
    assert!(!is_error(&call(&alice, "echo", args(), None).await));
    let limited = call(&alice, "echo", args(), None).await;
    assert!(is_error(&limited));
    assert_eq!(text(&limited), RATE_LIMITED);
    assert_eq!(text(&limited), "rate limited; retry later");
    assert!(!is_error(&call(&bob, "echo", args(), None).await));

    clock.advance(Duration::from_secs(29));
    assert_eq!(
        text(&call(&alice, "echo", args(), None).await),
        RATE_LIMITED
    );
    clock.advance(Duration::from_secs(1));
    assert!(!is_error(&call(&alice, "echo", args(), None).await));
    assert_eq!(probe.runs(), 4);
    assert_eq!(env.harness.stats().rate_limited, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_are_free_and_a_payment_round_reserves_its_run() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(
        builder.calls_per_minute(2).tool(fortune(&probe, 5)),
        clock,
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;
    let key = Some("rate-key-01");

    // Token 1: refused for payment, kept for the reissue.
    let refused = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert!(text(&refused).contains("payment_required"));
    tip(&env.harness, 1, ALICE, 50_000).await;
    // Runs on token 1.
    let ran = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert!(!is_error(&ran));
    // The duplicates are answered from the ledger.
    for _ in 0..3 {
        assert_eq!(
            call(&alice, "fortune", serde_json::json!({}), key).await,
            ran
        );
    }
    // Token 2 runs another call; then the bucket is empty.
    let second = call(
        &alice,
        "fortune",
        serde_json::json!({}),
        Some("rate-key-02"),
    )
    .await;
    assert!(!is_error(&second), "{}", text(&second));
    let limited = call(
        &alice,
        "fortune",
        serde_json::json!({}),
        Some("rate-key-03"),
    )
    .await;
    assert_eq!(text(&limited), RATE_LIMITED);
    assert_eq!(probe.runs(), 2);
    assert_eq!(balance(&env.harness, ALICE).await, 40_000);
}

/// The price of `fortune` in the burst: 5 atoms.
const BURST_PRICE: u64 = 5;

/// Calls `fortune` once per key, all at once.
async fn burst(alice: &Client, keys: &[String]) -> Vec<rmcp::model::CallToolResult> {
    let calls = keys
        .iter()
        .map(|key| call(alice, "fortune", serde_json::json!({}), Some(key)));
    futures_util::future::join_all(calls).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_paid_calls_at_the_limit_all_run_once_paid() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(
        builder
            .calls_per_minute(DEFAULT_CALLS_PER_MINUTE)
            .tool(fortune(&probe, BURST_PRICE)),
        clock,
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;
    let limit = DEFAULT_CALLS_PER_MINUTE as usize;
    let keys: Vec<String> = (0..limit).map(|i| format!("burst-key-{i:04}")).collect();

    // The whole minute's worth at once, unfunded: every one asks for payment.
    let quoted = burst(&alice, &keys).await;
    assert!(quoted.iter().all(|r| text(r).contains("payment_required")));
    // One more is refused before any payment is asked.
    let over = call(
        &alice,
        "fortune",
        serde_json::json!({}),
        Some("burst-key-over"),
    )
    .await;
    assert_eq!(text(&over), RATE_LIMITED);
    // A poll of every call before the tips arrive: still payment_required, not limited.
    let polled = burst(&alice, &keys).await;
    assert!(polled.iter().all(|r| text(r).contains("payment_required")));

    // Paid for, all reissued at once: every one runs.
    tip(&env.harness, 1, ALICE, BURST_PRICE * 1000 * limit as u64).await;
    let ran = burst(&alice, &keys).await;
    for result in &ran {
        assert!(!is_error(result), "{}", text(result));
    }
    assert_eq!(probe.runs(), limit);
    assert_eq!(balance(&env.harness, ALICE).await, 0);
    // The runs were counted: the minute is used up.
    let after = call(
        &alice,
        "fortune",
        serde_json::json!({}),
        Some("burst-key-late"),
    )
    .await;
    assert_eq!(text(&after), RATE_LIMITED);
    assert_eq!(env.harness.stats().rate_limited, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_a_key_keeps_its_run_for_the_same_call() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(
        builder.calls_per_minute(1).tool(fortune(&probe, 5)),
        clock,
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;
    let refused = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert!(text(&refused).contains("payment_required"));
    tip(&env.harness, 1, ALICE, 5_000).await;
    // The same call (tool and arguments) runs on the reserved token.
    let ran = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert!(!is_error(&ran), "{}", text(&ran));
    assert_eq!(
        text(&call(&alice, "fortune", serde_json::json!({}), None).await),
        RATE_LIMITED
    );
    assert_eq!(probe.runs(), 1);
}
