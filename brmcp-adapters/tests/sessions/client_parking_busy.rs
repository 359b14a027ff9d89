//! What keeps a `Client`'s session from parking: a lease, a request of ours or a request
//! of the server's in progress; a request the server cancelled does not.

use std::sync::atomic::Ordering::SeqCst;

use brmcp_adapters::RouterConfig;
use rmcp::model::{PingRequest, ServerRequest};
use serde_json::json;

use crate::common::client_parking::{
    PARK_AFTER, SETTLE, Watcher, connect, echo, inject, pair, pushed,
};
use crate::common::{call, serve, text};

#[tokio::test(start_paused = true)]
async fn a_lease_or_a_request_in_progress_keeps_it_running() {
    let pair = pair(33, RouterConfig::client());
    let probe = serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;

    let lease = client.lease().await.expect("lease");
    tokio::time::sleep(PARK_AFTER * 4).await;
    assert!(!client.is_parked(), "parked under a lease");

    // A peer taken out of the lease: its call keeps the session busy on its own.
    let peer = (*lease).clone();
    drop(lease);
    // The tool sleeps whole seconds: at least four park delays.
    let secs = (PARK_AFTER * 4).as_secs().max(1);
    let slow =
        tokio::spawn(async move { peer.call_tool(call("sleep", json!({"secs": secs}))).await });
    for _ in 0..7 {
        tokio::time::sleep(PARK_AFTER / 2).await;
        assert!(!client.is_parked(), "parked with a call in progress");
    }
    let answer = slow.await.unwrap().expect("the slow call was answered");
    assert_eq!(text(&answer), format!("slept {secs}"));
    assert_eq!(probe.calls.load(SeqCst), 1);

    // The lease ended long ago; the call's end counts as activity.
    tokio::time::sleep(PARK_AFTER / 2).await;
    assert!(!client.is_parked(), "parked right after the call");
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked(), "idle, then parked");
    assert_eq!(pair.client.stats().client_parked, 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_the_client_is_serving_keeps_it_running() {
    let watcher = Watcher::default();
    *watcher.seen.ping_delay.lock().unwrap() = PARK_AFTER * 4;
    let seen = watcher.seen.clone();
    let (_pair, client, server) = pushed(35, watcher).await;
    let ping = tokio::spawn(async move {
        server
            .send_request(ServerRequest::PingRequest(PingRequest::default()))
            .await
    });
    for _ in 0..7 {
        tokio::time::sleep(PARK_AFTER / 2).await;
        assert!(!client.is_parked(), "parked while answering the server");
    }
    ping.await.unwrap().expect("the slow ping was answered");
    assert_eq!(seen.pings.load(SeqCst), 1);
}

/// A request the server cancels is answered by nobody (rmcp drops the cancelled
/// handler's answer): it does not keep the session from parking, however long its
/// handler would have taken.
#[tokio::test(start_paused = true)]
async fn a_request_the_server_cancels_does_not_keep_it_running() {
    let pair = pair(38, RouterConfig::client());
    serve(&pair.server);
    let watcher = Watcher::default();
    *watcher.seen.ping_delay.lock().unwrap() = PARK_AFTER * 10;
    let client = connect(&pair, watcher).await;
    tokio::time::sleep(SETTLE).await;
    inject(
        &pair,
        client.sid(),
        &json!({"jsonrpc": "2.0", "id": 77, "method": "ping"}),
    );
    tokio::time::sleep(SETTLE).await;
    inject(
        &pair,
        client.sid(),
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 77}}),
    );
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked(), "the cancelled request kept it running");
    assert_eq!(echo(&client, "after").await, "after");
}
