//! An honest caller's latency while another allowed peer floods the same router: not a
//! criterion timing, a run that prints percentiles and memory growth.
//!
//! One server router and one client over the in-memory fabric; the client calls `echo`
//! in a loop. First alone (the baseline), then while a hostile peer hands the server
//! [`FLOOD_PMS`] PMs, each the first part of a fresh 64-part message with a 200 KiB
//! chunk (273 KB of PM text), as fast as the router takes them.
//!
//! Targets: honest p99 during the flood at most 20 ms; resident memory growth during
//! the flood at most 128 MiB.
//!
//! Run: `cargo bench -p brmcp-benches --bench flood`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use base64::Engine as _;
use brmcp_adapters::mem::{Faults, Pair, uid};
use brmcp_adapters::{PeerId, RouterConfig};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;

mod common;

use common::{BenchServer, Client};

/// Hostile PMs sent.
const FLOOD_PMS: u64 = 20_000;

/// Raw bytes per hostile part: the default chunk length.
const FLOOD_CHUNK: usize = 200 * 1024;

/// Honest calls in the baseline.
const BASELINE_CALLS: usize = 500;

/// Resident set size in bytes (`VmRSS` of `/proc/self/status`), if readable.
fn rss() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn echo() -> CallToolRequestParams {
    let serde_json::Value::Object(args) = serde_json::json!({"text": "hello"}) else {
        unreachable!("an object")
    };
    CallToolRequestParams::new("echo").with_arguments(args)
}

async fn call(client: &Client) -> Duration {
    let start = Instant::now();
    client.call_tool(echo()).await.expect("echo answered");
    start.elapsed()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name}: p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms over {} calls",
        percentile(&samples, 0.50).as_secs_f64() * 1e3,
        percentile(&samples, 0.99).as_secs_f64() * 1e3,
        samples.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
        samples.len()
    );
}

async fn measure() {
    let pair = Pair::with_configs(
        3,
        Faults::none(),
        RouterConfig::server(),
        RouterConfig::client(),
    );
    pair.server.serve(|_peer: &PeerId| BenchServer::new());
    let transport = pair.client.dial(pair.server_id).expect("dial");
    let client = ().serve(transport).await.expect("initialize");

    let mut baseline = Vec::with_capacity(BASELINE_CALLS);
    for _ in 0..BASELINE_CALLS {
        baseline.push(call(&client).await);
    }
    report("honest_echo/alone", baseline);

    // The flood's PM text, built from one encoded body with a fresh mid each.
    let body = base64::engine::general_purpose::STANDARD.encode(vec![0x5a; FLOOD_CHUNK]);
    let pm_len = body.len() + 60;
    let sent = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let rss_before = rss();
    let peak_rss = Arc::new(AtomicU64::new(rss_before.unwrap_or(0)));
    let started = Instant::now();
    let flood = tokio::spawn({
        let (router, sent, done, peak_rss) = (
            pair.server.clone(),
            sent.clone(),
            done.clone(),
            peak_rss.clone(),
        );
        async move {
            for n in 0..FLOOD_PMS {
                let pm =
                    format!("--mcp[v=1,sid=00000000000000ff,mid={n:016x},seq=1/64,exp=0]--{body}");
                router.handle_pm(uid(3), pm).await.expect("router up");
                sent.store(n + 1, Relaxed);
                if n % 256 == 0 {
                    peak_rss.fetch_max(rss().unwrap_or(0), Relaxed);
                }
            }
            done.store(true, Relaxed);
        }
    });

    let mut during = Vec::new();
    while !done.load(Relaxed) {
        during.push(call(&client).await);
        peak_rss.fetch_max(rss().unwrap_or(0), Relaxed);
    }
    let elapsed = started.elapsed();
    flood.await.expect("flood task");
    report("honest_echo/flood", during);
    let stats = pair.server.stats();
    println!(
        "flood: {} PMs of {} bytes in {:.2} s ({:.0} PMs/s); refused by reassembly {}, buffered {} bytes",
        sent.load(Relaxed),
        pm_len,
        elapsed.as_secs_f64(),
        sent.load(Relaxed) as f64 / elapsed.as_secs_f64(),
        stats.dropped_reassembly,
        stats.bytes_buffered,
    );
    match rss_before {
        Some(before) => println!(
            "flood_memory_growth: {:.1} MiB (peak VmRSS during the flood less before it)",
            (peak_rss.load(Relaxed).saturating_sub(before)) as f64 / f64::from(1 << 20)
        ),
        None => println!("flood_memory_growth: unavailable (no /proc/self/status)"),
    }
    let _ = client.cancel().await;
    pair.client.close();
    pair.server.close();
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(measure());
}
