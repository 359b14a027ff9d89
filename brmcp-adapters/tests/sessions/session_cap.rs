//! A peer may open only so many sessions with us; sessions we dialed do not count. At
//! the cap a new session closes the peer's least recently active idle one, which its
//! client resumes on its next call; a peer whose sessions are all busy is refused.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Fabric, uid};
use brmcp_adapters::{RouterConfig, TOO_MANY_SESSIONS};
use rmcp::ServiceExt;
use rmcp::service::ClientInitializeError;
use serde_json::json;

/// Routers for identities 1 and 2 on one fabric, both serving, with a session cap of 2.
fn capped_pair(seed: u64) -> (Fabric, brmcp_adapters::Router, brmcp_adapters::Router) {
    let fabric = Fabric::new(seed);
    let mut config = RouterConfig::server();
    config.max_sessions_per_peer = 2;
    let a = fabric.router(uid(1), config.clone());
    let b = fabric.router(uid(2), config);
    (fabric, a, b)
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_the_least_recently_used_idle_session_makes_room() {
    let (_fabric, a, b) = capped_pair(14);
    let probe = serve(&a);
    serve(&b);
    // A dials B: that session is B's inbound, and A's outbound (not counted at A).
    let a_to_b = connect(&a, uid(2), Lifecycle::Legacy).await;

    let first = connect(&b, uid(1), Lifecycle::Legacy).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = connect(&b, uid(1), Lifecycle::Legacy).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // The first is used again, so the second is now the least recently used.
    let r = first
        .call_tool(call("echo", json!({"text": "one"})))
        .await
        .expect("call");
    assert_eq!(text(&r), "one");
    tokio::time::sleep(Duration::from_secs(1)).await;

    let third = connect(&b, uid(1), Lifecycle::Legacy).await;
    let r = third
        .call_tool(call("echo", json!({"text": "three"})))
        .await
        .expect("call");
    assert_eq!(text(&r), "three");
    let stats = a.stats();
    assert_eq!(stats.sessions_accepted, 3, "{stats:?}");
    assert_eq!(stats.dropped_session_cap, 0, "{stats:?}");
    assert_eq!(stats.sessions_expired, 0, "{stats:?}");
    // Two inbound (the cap) and the one A dialed.
    assert_eq!(stats.sessions_open, 3, "{stats:?}");

    // The first was kept: it answers without being resumed.
    let r = first
        .call_tool(call("echo", json!({"text": "kept"})))
        .await
        .expect("call");
    assert_eq!(text(&r), "kept");
    assert_eq!(a.stats().sessions_resumed, 0);

    // The second was closed for room, and resumes on its next call, transparently.
    let r = tokio::time::timeout(
        Duration::from_secs(5),
        second.call_tool(call("echo", json!({"text": "back"}))),
    )
    .await
    .expect("the displaced session's call hung")
    .expect("the displaced session's call failed");
    assert_eq!(text(&r), "back");
    let stats = a.stats();
    assert_eq!(stats.sessions_resumed, 1, "{stats:?}");
    assert_eq!(stats.dropped_unknown_session, 0, "{stats:?}");
    assert_eq!(stats.dropped_session_cap, 0, "{stats:?}");
    assert_eq!(stats.sessions_open, 3, "still bounded: {stats:?}");
    assert_eq!(probe.calls.load(Ordering::SeqCst), 4);
    let _ = a_to_b;
}

#[tokio::test(start_paused = true)]
async fn at_the_cap_with_every_session_busy_a_new_one_is_refused() {
    let (_fabric, a, b) = capped_pair(15);
    let probe = serve(&a);
    serve(&b);
    // Dialed by A, so not counted against B at A: both busy sessions below fit.
    let a_to_b = connect(&a, uid(2), Lifecycle::Legacy).await;

    let mut calls = Vec::new();
    for _ in 0..2 {
        let client = connect(&b, uid(1), Lifecycle::Legacy).await;
        calls.push(tokio::spawn(async move {
            let r = client
                .call_tool(call("sleep", json!({"secs": 300})))
                .await
                .expect("long call");
            (client, text(&r))
        }));
    }
    while probe.calls.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let refused = ().serve(b.dial(uid(1)).expect("dial")).await;
    match refused {
        Err(ClientInitializeError::JsonRpcError(e)) => assert_eq!(e.code, TOO_MANY_SESSIONS),
        other => panic!("expected the cap error, got {other:?}"),
    }
    let stats = a.stats();
    assert_eq!(stats.sessions_accepted, 2, "{stats:?}");
    assert_eq!(stats.dropped_session_cap, 1, "{stats:?}");

    // The busy calls were not disturbed.
    for handle in calls {
        let (client, result) = handle.await.expect("call task");
        assert_eq!(result, "slept 300");
        client.cancel().await.expect("cancel");
    }
    // Once idle, they make room again.
    let again = connect(&b, uid(1), Lifecycle::Legacy).await;
    let r = again
        .call_tool(call("echo", json!({"text": "again"})))
        .await
        .expect("call");
    assert_eq!(text(&r), "again");
    assert_eq!(a.stats().sessions_accepted, 3);
    let _ = a_to_b;
}

#[tokio::test(start_paused = true)]
async fn a_first_message_in_many_parts_at_the_cap_still_makes_room() {
    let fabric = Fabric::new(16);
    let mut server = RouterConfig::server();
    server.max_sessions_per_peer = 1;
    let mut client = RouterConfig::client();
    // Every message, `initialize` included, takes several PMs.
    client.chunk_len = 64;
    let a = fabric.router(uid(1), server);
    let b = fabric.router(uid(2), client);
    serve(&a);

    let first = connect(&b, uid(1), Lifecycle::Legacy).await;
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        connect(&b, uid(1), Lifecycle::Legacy),
    )
    .await
    .expect("the session over the cap was not opened");
    let r = second
        .call_tool(call("echo", json!({"text": "parts"})))
        .await
        .expect("call");
    assert_eq!(text(&r), "parts");
    let stats = a.stats();
    assert_eq!(stats.sessions_accepted, 2, "{stats:?}");
    assert_eq!(stats.dropped_session_cap, 0, "{stats:?}");
    let _ = first;
}
