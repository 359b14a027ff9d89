//! Timeouts too large to add to the clock mean "never", not a panic in the router task:
//! for partial messages, and for idle sessions when the idle sweep runs over them.

use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Fabric, uid};
use brmcp_adapters::{AdapterError, RouterConfig};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn huge_partial_and_idle_timeouts_are_never() {
    let fabric = Fabric::new(1);
    let mut config = RouterConfig::server();
    config.limits.partial_timeout_secs = u64::MAX;
    config.server_idle_timeout = Some(Duration::MAX);
    // A session this router dials idles out after a minute, so the idle sweep runs, and
    // it runs over the accepted session whose timeout cannot be added to the clock.
    config.client_idle_timeout = Some(Duration::from_secs(60));
    let server = fabric.router(uid(1), config);
    serve(&server);
    let other = fabric.router(uid(3), RouterConfig::server());
    serve(&other);

    server
        .handle_pm(uid(3), "--mcp[v=1,sid=aa,mid=bb,seq=1/2,exp=0]--QUJD")
        .await
        .expect("router running");
    let client_router = fabric.router(uid(2), RouterConfig::client());
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;
    let dialed = connect(&server, uid(3), Lifecycle::Legacy).await;

    tokio::time::sleep(Duration::from_secs(120)).await;
    let stats = server.stats();
    assert_eq!(
        stats.sessions_expired, 1,
        "the dialed session idled out: {stats:?}"
    );
    assert_eq!(stats.messages_buffered, 1, "the partial is kept");
    let after = server.handle_pm(uid(3), "hello").await;
    assert!(
        !matches!(after, Err(AdapterError::RouterClosed)),
        "the router task died: {after:?}"
    );
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        client.call_tool(call("echo", json!({"text": "still here"}))),
    )
    .await
    .expect("the router stopped answering")
    .expect("call");
    assert_eq!(text(&result), "still here");
    assert_eq!(server.stats().sessions_resumed, 0, "never expired");
    drop(dialed);
}
