//! The serving harness end to end: a real rmcp client calling tools of a
//! `brmcp::server::Harness` over the in-memory PM fabric, the ledger a SQLite file in a
//! temporary directory (WAL; every commit a caller acts on is synced to disk first, by
//! group commit).
//!
//! - `harness/paid_call`: a keyed 1-atom call with a fresh key each iteration: the
//!   key check (a read), the debit with its journal entry (a write transaction), the
//!   handler, and the completion with the outcome kept for replay (a write
//!   transaction), each on the harness's task when nothing would wait, the
//!   completion's sync on the blocking pool.
//! - `harness/paid_call_unkeyed`: a 1-atom call without a key: the debit (a write
//!   transaction, not synced) and the completion (a write transaction, synced before
//!   the answer: one fsync a call).
//! - `harness/free_call`: an unkeyed free call: the same path without the ledger.
//! - `harness/ten_callers_keyed` and `harness/ten_callers_unkeyed`: ten callers, each
//!   on its own session, making one paid call each at once: their completions share
//!   syncs (group commit). Throughput is in calls.
//!
//! The difference is the price of crash-safe money per call. The sessions are
//! established once, outside the timed loop; an iteration is its calls awaited to
//! completion. After criterion, `goal` lines time a fixed number of calls on each
//! paid path and print calls per second beside the goals, which are stated against
//! the Go implementation's serving harness measured on the same machine (paid calls
//! with a fresh key each: 187/s; without a key: 4,233/s, never synced). A line before
//! them gives this run's disk: the median time of a 4 KiB overwrite and its data sync,
//! which bounds one caller's unkeyed calls (one sync each).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use brmcp::server::{CALL_KEY_META, Harness, NoArgs, Tip, ToolError, ToolSpec};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Fabric, uid};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures_util::future::join_all;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use tokio::runtime::Runtime;

/// Milliatoms tipped before the run: enough for every paid call criterion makes.
const FUNDS_MATOMS: u64 = 1 << 60;

/// Callers calling at once in the concurrent benches.
const CALLERS: u64 = 10;

/// Calls each `goal` line times.
const GOAL_CALLS: u64 = 2_000;

/// The Go serving harness's paid calls per second with a fresh key each.
const GO_KEYED_PER_SEC: f64 = 187.0;

/// The Go serving harness's paid calls per second without a key (never synced).
const GO_UNKEYED_PER_SEC: f64 = 4_233.0;

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
    let others: Vec<_> = (0..CALLERS).map(|n| uid(100 + n as u32)).collect();
    let harness = Harness::builder()
        .data_dir(dir.path())
        .allowed_uids(others.iter().copied().chain([caller]))
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
    let crowd: Vec<_> = rt.block_on(async {
        let mut crowd = Vec::new();
        for (n, &other) in others.iter().enumerate() {
            harness
                .record_tip(Tip {
                    seq: 2 + n as u64,
                    caller: other,
                    matoms: FUNDS_MATOMS,
                })
                .await
                .expect("fund a caller");
            let router = fabric.router(other, RouterConfig::client());
            let transport = router.dial(server).expect("dial");
            let client = ().serve(transport).await.expect("initialize");
            crowd.push((router, client));
        }
        crowd
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
    group.bench_function("paid_call_unkeyed", |b| {
        b.to_async(&rt).iter(|| async {
            client
                .call_tool(black_box(params("paid", None)))
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
    group.throughput(Throughput::Elements(CALLERS));
    for (name, keyed) in [("ten_callers_keyed", true), ("ten_callers_unkeyed", false)] {
        group.bench_function(name, |b| {
            b.to_async(&rt).iter(|| {
                join_all(
                    crowd
                        .iter()
                        .map(|(_, c)| paid(c, keyed.then(key).flatten())),
                )
            });
        });
    }
    group.finish();

    // The goals, each timed over a fixed number of calls.
    rt.block_on(async {
        let one = |keyed: bool| {
            let client = &client;
            let key = &key;
            async move {
                let at = std::time::Instant::now();
                for _ in 0..GOAL_CALLS {
                    paid(client, keyed.then(key).flatten()).await;
                }
                GOAL_CALLS as f64 / at.elapsed().as_secs_f64()
            }
        };
        let ten = |keyed: bool| {
            let crowd = &crowd;
            let key = &key;
            async move {
                let at = std::time::Instant::now();
                for _ in 0..GOAL_CALLS / CALLERS {
                    join_all(crowd.iter().map(|(_, c)| paid(c, keyed.then(key).flatten()))).await;
                }
                GOAL_CALLS as f64 / at.elapsed().as_secs_f64()
            }
        };
        let rows = [
            ("keyed, 1 caller", one(true).await, 3.0 * GO_KEYED_PER_SEC, "3x Go's keyed"),
            ("keyed, 10 callers", ten(true).await, 3.0 * GO_KEYED_PER_SEC, "3x Go's keyed"),
            ("unkeyed, 1 caller", one(false).await, GO_UNKEYED_PER_SEC / 2.0, "half Go's unkeyed"),
            ("unkeyed, 10 callers", ten(false).await, GO_UNKEYED_PER_SEC, "Go's unkeyed"),
        ];
        // The unkeyed paths wait on one sync a call (or a shared one): what this
        // run's disk gave, so figures from runs on different days compare.
        let sync = data_sync_micros(dir.path());
        println!(
            "this run's disk: a 4 KiB overwrite and its data sync, median {sync:.0} us ({SYNC_SAMPLES} samples)"
        );
        for (what, per_sec, goal, against) in rows {
            let met = if per_sec >= goal { "met" } else { "NOT met" };
            println!(
                "goal harness paid calls, {what}: {per_sec:.0}/s (goal >= {goal:.0}/s, {against}): {met}"
            );
        }
    });

    let stats = harness.stats();
    assert_eq!(
        stats.payment_required + stats.rate_limited + stats.handler_errors,
        0
    );
    rt.block_on(async {
        let _ = client.cancel().await;
    });
    client_router.close();
    for (router, client) in crowd {
        rt.block_on(async {
            let _ = client.cancel().await;
        });
        router.close();
    }
    harness.close();
}

/// Data syncs timed for the disk line.
const SYNC_SAMPLES: usize = 200;

/// The median time of a 4 KiB overwrite of a preallocated file in `dir` and its
/// `sync_data`, in microseconds: the write a ledger commit's sync waits for.
fn data_sync_micros(dir: &std::path::Path) -> f64 {
    use std::io::{Seek, SeekFrom, Write};
    let path = dir.join("sync-probe");
    let mut file = std::fs::File::create(&path).expect("sync probe");
    let page = [0x5a_u8; 4096];
    for _ in 0..16 {
        file.write_all(&page).expect("preallocate");
    }
    file.sync_all().expect("sync");
    let mut times: Vec<f64> = (0..SYNC_SAMPLES)
        .map(|n| {
            let at = std::time::Instant::now();
            file.seek(SeekFrom::Start((n % 16) as u64 * 4096))
                .expect("seek");
            file.write_all(&page).expect("write");
            file.sync_data().expect("sync");
            at.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    drop(file);
    let _ = std::fs::remove_file(&path);
    times.sort_by(f64::total_cmp);
    times[SYNC_SAMPLES / 2]
}

/// One paid call by `client`, keyed or not, awaited to its answer.
async fn paid(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, key: Option<String>) {
    let result = client
        .call_tool(black_box(params("paid", key)))
        .await
        .expect("paid");
    assert_eq!(ok_text(&result), "paid");
}

criterion_group!(benches, harness);
criterion_main!(benches);
