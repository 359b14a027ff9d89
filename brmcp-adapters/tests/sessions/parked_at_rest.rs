//! A short park delay parks a server session between its calls: it counts from the
//! session coming to rest (its answers sent, no request in progress), as its writer
//! reports, not from the timer's scan (which runs at most once a second). Calls back to
//! back keep it running; a notification that needs no service (`initialized`, a
//! cancellation, a progress report) leaves a parked session parked, flood or not.

use std::time::Duration;

use crate::common::raw::RawClient;
use crate::common::{Lifecycle, call, connect, handlers, serve, text};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Faults, Pair, uid};
use serde_json::json;

/// Far below the scan's one second: only the rest report parks this soon.
const PARK_AFTER: Duration = Duration::from_millis(50);

fn server_config() -> RouterConfig {
    let mut server = RouterConfig::server();
    server.server_park_after = Some(PARK_AFTER);
    server
}

#[tokio::test(start_paused = true)]
async fn a_session_parks_between_calls_and_not_between_back_to_back_ones() {
    let pair = Pair::with_configs(31, Faults::none(), server_config(), RouterConfig::client());
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    for n in 0..20 {
        let said = format!("back to back {n}");
        let answer = client
            .call_tool(call("echo", json!({"text": said})))
            .await
            .expect("answered");
        assert_eq!(text(&answer), said);
    }
    assert_eq!(
        pair.server.stats().sessions_resumed,
        0,
        "revived between back-to-back calls"
    );

    for round in 1..=3 {
        tokio::time::sleep(PARK_AFTER * 4).await;
        assert_eq!(handlers(&probe), 0, "round {round}: not parked at rest");
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            client.call_tool(call("echo", json!({"text": "again"}))),
        )
        .await
        .expect("the call on a parked session hung")
        .expect("answered");
        assert_eq!(text(&answer), "again");
        assert_eq!(pair.server.stats().sessions_resumed, round);
    }
    let stats = pair.server.stats();
    assert_eq!(
        (stats.sessions_open, stats.sessions_closed),
        (1, 0),
        "{stats:?}"
    );
    client.cancel().await.expect("cancel");
}

#[tokio::test(start_paused = true)]
async fn a_session_busy_when_due_parks_once_its_call_ends() {
    let pair = Pair::with_configs(32, Faults::none(), server_config(), RouterConfig::client());
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    let slow = client.call_tool(call("sleep", json!({"secs": 3})));
    let watch = async {
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            assert_eq!(handlers(&probe), 1, "parked while a call was running");
        }
    };
    let (answer, ()) = tokio::join!(slow, watch);
    answer.expect("the slow call was answered");
    tokio::time::sleep(PARK_AFTER * 4).await;
    assert_eq!(handlers(&probe), 0, "at rest again, then parked");
    client.cancel().await.expect("cancel");
}

/// A client that floods a parked session with notifications no service needs gets no
/// service for them: the session stays parked until a request, which is answered.
#[tokio::test(start_paused = true)]
async fn notifications_leave_a_parked_session_parked() {
    const WAIT: Duration = Duration::from_secs(5);
    let mut raw = RawClient::new(uid(2), server_config());
    let probe = serve(&raw.server);
    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}}))
        .await;
    assert_eq!(raw.recv(WAIT).await.expect("initialized")["id"], 1);
    // Parked before its `initialized` even arrives: the revival replays one.
    tokio::time::sleep(PARK_AFTER * 4).await;
    assert_eq!(handlers(&probe), 0, "not parked after the handshake");
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    for n in 0..200 {
        raw.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
            "params": {"requestId": n, "reason": "flood"}}),
        )
        .await;
        raw.send(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": n, "progress": 1}}))
            .await;
    }
    tokio::time::sleep(PARK_AFTER * 4).await;
    assert_eq!(handlers(&probe), 0, "a notification revived the session");
    assert!(
        raw.recv(Duration::from_millis(100)).await.is_none(),
        "a notification was answered"
    );
    assert_eq!(raw.server.stats().sessions_resumed, 0);

    raw.send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "after the flood"}}}))
        .await;
    let answer = raw.recv(WAIT).await.expect("the request was answered");
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(
        answer["result"]["content"][0]["text"], "after the flood",
        "{answer}"
    );
    assert!(
        raw.recv(Duration::from_millis(100)).await.is_none(),
        "an answer nobody asked for"
    );
    let stats = raw.server.stats();
    assert_eq!(
        (stats.sessions_resumed, stats.sessions_open),
        (1, 1),
        "{stats:?}"
    );
}
