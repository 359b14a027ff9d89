//! The harness keeps no state in a session, so `brmcp serve` parks idle callers'
//! sessions (`RouterConfig::server_park_after`): across a park and a revival a caller's
//! balance, its call keys' replays and its rate limit hold, and a caller removed from
//! the allowlist while parked does not get its session back.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::uid;
use brmcp::server::ServeConfig;
use rmcp::ServiceExt;
use serde_json::json;

use crate::support::*;

/// Short, so the test parks within a second; the shipped delay is longer.
const PARK_AFTER: Duration = Duration::from_millis(200);

/// Waits until the server has revived `n` parked sessions in all.
async fn revived(env: &Env, n: u64) {
    until("a parked session revived", || {
        env.router.stats().sessions_resumed >= n
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn money_call_keys_and_rate_survive_parking() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let mut config = RouterConfig::server();
    config.server_park_after = Some(PARK_AFTER);
    let env = env(
        builder
            .router_config(config)
            .calls_per_minute(3)
            .tool(fortune(&probe, 500))
            .tool(echo(&probe)),
        clock,
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;
    tip(&env.harness, 1, ALICE, 1_200_000).await;

    let first = call(&alice, "fortune", json!({}), Some("call-key-0001")).await;
    assert!(!is_error(&first), "{first:?}");
    assert_eq!(balance(&env.harness, ALICE).await, 700_000);

    // Idle past the park: the same key replays its outcome, nothing runs or is charged.
    tokio::time::sleep(PARK_AFTER * 3).await;
    let replay = call(&alice, "fortune", json!({}), Some("call-key-0001")).await;
    revived(&env, 1).await;
    assert_eq!(text(&replay), text(&first));
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 700_000);

    // Parked again: a new key pays once more from the same balance.
    tokio::time::sleep(PARK_AFTER * 3).await;
    let second = call(&alice, "fortune", json!({}), Some("call-key-0002")).await;
    revived(&env, 2).await;
    assert!(!is_error(&second), "{second:?}");
    assert_eq!(balance(&env.harness, ALICE).await, 200_000);

    // Three calls a minute, and the replay took none: the third runs, and after a park
    // the fourth is refused.
    let third = call(&alice, "echo", json!({"text": "hi"}), None).await;
    assert!(!is_error(&third), "{third:?}");
    tokio::time::sleep(PARK_AFTER * 3).await;
    let fourth = call(&alice, "echo", json!({"text": "hi"}), None).await;
    assert!(
        is_error(&fourth),
        "the rate limit survived parking: {fourth:?}"
    );
    assert!(text(&fourth).contains("rate"), "{}", text(&fourth));
    revived(&env, 3).await;
    assert_eq!(probe.runs(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_removed_while_parked_is_refused_and_others_revive() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let mut config = RouterConfig::server();
    config.server_park_after = Some(PARK_AFTER);
    let env = env(builder.router_config(config).tool(echo(&probe)), clock, dir);

    // Mallory is not allowed: no session opens for it.
    let router = env.fabric.router(uid(MALLORY), RouterConfig::client());
    let transport = router.dial(uid(SERVER)).unwrap();
    let opened = tokio::time::timeout(Duration::from_secs(5), ().serve(transport)).await;
    assert!(
        !matches!(opened, Ok(Ok(_))),
        "a caller not allowed got a session"
    );

    let alice = client(&env.fabric, ALICE).await;
    let bob = client(&env.fabric, BOB).await;
    for c in [&alice, &bob] {
        let r = call(c, "echo", json!({"text": "before"}), None).await;
        assert!(!is_error(&r), "{r:?}");
    }

    // Both park; Alice is removed from the allowlist meanwhile.
    tokio::time::sleep(PARK_AFTER * 3).await;
    let only_bob = format!(r#"{{"allowed_uids": ["{}"]}}"#, peer(BOB));
    let config = ServeConfig::parse(&only_bob, Path::new("brmcp.json")).unwrap();
    env.harness.reconfigure(&config);

    // Bob's session revives; Alice's parked one does not come back.
    let r = call(&bob, "echo", json!({"text": "after"}), None).await;
    assert!(!is_error(&r), "{r:?}");
    revived(&env, 1).await;
    let refused = tokio::time::timeout(
        Duration::from_secs(5),
        alice.call_tool(params("echo", json!({"text": "after"}), None)),
    )
    .await;
    assert!(
        !matches!(refused, Ok(Ok(ref r)) if !is_error(r)),
        "a removed caller's parked session was served: {refused:?}"
    );
    assert_eq!(probe.runs(), 3);
    assert_eq!(env.router.stats().sessions_resumed, 1);
}

/// By default a caller's session parks between its calls (`DEFAULT_PARK_AFTER` after it
/// came to rest) and lives on unnoticed; with lists that can change at run time it
/// stays running `LISTENED_PARK_AFTER`, to hear of changes as they happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_a_session_parks_between_calls_unless_lists_can_change() {
    use brmcp::server::{DEFAULT_PARK_AFTER, DynamicTools, LISTENED_PARK_AFTER};
    assert!(LISTENED_PARK_AFTER > Duration::from_secs(2));

    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let fixed = env(builder.tool(echo(&probe)), clock, dir);
    let alice = client(&fixed.fabric, ALICE).await;
    for round in 1..=2 {
        let said = call(&alice, "echo", json!({"text": "hi"}), None).await;
        assert!(!is_error(&said), "{said:?}");
        tokio::time::sleep(DEFAULT_PARK_AFTER * 5).await;
        let again = call(&alice, "echo", json!({"text": "hi"}), None).await;
        assert_eq!(text(&again), text(&said));
        revived(&fixed, round).await;
    }
    assert_eq!(probe.runs(), 4);

    let (builder, clock, dir) = super::support::builder();
    let listened = env(
        builder
            .tool(echo(&probe))
            .dynamic_tools(DynamicTools::new()),
        clock,
        dir,
    );
    let bob = client(&listened.fabric, BOB).await;
    call(&bob, "echo", json!({"text": "hi"}), None).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    call(&bob, "echo", json!({"text": "hi"}), None).await;
    assert_eq!(
        listened.router.stats().sessions_resumed,
        0,
        "parked though it may be told of changes"
    );
}
