//! One router serves 1,000 concurrent sessions from 100 peers, each completing a call.

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Fabric, uid};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_sessions_from_hundred_peers() {
    const PEERS: u32 = 100;
    const PER_PEER: u32 = 10;
    let fabric = Fabric::new(19);
    let mut config = RouterConfig::server();
    config.max_sessions_per_peer = PER_PEER as usize;
    let server = fabric.router(uid(0), config);
    let probe = serve(&server);

    let mut tasks = tokio::task::JoinSet::new();
    for p in 1..=PEERS {
        let router = fabric.router(uid(p), RouterConfig::client());
        for s in 0..PER_PEER {
            let router = router.clone();
            tasks.spawn(async move {
                let lifecycle = if s % 2 == 0 {
                    Lifecycle::Legacy
                } else {
                    Lifecycle::Stateless
                };
                let client = connect(&router, uid(0), lifecycle).await;
                let want = format!("peer {p} session {s}");
                let result = client
                    .call_tool(call("echo", json!({ "text": want })))
                    .await
                    .expect("call");
                assert_eq!(text(&result), want);
                client
            });
        }
    }
    let mut clients = Vec::new();
    while let Some(done) = tasks.join_next().await {
        clients.push(done.expect("session task"));
    }
    assert_eq!(clients.len(), 1000);
    let stats = server.stats();
    assert_eq!(stats.sessions_accepted, 1000, "{stats:?}");
    assert_eq!(stats.sessions_open, 1000);
    assert_eq!(stats.dropped_session_cap, 0);
    assert_eq!(probe.calls.load(std::sync::atomic::Ordering::SeqCst), 1000);
}
