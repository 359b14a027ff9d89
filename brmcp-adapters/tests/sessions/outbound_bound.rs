//! A session whose answers cannot leave (a stalled host) stops buffering at its byte
//! bound: the session is closed instead of growing without limit.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve};
use brmcp_adapters::mem::{Fabric, MemError, uid};
use brmcp_adapters::{PeerId, PmSender, Router, RouterConfig};
use serde_json::json;

/// Passes PMs to the fabric until stalled; then every send waits forever.
struct StallingSender {
    fabric: Fabric,
    from: PeerId,
    stall: Arc<AtomicBool>,
}

impl PmSender for StallingSender {
    type Error = MemError;
    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), MemError> {
        if self.stall.load(SeqCst) {
            std::future::pending::<()>().await;
        }
        self.fabric.send(self.from, to, body)
    }
}

#[tokio::test(start_paused = true)]
async fn stalled_answers_close_the_session_at_the_bound() {
    let fabric = Fabric::new(1);
    let stall = Arc::new(AtomicBool::new(false));
    let mut config = RouterConfig::server().with_clock(fabric.clock());
    config.max_outbound_bytes = 20_000;
    let server = Router::new(
        StallingSender {
            fabric: fabric.clone(),
            from: uid(1),
            stall: stall.clone(),
        },
        config,
    );
    fabric.attach(uid(1), &server);
    let probe = serve(&server);
    let mut client_config = RouterConfig::client();
    client_config.request_timeout = Some(Duration::from_secs(30));
    let client_router = fabric.router(uid(2), client_config);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;

    stall.store(true, SeqCst);
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.call_tool(call("big", json!({"len": 8000}))).await })
        })
        .collect();
    for c in calls {
        let result = c.await.expect("join");
        assert!(
            result.is_err(),
            "no answer can arrive through a stalled host"
        );
    }
    assert_eq!(probe.calls.load(SeqCst), 8, "every call ran");
    let stats = server.stats();
    assert_eq!(stats.sessions_closed, 1, "{stats:?}");
    assert_eq!(stats.sessions_open, 0, "{stats:?}");
}
