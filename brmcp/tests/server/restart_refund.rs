//! A paid call whose process is killed (SIGKILL) inside the handler is refunded when the
//! harness next starts on the same data directory, exactly once; its key is released,
//! so the caller's retry runs and pays afresh (Go `TestInterruptedChargeRefundedOnRestart`,
//! here with a real killed process instead of a hand-written journal entry).

use std::sync::Arc;
use std::time::Duration;

use crate::support::*;
use brmcp::adapters::mem::Fabric;
use brmcp::server::{CallState, Harness, INTERRUPTED, ManualClock, NoArgs, ToolError, ToolSpec};

const KEY: &str = "restart-key-1";

fn hang(log: std::path::PathBuf) -> ToolSpec {
    ToolSpec::fixed("hang", "Never returns", 300, move |_, _: NoArgs| {
        let log = log.clone();
        async move {
            log_line(&log, "handler started");
            tokio::time::sleep(Duration::from_secs(3600)).await;
            Ok::<_, ToolError>("unreachable")
        }
    })
}

/// The child: funds Alice with 1000 atoms and calls `hang`, which the parent kills.
async fn child(dir: std::path::PathBuf) {
    let harness = Harness::builder()
        .data_dir(dir.join("data"))
        .allowed_uids([peer(ALICE)])
        .tool(hang(dir.join("log")))
        .build()
        .unwrap();
    let fabric = Fabric::new(1);
    let _router = start(&fabric, &harness);
    tip(&harness, 1, ALICE, 1_000_000).await;
    let alice = client(&fabric, ALICE).await;
    let _ = call(&alice, "hang", serde_json::json!({}), Some(KEY)).await;
    unreachable!("the parent kills this process inside the handler");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_killed_inside_its_handler_is_refunded_once_on_restart() {
    if let Some(dir) = child_dir() {
        return child(dir).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let mut process = spawn_child(
        module_path!(),
        "a_call_killed_inside_its_handler_is_refunded_once_on_restart",
        dir.path(),
        &[],
    );
    tokio::task::spawn_blocking({
        let log = log.clone();
        move || wait_for_line(&log, "handler started")
    })
    .await
    .unwrap();
    kill(&mut process);

    // The restarted server's `hang` answers at once.
    let runs = Arc::new(Probe::default());
    let build = || {
        let runs = runs.clone();
        let quick = ToolSpec::fixed("hang", "Answers at once now", 300, move |_, _: NoArgs| {
            runs.runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async { Ok::<_, ToolError>("done") }
        });
        Harness::builder()
            .data_dir(dir.path().join("data"))
            .clock(ManualClock::at_unix(T0 + 86_400 * 400))
            .allowed_uids([peer(ALICE)])
            .tool(quick)
            .build()
            .unwrap()
    };
    let harness = build();
    assert_eq!(harness.refunded_at_open(), 1);
    assert_eq!(balance(&harness, ALICE).await, 1_000_000);
    let journal = harness.ledger().unwrap().journal(None, 10).unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].state, CallState::Refunded);
    assert_eq!(journal[0].reason.as_deref(), Some(INTERRUPTED));
    assert_eq!(journal[0].call_key.as_deref(), Some(KEY));
    assert!(!journal[0].key_held);
    drop(harness);

    // Started again: nothing more to refund; the key was released with the refund, so
    // the caller's retry runs and pays.
    let harness = build();
    assert_eq!(harness.refunded_at_open(), 0);
    assert_eq!(balance(&harness, ALICE).await, 1_000_000);
    let fabric = Fabric::new(2);
    let _router = start(&fabric, &harness);
    let alice = client(&fabric, ALICE).await;
    let retry = call(&alice, "hang", serde_json::json!({}), Some(KEY)).await;
    assert_eq!(text(&retry), "done");
    assert_eq!(runs.runs(), 1);
    assert_eq!(balance(&harness, ALICE).await, 700_000);
}
