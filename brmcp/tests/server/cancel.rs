//! A paid call always ends in its ledger: a request the caller cancels still completes
//! (the handler may watch the cancellation) and its key replays what it returned; a
//! panicking handler is an error answer, refunded, and its key replays the error
//! instead of running it again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::*;
use brmcp::server::{CallContext, CallState, NoArgs, ToolError, ToolSpec};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_completes_and_replays() {
    let runs = Arc::new(AtomicUsize::new(0));
    let tool = {
        let runs = runs.clone();
        ToolSpec::fixed(
            "wait",
            "Waits to be cancelled",
            50,
            move |call: CallContext, _: NoArgs| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    call.request().ct.cancelled().await;
                    Ok::<_, ToolError>("stopped early: the caller cancelled")
                }
            },
        )
    };
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
