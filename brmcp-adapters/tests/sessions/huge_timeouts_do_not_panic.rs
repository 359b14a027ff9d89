//! Timeouts too large to add to the clock mean "never", not a panic in the router task.

use std::time::Duration;

use brmcp_adapters::mem::{Fabric, uid};
use brmcp_adapters::{AdapterError, RouterConfig};

#[tokio::test]
async fn huge_partial_and_idle_timeouts_are_never() {
    let fabric = Fabric::new(1);
    let mut config = RouterConfig::server();
    config.limits.partial_timeout_secs = u64::MAX;
    config.server_idle_timeout = Some(Duration::MAX);
    let server = fabric.router(uid(1), config);
    server
        .handle_pm(uid(3), "--mcp[v=1,sid=aa,mid=bb,seq=1/2,exp=0]--QUJD")
        .await
        .expect("router running");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = server.handle_pm(uid(3), "hello").await;
    assert!(
        !matches!(after, Err(AdapterError::RouterClosed)),
        "the router task died: {after:?}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(server.stats().messages_buffered, 1);
}
