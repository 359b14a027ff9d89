//! Under reordering and duplication every JSON-RPC message is delivered exactly once,
//! intact.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, pattern, serve, text};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Faults, Pair};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn every_message_delivered_exactly_once() {
    for seed in [4, 40, 400, 4000] {
        exactly_once(seed).await;
    }
}

async fn exactly_once(seed: u64) {
    let faults = Faults::none()
        .duplicate_percent(30.0)
        .reorder(Duration::from_millis(200))
        .delay(Duration::from_millis(20));
    // Twenty multi-part messages may be in flight at once; the default allows eight
    // partial messages per peer.
    let mut server = RouterConfig::server();
    server.chunk_len = 256;
    server.limits.max_pending_per_peer = 32;
    let mut client_config = RouterConfig::client();
    client_config.chunk_len = 64;
    client_config.limits.max_pending_per_peer = 32;
    let pair = Pair::with_configs(seed, faults, server, client_config);
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;

    const CALLS: usize = 20;
    let calls = (0..CALLS).map(|i| {
        let client = &client;
        async move {
            if i % 2 == 0 {
                let text_in = format!("message {i} with enough text to need several parts");
                let result = client
                    .call_tool(call("echo", json!({ "text": text_in })))
                    .await
                    .expect("echo");
                assert_eq!(text(&result), text_in);
            } else {
                let len = 1000 + i;
                let result = client
                    .call_tool(call("big", json!({ "len": len })))
                    .await
                    .expect("big");
                assert_eq!(text(&result), pattern(len));
            }
        }
    });
    futures_join_all(calls).await;

    assert!(pair.fabric.stats().duplicated > 0, "no duplicates injected");
    assert_eq!(probe.calls.load(Ordering::SeqCst), CALLS);
    // initialize, notifications/initialized, and the calls: each exactly once.
    assert_eq!(pair.server.stats().messages_delivered, CALLS as u64 + 2);
    // The initialize result and the call results.
    assert_eq!(pair.client.stats().messages_delivered, CALLS as u64 + 1);
    assert_eq!(pair.server.stats().dropped_reassembly, 0);
    assert!(pair.server.stats().dropped_duplicate + pair.client.stats().dropped_duplicate > 0);
    client.cancel().await.expect("cancel");
}

/// Runs the futures concurrently on this task.
async fn futures_join_all<F: Future<Output = ()>>(futures: impl Iterator<Item = F>) {
    let mut set = Vec::new();
    for f in futures {
        set.push(Box::pin(f));
    }
    let mut pending: Vec<_> = set.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut all_done = true;
        for slot in &mut pending {
            if let Some(f) = slot {
                if f.as_mut().poll(cx).is_ready() {
                    *slot = None;
                } else {
                    all_done = false;
                }
            }
        }
        if all_done {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}
