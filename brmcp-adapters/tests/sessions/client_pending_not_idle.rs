//! A dialed session with an idle timeout is not idle while its own request waits, and
//! a request it cancelled no longer keeps it busy (the server never answers one).

use crate::common::{Lifecycle, call, connect, serve};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Faults, Pair};
use rmcp::model::{CallToolRequest, ClientRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::json;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn pending_call_keeps_client_session_open() {
    let mut cc = RouterConfig::client();
    cc.client_idle_timeout = Some(Duration::from_secs(60));
    let pair = Pair::with_configs(1, Faults::none(), RouterConfig::server(), cc);
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    let r = client.call_tool(call("sleep", json!({"secs": 300}))).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(pair.client.stats().sessions_expired, 0);
    // Once answered, the session idles out as configured.
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(pair.client.stats().sessions_expired, 1);
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_call_does_not_keep_the_session_busy() {
    let mut cc = RouterConfig::client();
    cc.client_idle_timeout = Some(Duration::from_secs(60));
    let pair = Pair::with_configs(2, Faults::none(), RouterConfig::server(), cc);
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(call("sleep", json!({"secs": 3000}))));
    let handle = client
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
        .expect("sent");
    tokio::time::sleep(Duration::from_secs(1)).await;
    handle.cancel(None).await.expect("cancelled");
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(pair.client.stats().sessions_expired, 1);
}
