//! A peer may open only so many sessions with us; sessions we dialed do not count.

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Fabric, uid};
use brmcp_adapters::{RouterConfig, TOO_MANY_SESSIONS};
use rmcp::ServiceExt;
use rmcp::service::ClientInitializeError;
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn per_peer_cap_refuses_extra_sessions() {
    let fabric = Fabric::new(14);
    let mut config = RouterConfig::server();
    config.max_sessions_per_peer = 2;
    // Both identities serve and dial.
    let a = fabric.router(uid(1), config.clone());
    let b = fabric.router(uid(2), config);
    serve(&a);
    serve(&b);

    // A dials B: that session is B's inbound, and A's outbound (not counted at A).
    let a_to_b = connect(&a, uid(2), Lifecycle::Legacy).await;

    let first = connect(&b, uid(1), Lifecycle::Legacy).await;
    let second = connect(&b, uid(1), Lifecycle::Legacy).await;
    let refused = ().serve(b.dial(uid(1)).expect("dial")).await;
    match refused {
        Err(ClientInitializeError::JsonRpcError(e)) => assert_eq!(e.code, TOO_MANY_SESSIONS),
        other => panic!("expected the cap error, got {other:?}"),
    }
    let stats = a.stats();
    assert_eq!(stats.sessions_accepted, 2, "{stats:?}");
    assert_eq!(stats.dropped_session_cap, 1);

    // The admitted sessions work.
    let result = second
        .call_tool(call("echo", json!({"text": "in"})))
        .await
        .expect("call");
    assert_eq!(text(&result), "in");

    // There is no close frame on the wire: a place frees up when A expires the idle
    // sessions.
    first.cancel().await.expect("cancel");
    second.cancel().await.expect("cancel");
    tokio::time::sleep(std::time::Duration::from_secs(11 * 60)).await;
    let third = connect(&b, uid(1), Lifecycle::Legacy).await;
    let result = third
        .call_tool(call("echo", json!({"text": "again"})))
        .await
        .expect("call");
    assert_eq!(text(&result), "again");
    assert_eq!(a.stats().sessions_accepted, 3);
    let _ = a_to_b;
}
