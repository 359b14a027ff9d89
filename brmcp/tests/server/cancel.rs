//! A paid call always ends in its ledger: a request the caller cancels still completes
//! (the handler may watch the cancellation) and its key replays what it returned; a
//! panicking handler is an error answer, refunded, and its key replays the error
//! instead of running it again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::*;
use brmcp::server::{CallContext, CallState, NoArgs, ToolError, ToolSpec};

/// `wait` at 50 atoms, which runs until its request is cancelled; its runs, and the
/// runs that saw the cancellation.
fn waits_to_be_cancelled() -> (ToolSpec, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (runs, stopped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (r, st) = (runs.clone(), stopped.clone());
    let tool = ToolSpec::fixed(
        "wait",
        "Waits to be cancelled",
        50,
        move |call: CallContext, _: NoArgs| {
            r.fetch_add(1, Ordering::SeqCst);
            let stopped = st.clone();
            async move {
                call.request().ct.cancelled().await;
                stopped.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>("stopped early: the caller cancelled")
            }
        },
    );
    (tool, runs, stopped)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_completes_and_replays() {
    let (tool, runs, _) = waits_to_be_cancelled();
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(tool), clock, dir);
    tip(&env.harness, 1, ALICE, 100_000).await;
    let alice = client(&env.fabric, ALICE).await;
    let key = Some("cancel-key-1");

    let request = tokio::spawn({
        let peer = alice.peer().clone();
        async move {
            peer.call_tool(params("wait", serde_json::json!({}), key))
                .await
        }
    });
    until("the handler to start", || runs.load(Ordering::SeqCst) == 1).await;
    // Dropping the request future sends `notifications/cancelled`.
    request.abort();
    let ledger = env.harness.ledger().unwrap().clone();
    until("the call to complete", || {
        ledger.journal(None, 1).unwrap()[0].state == CallState::Completed
    })
    .await;

    let replay = call(&alice, "wait", serde_json::json!({}), key).await;
    assert_eq!(text(&replay), "stopped early: the caller cancelled");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 50_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_is_refunded_and_not_rerun() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = {
        let runs = runs.clone();
        ToolSpec::fixed("boom", "Panics", 50, move |_, _: NoArgs| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move {
                if runs_never_zero() {
                    panic!("handler bug");
                }
                Ok::<_, ToolError>("unreachable")
            }
        })
    };
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(tool), clock, dir);
    tip(&env.harness, 1, ALICE, 100_000).await;
    let alice = client(&env.fabric, ALICE).await;
    let key = Some("panic-key-1");

    let first = call(&alice, "boom", serde_json::json!({}), key).await;
    assert!(is_error(&first));
    assert_eq!(text(&first), "tool failed");
    let again = call(&alice, "boom", serde_json::json!({}), key).await;
    assert_eq!(again, first);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 100_000);
    let entry = &env.harness.ledger().unwrap().journal(None, 1).unwrap()[0];
    assert_eq!(entry.state, CallState::Refunded);
    assert_eq!(entry.reason.as_deref(), Some("handler error: tool failed"));
    assert_eq!(env.harness.stats().handler_errors, 1);
}

/// Keeps the compiler from seeing the panic as unconditional.
fn runs_never_zero() -> bool {
    std::hint::black_box(true)
}

/// A client that lost its session (a bridge restarted mid-call) resends the running
/// call with its key: the duplicate waits for the original. Its session ending leaves
/// the paid original running for it; its caller cancelling it cancels the original's
/// run, as cancelling the original would, and the key replays what that run returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_waiting_duplicate_cancels_the_original_run() {
    let (tool, runs, stopped) = waits_to_be_cancelled();
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(tool), clock, dir);
    tip(&env.harness, 1, ALICE, 100_000).await;
    let key = Some("cancel-key-2");
    let send = |client: &Client| {
        let peer = client.peer().clone();
        tokio::spawn(async move {
            peer.call_tool(params("wait", serde_json::json!({}), key))
                .await
        })
    };

    let first = client(&env.fabric, ALICE).await;
    let _original = send(&first);
    until("the handler to start", || runs.load(Ordering::SeqCst) == 1).await;

    // A duplicate on a new session, whose session then ends: the original runs on.
    let second = client(&env.fabric, ALICE).await;
    let _closed = send(&second);
    until("the duplicate to wait", || env.harness.stats().waited == 1).await;
    let Client {
        router: _second_router,
        service,
    } = second;
    service.cancel().await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        stopped.load(Ordering::SeqCst),
        0,
        "a closed session cancels nothing"
    );

    // Another duplicate, cancelled by its caller: the original's run stops.
    let third = client(&env.fabric, ALICE).await;
    let duplicate = send(&third);
    until("the duplicate to wait", || env.harness.stats().waited == 2).await;
    // Dropping the request future sends `notifications/cancelled`.
    duplicate.abort();
    until("the original's run to be cancelled", || {
        stopped.load(Ordering::SeqCst) == 1
    })
    .await;
    let ledger = env.harness.ledger().unwrap().clone();
    until("the call to complete", || {
        ledger.journal(None, 1).unwrap()[0].state == CallState::Completed
    })
    .await;
    let replay = call(&third, "wait", serde_json::json!({}), key).await;
    assert_eq!(text(&replay), "stopped early: the caller cancelled");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 50_000);
}
