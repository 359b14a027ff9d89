//! A hostile upstream (`hostile_upstream.py`, raw JSON-RPC) sold through the harness to
//! two callers on the fabric: its floods of `tools/list_changed` are a bounded number
//! of re-listings and reach the callers at most once per interval (not at all when
//! nothing changed); its flood of progress is relayed at most once per interval and
//! never after the answer; a job reporting progress outlives the idle timeout and is
//! charged once, a silent one is timed out and refunded; an answer longer than a caller
//! can be sent is a clear error, refunded, and the upstream restarts.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::uid;
use brmcp::server::upstream::{UpstreamLimits, UpstreamState, UpstreamStatus, Upstreams};
use brmcp::server::{CallState, DynamicTools};
use rmcp::model::{CallToolResult, ProgressNotificationParam};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::json;

use crate::support::{
    ALICE, BOB, Env, SERVER, balance, builder, env, is_error, params, read_lines, text, tip,
};
use crate::upstream_bounds::hostile;
use crate::upstream_supervision::{hook, next_in, upstreams};

/// The listeners' least time between two notifications of one kind to a caller (the
/// harness's `LIST_CHANGED_INTERVAL`).
const LIST_CHANGED_INTERVAL: Duration = Duration::from_secs(1);

/// What a caller saw.
#[derive(Clone, Default)]
pub(crate) struct Seen {
    changes: Arc<AtomicUsize>,
    progress: Arc<Mutex<Vec<f64>>>,
}

impl ClientHandler for Seen {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.fetch_add(1, Ordering::SeqCst);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params.progress);
    }
}

impl Seen {
    fn changes(&self) -> usize {
        self.changes.load(Ordering::SeqCst)
    }
    fn progress(&self) -> Vec<f64> {
        self.progress.lock().unwrap().clone()
    }
}

pub(crate) struct Caller {
    seen: Seen,
    pub(crate) service: RunningService<RoleClient, Seen>,
    _router: brmcp::adapters::Router,
}

impl Caller {
    pub(crate) async fn call(&self, name: &'static str, args: serde_json::Value) -> CallToolResult {
        self.service
            .call_tool(params(name, args, None))
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

pub(crate) async fn caller(env: &Env, who: u32) -> Caller {
    let router = env.fabric.router(uid(who), RouterConfig::client());
    let seen = Seen::default();
    let service = seen
        .clone()
        .serve(router.dial(uid(SERVER)).unwrap())
        .await
        .unwrap();
    Caller {
        seen,
        service,
        _router: router,
    }
}

/// The harness selling the hostile upstream (`slow` and `silent` at 500 atoms, the
/// rest free) under `limits`; its status changes; alice and bob connected.
async fn selling(
    state: &Path,
    limits: &UpstreamLimits,
) -> (
    Env,
    Upstreams,
    std::sync::mpsc::Receiver<UpstreamStatus>,
    Caller,
    Caller,
) {
    let mut entry = hostile("hostile", "tools", state);
    entry["tools"] = json!({"slow": 500, "silent": 500, "huge": 500});
    let config = upstreams(json!([entry]));
    let tools = DynamicTools::new();
    let (hook, rx) = hook();
    let started = Upstreams::start_with(&config.upstreams, &tools, None, Some(hook), limits);
    let rx = tokio::task::spawn_blocking(move || {
        next_in(&rx, UpstreamState::Up);
        rx
    })
    .await
    .unwrap();
    let (b, clock, dir) = builder();
    let env = env(b.dynamic_tools(tools), clock, dir);
    let (alice, bob) = (caller(&env, ALICE).await, caller(&env, BOB).await);
    (env, started, rx, alice, bob)
}

/// Waits until `count` has not moved for `quiet`, up to 30 s.
async fn settle(count: impl Fn() -> usize, quiet: Duration) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = (count(), Instant::now());
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = count();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() >= quiet {
            return;
        }
    }
    panic!("still moving after 30 s");
}

