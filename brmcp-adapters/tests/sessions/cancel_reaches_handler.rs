//! `notifications/cancelled` from the client reaches the server handler's cancellation
//! token, under both lifecycles.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve};
use brmcp_adapters::mem::{Faults, Pair};
use rmcp::model::{CallToolRequest, ClientRequest};
use rmcp::service::PeerRequestOptions;
use serde_json::json;

async fn cancel(lifecycle: Lifecycle) {
    let pair = Pair::new(17, Faults::none().delay(Duration::from_millis(5)));
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, lifecycle).await;

    let handle = client
        .send_cancellable_request(
            ClientRequest::CallToolRequest(CallToolRequest::new(call("wait", json!({})))),
            PeerRequestOptions::no_options(),
        )
        .await
        .expect("send");
    probe.started.notified().await;
    handle.cancel(Some("enough".into())).await.expect("cancel");
    tokio::time::timeout(Duration::from_secs(5), probe.cancel_seen.notified())
        .await
        .expect("the handler never saw the cancellation");
    assert_eq!(probe.cancelled.load(Ordering::SeqCst), 1);
    client.cancel().await.expect("cancel");
}

#[tokio::test(start_paused = true)]
async fn cancellation_reaches_handler_legacy() {
    cancel(Lifecycle::Legacy).await;
}

#[tokio::test(start_paused = true)]
async fn cancellation_reaches_handler_stateless() {
    cancel(Lifecycle::Stateless).await;
}
