//! A message's deadline is fixed when it is sent, not when the host gets to it: if the
//! host stalls, a request queued behind another does not leave after its caller has
//! timed out (it is not put on the wire at all), and the one caught in the stall is
//! refused by the server on arrival. Nothing runs after its caller gave up.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve};
use brmcp_adapters::mem::{Fabric, MemError, uid};
use brmcp_adapters::{PeerId, PmSender, REQUEST_TIMEOUT, Router, RouterConfig};
use rmcp::ServiceError;
use serde_json::json;
use tokio::sync::watch;

/// Client host: while the gate is shut, every PM waits for it; counts the tools/call
/// PMs that reach the network.
struct Stalling {
    fabric: Fabric,
    from: PeerId,
    open: watch::Receiver<bool>,
    calls_sent: Arc<AtomicUsize>,
}

impl PmSender for Stalling {
    type Error = MemError;
    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), MemError> {
        let mut open = self.open.clone();
        let _ = open.wait_for(|o| *o).await;
        let part = brmcp_adapters::wire::parse(&body).unwrap();
        let mut out = vec![0; part.decoded_len_max()];
        let n = part.decode_body(&mut out).unwrap();
        if String::from_utf8_lossy(&out[..n]).contains("tools/call") {
            self.calls_sent.fetch_add(1, SeqCst);
        }
        self.fabric.send(self.from, to, body)
    }
}

#[tokio::test(start_paused = true)]
async fn a_request_never_leaves_after_its_caller_gave_up() {
    let fabric = Fabric::new(3);
    let server = fabric.router(uid(1), RouterConfig::server());
    let probe = serve(&server);
    let (gate, open) = watch::channel(true);
    let calls_sent = Arc::new(AtomicUsize::new(0));
    let mut config = RouterConfig::client();
    config.request_timeout = Some(Duration::from_secs(30));
    let client_router = Router::new(
        Stalling {
            fabric: fabric.clone(),
            from: uid(2),
            open,
            calls_sent: calls_sent.clone(),
        },
        config.with_clock(fabric.clock()),
    );
    fabric.attach(uid(2), &client_router);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;

    // The host stalls; two calls queue behind each other.
    gate.send_replace(false);
    let (p1, p2) = (client.peer().clone(), client.peer().clone());
    let first = tokio::spawn(async move { p1.call_tool(call("echo", json!({"text": "1"}))).await });
    let second =
        tokio::spawn(async move { p2.call_tool(call("echo", json!({"text": "2"}))).await });
    tokio::time::sleep(Duration::from_secs(60)).await;
    for outcome in [first.await.unwrap(), second.await.unwrap()] {
        match outcome {
            Err(ServiceError::McpError(e)) => assert_eq!(e.code, REQUEST_TIMEOUT),
            other => panic!("expected the timeout, got {other:?}"),
        }
    }

    // The host comes back long after both callers gave up.
    gate.send_replace(true);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        calls_sent.load(SeqCst),
        1,
        "only the call caught in the stall left"
    );
    assert!(server.stats().dropped_expired >= 1, "{:?}", server.stats());
    assert_eq!(
        probe.calls.load(SeqCst),
        0,
        "nothing ran after its caller gave up"
    );
}
