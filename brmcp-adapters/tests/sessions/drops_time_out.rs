//! Lost PMs make a call fail with the timeout error; nothing hangs.

use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Faults, Pair};
use brmcp_adapters::{REQUEST_TIMEOUT, RouterConfig};
use rmcp::ServiceError;
use serde_json::json;

fn client_config() -> RouterConfig {
    let mut config = RouterConfig::client();
    config.request_timeout = Some(Duration::from_secs(30));
    config
}

#[tokio::test(start_paused = true)]
async fn lost_request_fails_with_timeout() {
    let pair = Pair::with_configs(5, Faults::none(), RouterConfig::server(), client_config());
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;

    pair.fabric.set_faults(Faults::none().drop_percent(100.0));
    let started = tokio::time::Instant::now();
    let error = client
        .call_tool(call("echo", json!({"text": "lost"})))
        .await
        .expect_err("every PM is dropped");
    let ServiceError::McpError(error) = error else {
        panic!("expected the timeout error, got {error:?}");
    };
    assert_eq!(error.code, REQUEST_TIMEOUT);
    assert!(started.elapsed() >= Duration::from_secs(30));

    // The network heals: the same session works again.
    pair.fabric.set_faults(Faults::none());
    let result = client
        .call_tool(call("echo", json!({"text": "back"})))
        .await
        .expect("call after the drops");
    assert_eq!(text(&result), "back");
    client.cancel().await.expect("cancel");
}

#[tokio::test(start_paused = true)]
async fn random_drops_never_hang() {
    let faults = Faults::none().drop_percent(30.0);
    let pair = Pair::with_configs(6, faults, RouterConfig::server(), client_config());
    serve(&pair.server);
    let mut ok = 0;
    let mut timed_out = 0;
    for _ in 0..10 {
        let transport = pair.client.dial(pair.server_id).expect("dial");
        let outcome = tokio::time::timeout(Duration::from_secs(300), async {
            let Ok(client) = rmcp::ServiceExt::serve((), transport).await else {
                return false;
            };
            let result = client.call_tool(call("echo", json!({"text": "x"}))).await;
            let _ = client.cancel().await;
            match result {
                Ok(r) => text(&r) == "x",
                Err(ServiceError::McpError(e)) if e.code == REQUEST_TIMEOUT => false,
                Err(e) => panic!("unexpected error {e:?}"),
            }
        })
        .await
        .expect("a session hung");
        if outcome {
            ok += 1;
        } else {
            timed_out += 1;
        }
    }
    assert_eq!(ok + timed_out, 10);
    assert!(pair.fabric.stats().dropped > 0);
}

#[tokio::test(start_paused = true)]
async fn silent_peer_fails_initialize() {
    // The peer is on the network but accepts no sessions: it never answers.
    let pair = Pair::with_configs(7, Faults::none(), RouterConfig::client(), client_config());
    let transport = pair.client.dial(pair.server_id).expect("dial");
    let started = tokio::time::Instant::now();
    let result = rmcp::ServiceExt::serve((), transport).await;
    assert!(result.is_err(), "initialize must fail");
    assert!(started.elapsed() >= Duration::from_secs(30));
    assert_eq!(pair.server.stats().dropped_unknown_session, 1);
}