/// The most events at one per `every` over `elapsed`, the first at once, plus one.
fn at_most(elapsed: Duration, every: Duration) -> usize {
    (elapsed.as_secs_f64() / every.as_secs_f64()).ceil() as usize + 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_floods_are_coalesced() {
    let dir = tempfile::tempdir().unwrap();
    let mut limits = UpstreamLimits::default();
    limits.relist_window = Duration::from_millis(300);
    let window = limits.relist_window;
    let (_env, started, _rx, alice, bob) = selling(dir.path(), &limits).await;
    let lists = dir.path().join("lists");
    let relists = || read_lines(&lists).len();
    let quiet = window * 2 + LIST_CHANGED_INTERVAL * 2;

    // 2,000 notifications, the definitions unchanged: a few re-listings, no one told.
    let before = relists();
    let t0 = Instant::now();
    let flooded = alice.call("flood", json!({"n": 2000})).await;
    assert_eq!(text(&flooded), "flooded");
    settle(relists, quiet).await;
    let elapsed = t0.elapsed();
    let relisted = relists() - before;
    assert!(
        (1..=at_most(elapsed, window)).contains(&relisted),
        "{relisted} re-listings in {elapsed:?}"
    );
    assert_eq!(
        (alice.seen.changes(), bob.seen.changes()),
        (0, 0),
        "told of a change that changed nothing"
    );

    // 2,000 notifications, each after a change: each caller told at most once per
    // interval, and the last state listed.
    let before = relists();
    let t0 = Instant::now();
    alice
        .call("flood", json!({"n": 2000, "changing": true}))
        .await;
    settle(
        || relists() + alice.seen.changes() + bob.seen.changes(),
        quiet,
    )
    .await;
    let elapsed = t0.elapsed();
    let relisted = relists() - before;
    assert!(
        (1..=at_most(elapsed, window)).contains(&relisted),
        "{relisted} re-listings in {elapsed:?}"
    );
    for (who, seen) in [("alice", &alice.seen), ("bob", &bob.seen)] {
        let told = seen.changes();
        assert!(
            (1..=at_most(elapsed, LIST_CHANGED_INTERVAL.max(window))).contains(&told),
            "{who} was told {told} times in {elapsed:?}"
        );
    }
    let tools = alice.service.list_all_tools().await.unwrap();
    let flood = tools.iter().find(|t| t.name == "flood").expect("flood");
    assert_eq!(flood.description.as_deref(), Some("flood v2000"));
    started.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_progress_flood_is_coalesced_and_ends_before_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let mut limits = UpstreamLimits::default();
    limits.progress_interval = Duration::from_millis(250);
    let (_env, started, _rx, alice, _bob) = selling(dir.path(), &limits).await;
    let t0 = Instant::now();
    let answer = alice.call("progress", json!({"n": 20000})).await;
    let elapsed = t0.elapsed();
    assert_eq!(text(&answer), "sent 20000");
    let seen = alice.seen.progress();
    assert!(
        !seen.is_empty() && seen.len() <= at_most(elapsed, limits.progress_interval),
        "{} progress notifications in {elapsed:?}",
        seen.len()
    );
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(alice.seen.progress(), seen, "progress after the answer");
    started.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_keeps_a_long_job_alive_and_silence_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let mut limits = UpstreamLimits::default();
    limits.call_idle_timeout = Duration::from_secs(2);
    let (env, started, _rx, alice, _bob) = selling(dir.path(), &limits).await;
    tip(&env.harness, 1, ALICE, 500_000).await;

    // Progress every second for 5 s, past the 2 s idle timeout: runs to its end.
    let done = alice.call("slow", json!({"secs": 5})).await;
    assert!(!is_error(&done), "{done:?}");
    assert_eq!(text(&done), "done");
    assert_eq!(balance(&env.harness, ALICE).await, 0, "charged once");
    let journal = env.harness.ledger().unwrap().journal(None, 10).unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].state, CallState::Completed);

    // Silent for 4 s: timed out at 2 s and refunded.
    tip(&env.harness, 2, ALICE, 500_000).await;
    let t0 = Instant::now();
    let silent = alice.call("silent", json!({"secs": 4})).await;
    assert!(is_error(&silent), "{silent:?}");
    assert_eq!(
        text(&silent),
        "upstream hostile: no answer or progress in 2 s"
    );
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert_eq!(balance(&env.harness, ALICE).await, 500_000, "refunded");
    let journal = env.harness.ledger().unwrap().journal(None, 10).unwrap();
    assert_eq!(
        journal
            .iter()
            .filter(|e| e.state == CallState::Refunded)
            .count(),
        1
    );
    started.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_longer_than_a_caller_can_be_sent_is_a_refunded_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut limits = UpstreamLimits::default();
    limits.max_message_bytes = 64 * 1024;
    let (env, started, rx, alice, _bob) = selling(dir.path(), &limits).await;
    tip(&env.harness, 1, ALICE, 500_000).await;
    let t0 = Instant::now();
    let huge = alice.call("huge", json!({"n": 200_000})).await;
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert!(is_error(&huge), "{huge:?}");
    assert!(
        text(&huge).contains("sent a message over 65536 bytes"),
        "{}",
        text(&huge)
    );
    assert_eq!(balance(&env.harness, ALICE).await, 500_000, "refunded");
    // The connection was closed: the upstream is restarted and serves again.
    let up = tokio::task::spawn_blocking(move || {
        let down = next_in(&rx, UpstreamState::Down);
        (down, next_in(&rx, UpstreamState::Up))
    })
    .await
    .unwrap();
    assert!(
        up.0.error
            .as_deref()
            .is_some_and(|e| e.contains("over 65536 bytes")),
        "{:?}",
        up.0
    );
    assert_eq!(up.1.restarts, 1);
    let small = alice.call("huge", json!({"n": 10})).await;
    assert_eq!(text(&small), "x".repeat(10));
    assert_eq!(balance(&env.harness, ALICE).await, 0);
    started.shutdown().await;
}
