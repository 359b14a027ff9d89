//! Progress notifications leave the server in order and arrive before the response
//! they belong to.

use std::time::Duration;

use brmcp_adapters::PeerId;
use brmcp_adapters::mem::{Faults, Pair};
use rmcp::RoleClient;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId, ServerNotification};
use rmcp::transport::Transport;
use serde_json::json;

fn message(value: serde_json::Value) -> ClientJsonRpcMessage {
    serde_json::from_value(value).expect("a client message")
}

#[tokio::test(start_paused = true)]
async fn progress_arrives_before_its_response() {
    // A fixed delay keeps the order; it only makes the PMs take time.
    let pair = Pair::new(16, Faults::none().delay(Duration::from_millis(30)));
    let probe = std::sync::Arc::new(crate::common::Probe::default());
    let shared = probe.clone();
    pair.server
        .serve(move |_: &PeerId| crate::common::TestServer::new(shared.clone()));

    // A hand-driven client, to see the exact order in which messages arrive.
    let mut client = pair.client.dial(pair.server_id).expect("dial");
    Transport::<RoleClient>::send(
        &mut client,
        message(json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "0"}}
        })),
    )
    .await
    .expect("send");
    let reply = Transport::<RoleClient>::receive(&mut client).await;
    assert!(
        matches!(reply, Some(JsonRpcMessage::Response(_))),
        "{reply:?}"
    );
    for m in [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "progress", "arguments": {"steps": 10},
                       "_meta": {"progressToken": "p1"}}
        }),
    ] {
        Transport::<RoleClient>::send(&mut client, message(m))
            .await
            .expect("send");
    }

    let mut progress = Vec::new();
    loop {
        match Transport::<RoleClient>::receive(&mut client).await {
            Some(JsonRpcMessage::Notification(n)) => {
                if let ServerNotification::ProgressNotification(p) = n.notification {
                    progress.push(p.params.progress);
                }
            }
            Some(JsonRpcMessage::Response(r)) => {
                assert_eq!(r.id, RequestId::Number(1));
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let expected: Vec<f64> = (0..10).map(f64::from).collect();
    assert_eq!(progress, expected);
}
