//! The serving harness end to end: a real rmcp client calling tools of a
//! `brmcp::server::Harness` over the in-memory PM fabric, the ledger a SQLite file in a
//! temporary directory (WAL, `synchronous = FULL`: every commit is synced to disk).
//!
//! - `harness/paid_call`: a keyed 1-atom call with a fresh key each iteration: the
//!   key check (a read), the debit with its journal entry (a write transaction), the
//!   handler, and the completion with the outcome kept for replay (a write
//!   transaction), each on the blocking pool.
//! - `harness/free_call`: an unkeyed free call: the same path without the ledger.
//!
//! The difference is the price of crash-safe money per call. The session is
//! established once, outside the timed loop; an iteration is one call awaited to
//! completion.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use brmcp::server::{CALL_KEY_META, Harness, NoArgs, Tip, ToolError, ToolSpec};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Fabric, uid};
use criterion::{Criterion, criterion_group, criterion_main};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use tokio::runtime::Runtime;

/// Milliatoms tipped before the run: enough for every paid call criterion makes.
const FUNDS_MATOMS: u64 = 1 << 60;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `tools/call` params for `name` with no arguments and an optional call key.
fn params(name: &'static str, key: Option<String>) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(name);
    if let Some(key) = key {
        let mut meta = RequestMetaObject::default();
        meta.insert(CALL_KEY_META.into(), key.into());
        params.meta = Some(meta);
    }
    params
}

/// The text of a result that must not be an error.
fn ok_text(result: &CallToolResult) -> &str {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    result.content[0].as_text().map_or("", |t| t.text.as_str())
}

fn harness(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().expect("temporary directory");
    let (server, caller) = (uid(1), uid(2));
    let harness = Harness::builder()
        .data_dir(dir.path())
        .allowed_uids([caller])
        .calls_per_minute(u32::MAX)
        .tool(ToolSpec::fixed("paid", "1 atom", 1, |_, _: NoArgs| async {
            Ok::<_, ToolError>("paid")
        }))
        .tool(ToolSpec::free("free", "Free", |_, _: NoArgs| async {
            Ok::<_, ToolError>("free")
        }))
        .build()
        .expect("harness");
    let fabric = Fabric::new(1);
    let (_server_router, client_router, client) = rt.block_on(async {
        let server_router = harness.start(fabric.sender(server)).expect("start");
        fabric.attach(server, &server_router);
        harness
            .record_tip(Tip {
                seq: 1,
                caller,
                matoms: FUNDS_MATOMS,
            })
            .await
            .expect("fund the caller");
        let client_router = fabric.router(caller, RouterConfig::client());
        let transport = client_router.dial(server).expect("dial");
        let client = ().serve(transport).await.expect("initialize");
        (server_router, client_router, client)
    });
    let next_key = AtomicU64::new(0);
    let key = || {
        Some(format!(
            "bench-key-{:016x}",
            next_key.fetch_add(1, Ordering::Relaxed)
        ))
    };

    // Sanity, untimed: both answer; a paid call is charged, and its key replays.
    rt.block_on(async {
        let before = harness.balance_matoms(caller).await.expect("balance");
        let k = key();
        let paid = client
            .call_tool(params("paid", k.clone()))
            .await
            .expect("paid");
        assert_eq!(ok_text(&paid), "paid");
        let replay = client.call_tool(params("paid", k)).await.expect("replay");
        assert_eq!(replay, paid);
        let after = harness.balance_matoms(caller).await.expect("balance");
        assert_eq!(before - after, 1_000);
        let free = client.call_tool(params("free", None)).await.expect("free");
        assert_eq!(ok_text(&free), "free");
    });

    let mut group = c.benchmark_group("harness");
    group.bench_function("paid_call", |b| {
        b.to_async(&rt).iter(|| async {
            client
                .call_tool(black_box(params("paid", key())))
                .await
                .expect("paid")
        });
    });
    group.bench_function("free_call", |b| {
        b.to_async(&rt).iter(|| async {
            client
                .call_tool(black_box(params("free", None)))
                .await
                .expect("free")
        });
    });
    group.finish();

    let stats = harness.stats();
    assert_eq!(
        stats.payment_required + stats.rate_limited + stats.handler_errors,
        0
    );
    rt.block_on(async {
        let _ = client.cancel().await;
    });
    client_router.close();
    harness.close();
}

criterion_group!(benches, harness);
criterion_main!(benches);
