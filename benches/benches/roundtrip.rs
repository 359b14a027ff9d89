//! End-to-end `tools/call` latency and throughput: a real rmcp client and server over
//! the in-memory PM fabric (`brmcp_adapters::mem`), beside the same client and server
//! over `tokio::io::duplex` (rmcp's async-rw transport) in the same run.
//!
//! - `roundtrip/br_small`: one `echo` call with a short string, client -> `BrTransport` ->
//!   fabric (no faults) -> router -> server and back.
//! - `roundtrip/duplex_small`: the same call over a duplex pipe. Target:
//!   `br_small` at most 2x `duplex_small`.
//! - `roundtrip/br_1MiB`: a `blob` call whose result is 1 MiB of text, at default
//!   chunking.
//!
//! Each session is established once, outside the timed loop; an iteration is one call
//! awaited to completion. The multi-threaded runtime's workers run the rmcp services,
//! the router and the fabric; the calls themselves are awaited on the bench thread.

use std::hint::black_box;

use brmcp_adapters::PeerId;
use brmcp_adapters::mem::{Faults, Pair};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use tokio::runtime::Runtime;

mod common;

use common::{BenchServer, Client};

/// Size of the `br_1MiB` result.
const BLOB_LEN: usize = 1 << 20;

/// `tools/call` params for `name` with JSON object arguments.
fn call(name: &'static str, args: serde_json::Value) -> CallToolRequestParams {
    let serde_json::Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(name).with_arguments(args)
}

/// Bytes of text content in a tool result.
fn text_len(result: &CallToolResult) -> usize {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.len()))
        .sum()
}

/// An initialized client session over the fabric; the pair must outlive it.
async fn br_session() -> (Pair, Client) {
    let pair = Pair::new(1, Faults::none());
    pair.server.serve(|_peer: &PeerId| BenchServer::new());
    let transport = pair.client.dial(pair.server_id).expect("dial");
    let client = ().serve(transport).await.expect("initialize over the fabric");
    (pair, client)
}

/// An initialized client session over a duplex pipe, the server on its own task.
async fn duplex_session() -> Client {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = BenchServer::new().serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(client_io).await.expect("initialize over duplex")
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn roundtrip(c: &mut Criterion) {
    let rt = runtime();
    let (pair, br) = rt.block_on(br_session());
    let duplex = rt.block_on(duplex_session());

    let echo = call(
        "echo",
        serde_json::json!({"text": "hello over Bison Relay"}),
    );
    let blob = call("blob", serde_json::json!({"len": BLOB_LEN}));

    // Sanity, untimed: both paths answer, and the blob crosses intact in several PMs.
    rt.block_on(async {
        for client in [&br, &duplex] {
            let result = client.call_tool(echo.clone()).await.expect("echo");
            assert_eq!(text_len(&result), "hello over Bison Relay".len());
        }
        let before = pair.server.stats().pms_sent;
        let result = br.call_tool(blob.clone()).await.expect("blob");
        assert_eq!(text_len(&result), BLOB_LEN);
        assert!(pair.server.stats().pms_sent - before > 1, "1 MiB in one PM");
    });

    let mut group = c.benchmark_group("roundtrip");
    group.bench_function("br_small", |b| {
        b.to_async(&rt)
            .iter(|| async { br.call_tool(black_box(echo.clone())).await.expect("echo") });
    });
    group.bench_function("duplex_small", |b| {
        b.to_async(&rt).iter(|| async {
            duplex
                .call_tool(black_box(echo.clone()))
                .await
                .expect("echo")
        });
    });
    group.throughput(Throughput::Bytes(BLOB_LEN as u64));
    group.bench_function("br_1MiB", |b| {
        b.to_async(&rt)
            .iter(|| async { br.call_tool(black_box(blob.clone())).await.expect("blob") });
    });
    group.finish();

    let stats = pair.client.stats();
    assert_eq!(stats.dropped_reassembly, 0, "{stats:?}");
    rt.block_on(async {
        let _ = br.cancel().await;
        let _ = duplex.cancel().await;
    });
    pair.client.close();
    pair.server.close();
}

criterion_group!(benches, roundtrip);
criterion_main!(benches);
