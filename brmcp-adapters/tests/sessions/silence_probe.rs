//! A server restarted in the middle of a call (its process gone, the session with it)
//! is found by the client's silence probe: a `ping` after `DEFAULT_SILENCE_PROBE` of
//! silence gets session-not-found from the new process, the session is initialized
//! again and the call replayed, so the caller has its answer within one probe interval
//! (plus the call's own time) of the server's return, not at the request timeout.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Fabric, uid};
use brmcp_adapters::{DEFAULT_SILENCE_PROBE, RouterConfig};
use serde_json::json;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_call_outlives_a_server_restart_through_the_silence_probe() {
    let fabric = Fabric::new(5);
    let server_id = uid(1);
    let first = fabric.router(server_id, RouterConfig::server());
    let first_probe = serve(&first);
    let client_router = fabric.router(uid(2), RouterConfig::client());
    let client = connect(&client_router, server_id, Lifecycle::Legacy).await;

    let peer = client.peer().clone();
    let call =
        tokio::spawn(async move { peer.call_tool(call("sleep", json!({"secs": 30}))).await });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(first_probe.calls.load(SeqCst), 1, "the call runs");

    // The process dies mid-call and is down for 20 s: pings meanwhile go nowhere.
    fabric.set_online(&server_id, false);
    drop(first);
    tokio::time::sleep(Duration::from_secs(20)).await;
    let second = fabric.router(server_id, RouterConfig::server());
    let second_probe = serve(&second);
    let back = Instant::now();

    let result = tokio::time::timeout(Duration::from_secs(120), call)
        .await
        .expect("the call waited out its request timeout")
        .unwrap()
        .expect("the replayed call's answer");
    assert_eq!(text(&result), "slept 30");
    assert_eq!(
        second_probe.calls.load(SeqCst),
        1,
        "run again, once, by the new process"
    );
    let waited = back.elapsed();
    assert!(
        waited <= DEFAULT_SILENCE_PROBE + Duration::from_secs(30 + 5),
        "answered {waited:?} after the server came back"
    );
    let stats = second.stats();
    assert_eq!(stats.sessions_accepted, 1, "{stats:?}");
    client.cancel().await.unwrap();
}
