//! Parts past their deadline are dropped; a request that reaches an offline peer only
//! after its deadline never runs.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve};
use brmcp_adapters::mem::{Fabric, Faults, Pair, uid};
use brmcp_adapters::wire::{Chunks, MessageId, SessionId, encode_part};
use brmcp_adapters::{Clock, RouterConfig};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn part_past_its_deadline_is_dropped() {
    let fabric = Fabric::new(10);
    let server = fabric.router(uid(1), RouterConfig::server());
    serve(&server);
    let _sender = fabric.router(uid(2), RouterConfig::client());

    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "late", "version": "0"}}
    })
    .to_string();
    let past = fabric.clock().now().0 - 5;
    let sid = SessionId::from_entropy([1; 8]);
    let mid = MessageId::from_entropy([2; 8]);
    for (header, chunk) in Chunks::new(sid, mid, past, initialize.as_bytes(), 1 << 10).unwrap() {
        let mut pm = vec![0u8; header.encoded_len(chunk.len())];
        let n = encode_part(&header, chunk, &mut pm).unwrap();
        pm.truncate(n);
        fabric
            .send(uid(2), &uid(1), String::from_utf8(pm).unwrap())
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(10)).await;

    let stats = server.stats();
    assert_eq!(stats.dropped_expired, 1, "{stats:?}");
    assert_eq!(stats.sessions_accepted, 0);
    assert_eq!(stats.pms_sent, 0);
}

#[tokio::test(start_paused = true)]
async fn request_delivered_after_its_deadline_never_runs() {
    let pair = Pair::new(11, Faults::none());
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;

    pair.fabric.set_online(&pair.server_id, false);
    let peer = client.peer().clone();
    let pending =
        tokio::spawn(async move { peer.call_tool(call("echo", json!({"text": "late"}))).await });
    // Past the ten-minute TTL stamped on the request.
    tokio::time::sleep(Duration::from_secs(11 * 60)).await;
    pair.fabric.set_online(&pair.server_id, true);
    tokio::time::sleep(Duration::from_secs(1)).await;

    assert!(pending.await.unwrap().is_err(), "the call cannot succeed");
    assert!(
        pair.server.stats().dropped_expired >= 1,
        "{:?}",
        pair.server.stats()
    );
    assert_eq!(probe.calls.load(Ordering::SeqCst), 0);
}
