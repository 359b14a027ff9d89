//! Results larger than one part cross as many PMs and arrive intact.

use crate::common::{Lifecycle, call, connect, pattern, serve, text};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Faults, Pair};
use serde_json::json;

#[tokio::test]
async fn eight_kib_at_512_byte_chunks_crosses_as_many_pms() {
    let mut server = RouterConfig::server();
    server.chunk_len = 512;
    let pair = Pair::with_configs(2, Faults::none(), server, RouterConfig::client());
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;

    let before = pair.server.stats().pms_sent;
    let result = client
        .call_tool(call("big", json!({"len": 8192})))
        .await
        .expect("tools/call");
    let pms = pair.server.stats().pms_sent - before;
    assert_eq!(text(&result), pattern(8192));
    assert!(pms >= 10, "8 KiB at 512-byte chunks took only {pms} PMs");
    assert_eq!(pair.client.stats().dropped_reassembly, 0);
    client.cancel().await.expect("cancel");
}

#[tokio::test]
async fn five_mib_at_default_chunking() {
    let pair = Pair::new(3, Faults::none());
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;

    let len = 5 << 20;
    let before = pair.server.stats().pms_sent;
    let result = client
        .call_tool(call("big", json!({"len": len})))
        .await
        .expect("tools/call");
    let pms = pair.server.stats().pms_sent - before;
    assert!(text(&result) == pattern(len), "5 MiB result corrupted");
    // 5 MiB of text in 200 KiB chunks.
    assert!(pms >= 26, "5 MiB took only {pms} PMs");
    assert_eq!(pair.client.stats().bytes_buffered, 0);
    client.cancel().await.expect("cancel");
}
