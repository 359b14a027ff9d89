//! A peer the authorizer refuses never reaches accept and allocates no state.

use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Fabric, uid};
use brmcp_adapters::{PeerId, RouterConfig};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn disallowed_peer_allocates_nothing() {
    let fabric = Fabric::new(8);
    let allowed = uid(2);
    let server = fabric.router(
        uid(1),
        RouterConfig::server().with_authorizer(move |peer: &PeerId| *peer == allowed),
    );
    let probe = serve(&server);

    // The intruder sends multi-part messages, which would take reassembly storage.
    let mut intruder_config = RouterConfig::client();
    intruder_config.chunk_len = 32;
    intruder_config.request_timeout = Some(Duration::from_secs(30));
    let intruder = fabric.router(uid(3), intruder_config);
    let transport = intruder.dial(uid(1)).expect("dial");
    assert!(rmcp::ServiceExt::serve((), transport).await.is_err());

    let stats = server.stats();
    assert!(stats.dropped_disallowed >= 2, "{stats:?}");
    assert_eq!(stats.parts_received, 0);
    assert_eq!(stats.sessions_accepted, 0);
    assert_eq!(stats.sessions_open, 0);
    assert_eq!(stats.bytes_buffered, 0);
    assert_eq!(stats.messages_buffered, 0);
    assert_eq!(stats.messages_delivered, 0);
    assert_eq!(stats.pms_sent, 0, "nothing is answered");
    assert_eq!(probe.calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(server.refused(), [uid(3)], "the intruder is listed once");

    // The allowed peer is served as usual.
    let friend = fabric.router(allowed, RouterConfig::client());
    let client = connect(&friend, uid(1), Lifecycle::Legacy).await;
    let result = client
        .call_tool(call("echo", json!({"text": "friend"})))
        .await
        .expect("call");
    assert_eq!(text(&result), "friend");
    assert_eq!(server.stats().sessions_accepted, 1);
    assert_eq!(server.refused(), [uid(3)], "the allowed peer is not listed");
    client.cancel().await.expect("cancel");
}

/// Refused peers remembered for an operator's page: the router keeps the newest 64.
const REFUSED_KEPT: usize = 64;

#[tokio::test(start_paused = true)]
async fn a_flood_of_refused_peers_keeps_the_newest_few() {
    let fabric = Fabric::new(8);
    let server = fabric.router(
        uid(1),
        RouterConfig::server().with_authorizer(|_: &PeerId| false),
    );
    let _probe = serve(&server);
    let kept = u32::try_from(REFUSED_KEPT).expect("small");
    let intruders: Vec<u32> = (10..10 + 2 * kept).collect();
    for &n in &intruders {
        let mut config = RouterConfig::client();
        config.request_timeout = Some(Duration::from_secs(1));
        let intruder = fabric.router(uid(n), config);
        let transport = intruder.dial(uid(1)).expect("dial");
        assert!(rmcp::ServiceExt::serve((), transport).await.is_err());
        intruder.close();
    }
    let refused = server.refused();
    let newest: Vec<PeerId> = intruders[intruders.len() - REFUSED_KEPT..]
        .iter()
        .map(|&n| uid(n))
        .collect();
    assert_eq!(refused, newest, "bounded, oldest dropped, in order");
}
