//! A call key reused for another tool or with other arguments is refused with a clear
//! error instead of replaying an unrelated outcome (the Go harness replayed whatever
//! the key first answered, weakness §4.10.5); nothing runs or pays, and the key still
//! replays its own call. Argument order does not matter.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::*;
use brmcp::server::{ToolError, ToolSpec};
use tokio::sync::Semaphore;

fn paid_echo(runs: &Arc<AtomicUsize>, gate: Option<Arc<Semaphore>>) -> ToolSpec {
    let runs = runs.clone();
    ToolSpec::fixed(
        "paid_echo",
        "Echo for 10 atoms",
        10,
        move |_, args: EchoArgs| {
            runs.fetch_add(1, Ordering::SeqCst);
            let gate = gate.clone();
            async move {
                if let Some(gate) = gate {
                    let _permit = gate.acquire().await.map_err(ToolError::from)?;
                }
                Ok::<_, ToolError>(format!("echo: {}", args.text))
            }
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_key_refuses_other_arguments_and_tools() {
    let runs = Arc::new(AtomicUsize::new(0));
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(
        builder
            .tool(paid_echo(&runs, None))
            .tool(fortune(&probe, 10)),
        clock,
        dir,
    );
    tip(&env.harness, 1, ALICE, 100_000).await;
    let alice = client(&env.fabric, ALICE).await;
    let key = Some("reused-key-1");

    let first = call(
        &alice,
        "paid_echo",
        serde_json::json!({"text": "a", "extra": [1, {"y": 2, "x": 1}]}),
        key,
    )
    .await;
    assert_eq!(text(&first), "echo: a");
    assert_eq!(balance(&env.harness, ALICE).await, 90_000);

    let other_args = call(&alice, "paid_echo", serde_json::json!({"text": "b"}), key).await;
    assert!(is_error(&other_args));
    assert_eq!(
        text(&other_args),
        "call key already used with other arguments"
    );

    let other_tool = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert!(is_error(&other_tool));
    assert_eq!(text(&other_tool), "call key already used for another tool");

    // Same arguments in another key order: the same call, replayed.
    let replay = call(
        &alice,
        "paid_echo",
        serde_json::json!({"extra": [1, {"x": 1, "y": 2}], "text": "a"}),
        key,
    )
    .await;
    assert_eq!(replay, first);

    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(probe.runs(), 0);
    assert_eq!(balance(&env.harness, ALICE).await, 90_000);
    assert_eq!(env.harness.stats().key_conflicts, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_key_refuses_other_arguments_at_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(Semaphore::new(0));
    let (builder, clock, dir) = builder();
    let env = env(
        builder.tool(paid_echo(&runs, Some(gate.clone()))),
        clock,
        dir,
    );
    tip(&env.harness, 1, ALICE, 100_000).await;
    let alice = client(&env.fabric, ALICE).await;
    let key = Some("reused-key-2");

    let original = tokio::spawn({
        let peer = alice.peer().clone();
        async move {
            peer.call_tool(params("paid_echo", serde_json::json!({"text": "a"}), key))
                .await
                .unwrap()
        }
    });
    until("the handler to start", || runs.load(Ordering::SeqCst) == 1).await;
    // Answered while the original still runs: it neither waits nor runs.
    let other = call(&alice, "paid_echo", serde_json::json!({"text": "b"}), key).await;
    assert_eq!(text(&other), "call key already used with other arguments");
    gate.add_permits(1);
    assert_eq!(text(&original.await.unwrap()), "echo: a");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 90_000);
}
