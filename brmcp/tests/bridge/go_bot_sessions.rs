//! The bridge against a bot on the Go implementation (the adapters' double of its router
//! and go-sdk sessions): after the Go server forgets the bridge's session (idle expiry,
//! restart) the agent's next calls go through without an error; at the Go router's
//! session limit the bridge reports the bot unavailable quickly and recovers once a place
//! frees up.

pub(crate) use brmcp_test_support::go_router;

use std::time::Duration;

use crate::common::{PayMode, autopay_bridge, call, connect, text};
use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::uid;
use brmcp::bridge::Bridge;
use go_router::{GoProbe, GoRouter};
use serde_json::json;

struct GoEnv {
    go: GoRouter,
    bridge: Bridge,
    _dir: tempfile::TempDir,
}

async fn go_env(idle: Duration, cap: usize) -> GoEnv {
    let go = GoRouter::new(uid(1), idle, cap);
    let bridge_id = uid(2);
    let router = go.link(bridge_id, RouterConfig::client());
    let dir = tempfile::tempdir().expect("tempdir");
    let bridge = autopay_bridge(router, dir.path(), bridge_id, go.id(), PayMode::Fail).await;
    GoEnv {
        go,
        bridge,
        _dir: dir,
    }
}

#[tokio::test(start_paused = true)]
async fn bridge_recovers_after_go_idle_expiry_and_restart() {
    let env = go_env(Duration::from_secs(60), 8).await;
    let probe = env.go.probe();
    let agent = connect(&env.bridge, env.go.id(), ()).await;
    let r = agent
        .call_tool(call("echo", json!({"text": "one"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "one");

    // Ten quiet minutes: the Go server forgets the session.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(GoProbe::get(&probe.expired), 1);
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        agent.call_tool(call("echo", json!({"text": "two"}))),
    )
    .await
    .expect("the call after expiry hung")
    .expect("the call after expiry failed");
    assert_eq!(text(&r), "two");
    assert_eq!(GoProbe::get(&probe.refusals), 1);

    // The Go bot restarts.
    env.go.restart();
    let r = agent
        .call_tool(call("echo", json!({"text": "three"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "three");
    assert_eq!(GoProbe::get(&probe.refusals), 2);
    assert_eq!(GoProbe::get(&probe.calls), 3, "each call ran once");
    assert_eq!(env.go.sessions(), 1, "no session left behind");
    agent.cancel().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn bridge_at_the_go_session_limit_fails_fast_then_recovers() {
    let env = go_env(Duration::from_secs(60), 1).await;
    let probe = env.go.probe();
    // Another client of the bridge's identity holds the only place.
    env.go.occupy(uid(2));

    // The Go router drops the bridge's new session silently: the agent hears "bot
    // unavailable" within the connect timeout, not after the request timeout.
    let started = tokio::time::Instant::now();
    let (client_end, server_end) = tokio::io::duplex(1 << 16);
    let bridge = env.bridge.clone();
    let bot = env.go.id();
    tokio::spawn(async move { bridge.serve(&bot, server_end).await });
    let refused = rmcp::ServiceExt::serve((), client_end).await;
    let error = refused.expect_err("the bot cannot be reached");
    assert!(error.to_string().contains("bot unavailable"), "{error}");
    assert!(
        started.elapsed() <= brmcp::adapters::INITIALIZE_TIMEOUT,
        "{:?}",
        started.elapsed()
    );
    assert!(GoProbe::get(&probe.dropped_at_cap) >= 1);

    // The other session idles out; the place is the bridge's.
    tokio::time::sleep(Duration::from_secs(120)).await;
    let agent = connect(&env.bridge, env.go.id(), ()).await;
    let r = agent
        .call_tool(call("echo", json!({"text": "in"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "in");
    agent.cancel().await.unwrap();
}
