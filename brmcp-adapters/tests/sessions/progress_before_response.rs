//! A session's PMs leave in the order its messages were sent, whatever order the send
//! futures complete in: rmcp polls them concurrently, so progress notifications must
//! not be overtaken by the response they precede.

use std::time::Duration;

use brmcp_adapters::mem::{Faults, Pair};
use rmcp::model::{
    ClientJsonRpcMessage, JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerNotification,
};
use rmcp::transport::Transport;
use rmcp::{RoleClient, RoleServer};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn progress_arrives_before_its_response() {
    // A fixed delay keeps the order; it only makes the PMs take time.
    let pair = Pair::new(16, Faults::none().delay(Duration::from_millis(30)));

    // Hand-driven on both sides, to control when send futures are awaited and to see
    // the exact order of arrival.
    let mut client = pair.client.dial(pair.server_id).expect("dial");
    let initialize: ClientJsonRpcMessage = serde_json::from_value(json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}
    }))
    .unwrap();
    Transport::<RoleClient>::send(&mut client, initialize)
        .await
        .expect("send");
    let mut server = pair.server.accept().await.expect("session");
    assert!(matches!(
        Transport::<RoleServer>::receive(&mut server).await,
        Some(JsonRpcMessage::Request(_))
    ));

    // Ten progress notifications, then the answer; their send futures are awaited
    // last first, as a concurrent poll may do.
    let mut sends = Vec::new();
    for step in 0..10 {
        let progress: ServerJsonRpcMessage = serde_json::from_value(json!({
            "jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": "p1", "progress": step, "total": 10}
        }))
        .unwrap();
        sends.push(Transport::<RoleServer>::send(&mut server, progress));
    }
    let answer: ServerJsonRpcMessage = serde_json::from_value(json!({
        "jsonrpc": "2.0", "id": 1,
        "result": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "serverInfo": {"name": "hand", "version": "0"}}
    }))
    .unwrap();
    sends.push(Transport::<RoleServer>::send(&mut server, answer));
    for send in sends.into_iter().rev() {
        send.await.expect("sent");
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
    assert_eq!(
        progress, expected,
        "every notification, in order, before the answer"
    );
}
