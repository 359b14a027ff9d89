//! Interruptions are told, not waited out: the server dies during a paid keyed call (its
//! runtime is dropped with the call in its handler, as a kill would leave it: charged,
//! pending, never answered); the harness started again on the same data directory
//! refunds the call once and answers the caller's waiting request, on its session, with
//! `CALL_INTERRUPTED`, within seconds. A ping on the old session is answered; the
//! caller's retry with the same key runs afresh; a later start refunds and tells nobody.

use std::sync::Arc;
use std::time::Duration;

use brmcp::adapters::mem::Fabric;
use brmcp::adapters::protocol::CALL_INTERRUPTED;
use brmcp::server::{
    CallState, Clock, INTERRUPTED, INTERRUPTED_NOTICE, ManualClock, NoArgs, ToolError, ToolSpec,
};
use rmcp::ServiceError;
use rmcp::model::{ClientRequest, PingRequest, ServerResult};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

use crate::support::*;

const KEY: &str = "interrupted-key-1";

/// The paid tool's price, in atoms.
const PRICE: u64 = 300;

/// Alice's funds, in milliatoms.
const FUNDS: u64 = 1_000_000;

/// How long the caller may wait for the notice on a loaded machine (it takes
/// milliseconds).
const TOLD_WITHIN: Duration = Duration::from_secs(20);

fn runtime(threads: usize) -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .unwrap()
}

/// `slow` at [`PRICE`]: says it started, then never finishes.
fn hanging(started: mpsc::UnboundedSender<()>) -> ToolSpec {
    hanging_at(PRICE, started)
}

/// `slow` at [`PRICE`], answering at once.
fn quick() -> ToolSpec {
    ToolSpec::fixed("slow", "Slow paid work", PRICE, |_, _: NoArgs| async {
        Ok::<_, ToolError>("done")
    })
}

/// Waits until `cond` holds, for up to [`TOLD_WITHIN`].
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(TOLD_WITHIN, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    waited
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"));
}

/// Pings the server; answered within seconds.
async fn ping(client: &Client) {
    let pong = tokio::time::timeout(
        TOLD_WITHIN,
        client.send_request(ClientRequest::PingRequest(PingRequest {
            method: Default::default(),
            extensions: Default::default(),
        })),
    )
    .await
    .expect("ping answered within seconds")
    .expect("ping");
    assert!(matches!(pong, ServerResult::EmptyResult(_)), "{pong:?}");
}

#[test]
fn a_restarted_harness_tells_the_caller_its_paid_call_was_interrupted() {
    let dir = tempfile::tempdir().unwrap();
    let main = runtime(2);
    let fabric = main.block_on(async { Fabric::new(23) });

    // The server's first life, on a runtime of its own.
    let first = runtime(1);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let server = alice_harness(dir.path(), hanging(started_tx));
    first.block_on(tip(&server, 1, ALICE, FUNDS));
    let first_router = {
        let _inside = first.enter();
        start(&fabric, &server)
    };

    let alice = main.block_on(client(&fabric, ALICE));
    let alice = Arc::new(alice);
    let caller = alice.clone();
    let pending = main.spawn(async move {
        caller
            .call_tool(params("slow", serde_json::json!({}), Some(KEY)))
            .await
    });
    main.block_on(async {
        tokio::time::timeout(TOLD_WITHIN, started.recv())
            .await
            .expect("the handler started")
    });
    assert_eq!(main.block_on(balance(&server, ALICE)), FUNDS - PRICE * 1000);
    // A ping while the call runs is answered at once: the bot is alive.
    main.block_on(ping(&alice));

    // The crash: everything of the first life goes, the call still in its handler.
    drop(server);
    drop(first_router);
    drop(first);

    main.block_on(async {
        let server = alice_harness(dir.path(), quick());
        assert_eq!(server.refunded_at_open(), 1);
        let _router = start(&fabric, &server);
        let failed = tokio::time::timeout(TOLD_WITHIN, pending)
            .await
            .expect("the caller was told within seconds of the restart")
            .unwrap();
        match failed {
            Err(ServiceError::McpError(e)) => {
                assert_eq!(e.code, CALL_INTERRUPTED);
                assert_eq!(e.message, INTERRUPTED_NOTICE);
            }
            other => panic!("expected CALL_INTERRUPTED, got {other:?}"),
        }
        eventually("the notice counted", || {
            server.stats().interrupted_told == 1
        })
        .await;

        // One refund, in the ledger; the notice is not owed any more.
        assert_eq!(balance(&server, ALICE).await, FUNDS);
        let ledger = server.ledger().unwrap();
        let journal = ledger.journal(None, 10).unwrap();
        assert_eq!(journal.len(), 1);
        assert_eq!(journal[0].state, CallState::Refunded);
        assert_eq!(journal[0].reason.as_deref(), Some(INTERRUPTED));
        let now = ManualClock::at_unix(T0).now();
        eventually("the notice cleared", || {
            ledger.interrupted(now).unwrap().is_empty()
        })
        .await;

        // A ping on the old session, which the restarted router does not know, is
        // answered session-not-found, and the client re-establishes it and pings again.
        let not_found = server.router().unwrap().stats().dropped_unknown_session;
        ping(&alice).await;
        assert!(server.router().unwrap().stats().dropped_unknown_session > not_found);

        // The retry with the same key runs afresh and pays once.
        let retry = call(&alice, "slow", serde_json::json!({}), Some(KEY)).await;
        assert_eq!(text(&retry), "done");
        assert_eq!(balance(&server, ALICE).await, FUNDS - PRICE * 1000);
        server.close();
        drop(server);

        // Started again: nothing to refund, nobody to tell.
        let server = alice_harness(dir.path(), quick());
        nothing_interrupted(&server, now);
    });
}
