//! The server closes idle sessions; the client's next request goes on transparently
//! instead of hanging or landing in an uninitialized session: the server resumes the
//! legacy session from its record, and the stateless request carries what it needs.

use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Faults, Pair};
use serde_json::json;

async fn expire_then_call(lifecycle: Lifecycle) {
    let mut server = RouterConfig::server();
    server.server_idle_timeout = Some(Duration::from_secs(60));
    let pair = Pair::with_configs(12, Faults::none(), server, RouterConfig::client());
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, lifecycle).await;

    let first = client
        .call_tool(call("echo", json!({"text": "before"})))
        .await
        .expect("first call");
    assert_eq!(text(&first), "before");

    tokio::time::sleep(Duration::from_secs(120)).await;
    let stats = pair.server.stats();
    assert_eq!(stats.sessions_expired, 1, "{stats:?}");
    assert_eq!(stats.sessions_open, 0);

    let second = tokio::time::timeout(
        Duration::from_secs(5),
        client.call_tool(call("echo", json!({"text": "after"}))),
    )
    .await
    .expect("the call after expiry hung")
    .expect("the call after expiry failed");
    assert_eq!(text(&second), "after");

    let stats = pair.server.stats();
    assert_eq!(stats.sessions_accepted, 2, "{stats:?}");
    assert_eq!(stats.sessions_open, 1);
    // Legacy: the server resumed the session, refusing nothing. Stateless: the request
    // carried everything needed to serve it.
    let expected = u64::from(lifecycle == Lifecycle::Legacy);
    assert_eq!(stats.sessions_resumed, expected, "{stats:?}");
    assert_eq!(stats.dropped_unknown_session, 0, "{stats:?}");
    client.cancel().await.expect("cancel");
}

#[tokio::test(start_paused = true)]
async fn legacy_session_is_re_established() {
    expire_then_call(Lifecycle::Legacy).await;
}

#[tokio::test(start_paused = true)]
async fn stateless_session_is_served_again() {
    expire_then_call(Lifecycle::Stateless).await;
}

#[tokio::test(start_paused = true)]
async fn client_sessions_do_not_idle_out_by_default() {
    let pair = Pair::new(13, Faults::none());
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    let stats = pair.client.stats();
    assert_eq!(stats.sessions_expired, 0);
    assert_eq!(stats.sessions_open, 1);
    client.cancel().await.expect("cancel");
}

#[tokio::test(start_paused = true)]
async fn session_handling_a_long_call_is_not_idle() {
    let mut server = RouterConfig::server();
    server.server_idle_timeout = Some(Duration::from_secs(60));
    let pair = Pair::with_configs(20, Faults::none(), server, RouterConfig::client());
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;

    let result = client
        .call_tool(call("sleep", json!({"secs": 300})))
        .await
        .expect("long call");
    assert_eq!(text(&result), "slept 300");
    let stats = pair.server.stats();
    assert_eq!(stats.sessions_expired, 0, "{stats:?}");
    assert_eq!(stats.sessions_accepted, 1);

    // Once answered, the session idles out as usual.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(pair.server.stats().sessions_expired, 1);
    client.cancel().await.expect("cancel");
}
