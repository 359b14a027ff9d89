//! A paid keyed call finished before a restart replays after it, identical, without
//! running or paying (Go `TestPaidCallReplayAcrossRestart`), for 30 minutes after it
//! finished; after that the key runs and pays anew. An outcome too large to keep is
//! refused on replay instead of run again (Go `TestJournalOutcomeCap`).

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use brmcp::adapters::mem::Fabric;
use brmcp::server::{
    Harness, MAX_OUTCOME_BYTES, ManualClock, NoArgs, OUTCOME_TTL_SECS, ToolError, ToolSpec,
};

fn harness(dir: &std::path::Path, clock: &ManualClock, probe: &Arc<Probe>) -> Harness {
    let big = {
        let probe = probe.clone();
        ToolSpec::fixed(
            "big",
            "A result over the replay cap",
            1,
            move |_, _: NoArgs| {
                probe.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async { Ok::<_, ToolError>("x".repeat(MAX_OUTCOME_BYTES + 1)) }
            },
        )
    };
    Harness::builder()
        .data_dir(dir)
        .clock(clock.clone())
        .allowed_uids([peer(ALICE)])
        .tool(fortune(probe, 40))
        .tool(big)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_call_replays_across_a_restart_for_30_minutes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at_unix(T0);
    let probe = Arc::new(Probe::default());
    let key = Some("replay-key-1");

    let first = {
        let harness = harness(dir.path(), &clock, &probe);
        let fabric = Fabric::new(1);
        let router = start(&fabric, &harness);
        tip(&harness, 1, ALICE, 100_000).await;
        let alice = client(&fabric, ALICE).await;
        let first = call(&alice, "fortune", serde_json::json!({}), key).await;
        assert!(!is_error(&first));
        alice.router.close();
        router.close();
        first
    };
    assert_eq!(probe.runs(), 1);

    // Restarted, 29 minutes later.
    clock.advance(Duration::from_secs(29 * 60));
    let harness = harness(dir.path(), &clock, &probe);
    assert_eq!(harness.refunded_at_open(), 0);
    let fabric = Fabric::new(2);
    let _router = start(&fabric, &harness);
    let alice = client(&fabric, ALICE).await;
    let replay = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert_eq!(
        serde_json::to_string(&replay).unwrap(),
        serde_json::to_string(&first).unwrap()
    );
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&harness, ALICE).await, 60_000);

    // The window closes 30 minutes after the call finished: the key is a new call.
    clock.advance(Duration::from_secs(OUTCOME_TTL_SECS - 29 * 60));
    let fresh = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert_ne!(text(&fresh), text(&first));
    assert_eq!(probe.runs(), 2);
    assert_eq!(balance(&harness, ALICE).await, 20_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_too_large_to_keep_is_refused_on_replay_not_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::at_unix(T0);
    let probe = Arc::new(Probe::default());
    let harness = harness(dir.path(), &clock, &probe);
    let fabric = Fabric::new(3);
    let _router = start(&fabric, &harness);
    tip(&harness, 1, ALICE, 10_000).await;
    let alice = client(&fabric, ALICE).await;

    let first = call(&alice, "big", serde_json::json!({}), Some("big-key-01")).await;
    assert_eq!(text(&first).len(), MAX_OUTCOME_BYTES + 1);
    let again = call(&alice, "big", serde_json::json!({}), Some("big-key-01")).await;
    assert!(is_error(&again));
    assert_eq!(
        text(&again),
        "duplicate call: outcome not retained (too large, or dropped by the per-caller bound)"
    );
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&harness, ALICE).await, 9_000);
}
