//! The per-caller rate limit (Go `TestRateLimit`): with 2 calls a minute, two calls
//! run, the third is refused with `rate limited; retry later`, another caller is not
//! affected, and a token comes back after 30 seconds. Listing tools spends nothing; a
//! replayed duplicate spends nothing; a call refused for payment has spent its token.

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use brmcp::server::RATE_LIMITED;

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
async fn replays_are_free_and_payment_refusals_are_not() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(
        builder.calls_per_minute(2).tool(fortune(&probe, 5)),
        clock,
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;
    let key = Some("rate-key-01");

    // Token 1: refused for payment.
    let refused = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert!(text(&refused).contains("payment_required"));
    tip(&env.harness, 1, ALICE, 50_000).await;
    // Token 2: runs.
    let ran = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert!(!is_error(&ran));
    // Out of tokens, yet the duplicate is answered from the ledger.
    for _ in 0..3 {
        assert_eq!(
            call(&alice, "fortune", serde_json::json!({}), key).await,
            ran
        );
    }
    let limited = call(
        &alice,
        "fortune",
        serde_json::json!({}),
        Some("rate-key-02"),
    )
    .await;
    assert_eq!(text(&limited), RATE_LIMITED);
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 45_000);
}
