//! Once every router handle is gone no PM can arrive: the router closes its sessions.

use crate::common::{Lifecycle, Probe, TestServer, connect};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Fabric, uid};
use rmcp::ServiceExt;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn sessions_end_with_the_last_router_handle() {
    let fabric = Fabric::new(1);
    let mut sc = RouterConfig::server();
    sc.server_idle_timeout = None;
    let server = fabric.router(uid(1), sc);
    let client_router = fabric.router(uid(2), RouterConfig::client());
    let accept = tokio::spawn({
        let server = server.clone();
        async move {
            let t = server.accept().await.unwrap();
            TestServer::new(Arc::new(Probe::default()))
                .serve(t)
                .await
                .unwrap()
        }
    });
    let _client = connect(&client_router, uid(1), Lifecycle::Legacy).await;
    let running = accept.await.unwrap();
    drop(server);
    let r = tokio::time::timeout(Duration::from_secs(24 * 3600), running.waiting()).await;
    assert!(
        r.is_ok(),
        "the accepted session outlived every router handle"
    );
}
