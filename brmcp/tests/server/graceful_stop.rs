//! A graceful stop keeps its word: a paid call in its handler when the harness stops is
//! stopped, refunded once and answered `CALL_INTERRUPTED` on its session before the
//! sessions close; the next start refunds nothing more and tells nobody again. A stop
//! whose answer is never sent leaves the caller to be told by the next start. A free
//! call without a call key in its handler is answered `CALL_INTERRUPTED` too. A call that
//! comes while the harness stops is refused uncharged, keeps the credit reserved for it,
//! and its caller is told at once or, failing that, by the next start.

use std::sync::Arc;
use std::time::Duration;

use brmcp::adapters::PeerId;
use brmcp::adapters::mem::Fabric;
use brmcp::adapters::protocol::CALL_INTERRUPTED;
use brmcp::adapters::protocol::PriceBounds;
use brmcp::adapters::wire::{SessionId, UnixTime};
use brmcp::server::{
    CallRequest, CallState, Charge, Clock, FREE_STOPPED_NOTICE, INTERRUPTED, Ledger, ManualClock,
    NoArgs, Origin, Price, STOPPED_NOTICE, STOPPING, STOPPING_REFUSAL, Tip, ToolError, ToolSpec,
};
use rmcp::ServiceError;
use rmcp::model::RequestId;
use tokio::sync::mpsc;

use crate::support::*;

const KEY: &str = "graceful-stop-key";
const PRICE: u64 = 300;
const FUNDS: u64 = 1_000_000;

/// Generous on a loaded machine; it takes milliseconds.
const WITHIN: Duration = Duration::from_secs(20);

fn hanging(started: mpsc::UnboundedSender<()>) -> ToolSpec {
    hanging_at(PRICE, started)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_answers_the_paid_call_it_ends_before_the_sessions_close() {
    let dir = tempfile::tempdir().unwrap();
    let fabric = Fabric::new(31);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let server = alice_harness(dir.path(), hanging(started_tx));
    tip(&server, 1, ALICE, FUNDS).await;
    let _router = start(&fabric, &server);
    let alice = Arc::new(client(&fabric, ALICE).await);
    let caller = alice.clone();
    let pending = tokio::spawn(async move {
        caller
            .call_tool(params("slow", serde_json::json!({}), Some(KEY)))
            .await
    });
    tokio::time::timeout(WITHIN, started.recv())
        .await
        .expect("the handler started");
    assert_eq!(balance(&server, ALICE).await, FUNDS - PRICE * 1000);

    let stopped = server.stop(WITHIN).await;
    assert_eq!((stopped.calls, stopped.told), (1, 1));
    match tokio::time::timeout(WITHIN, pending)
        .await
        .unwrap()
        .unwrap()
    {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, CALL_INTERRUPTED);
            assert_eq!(e.message, STOPPED_NOTICE);
        }
        other => panic!("expected CALL_INTERRUPTED, got {other:?}"),
    }
    // Refunded once, the key released for the retry, nobody owed a notice.
    assert_eq!(balance(&server, ALICE).await, FUNDS);
    let ledger = server.ledger().unwrap().clone();
    let journal = ledger.journal(None, 10).unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].state, CallState::Refunded);
    assert_eq!(journal[0].reason.as_deref(), Some(INTERRUPTED));
    assert!(!journal[0].key_held);
    let now = ManualClock::at_unix(T0).now();
    assert!(ledger.interrupted(now).unwrap().is_empty());
    drop(ledger);
    drop(server);

    // The next start refunds nothing and tells nobody; the money is where it was.
    let server = alice_harness(dir.path(), hanging(mpsc::unbounded_channel().0));
    nothing_interrupted(&server, now);
    assert_eq!(balance(&server, ALICE).await, FUNDS);
}

#[test]
fn an_interruption_never_told_is_owed_to_the_next_start() {
    const ALICE_ID: PeerId = PeerId::from_bytes([0xa1; 32]);
    let now = UnixTime(1_767_225_600);
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), now).unwrap().ledger;
    let tip = Tip {
        seq: 1,
        caller: ALICE_ID,
        matoms: FUNDS,
    };
    ledger.record_tip(&tip, true, now).unwrap();
    let request = CallRequest {
        caller: ALICE_ID,
        tool: "slow",
        price_atoms: PRICE,
        keyed: None,
    };
    let request_id = RequestId::Number(7);
    let origin = Origin {
        sid: SessionId::from_entropy([9; 8]),
        request_id: &request_id,
    };
    let Charge::Run(call) = ledger.charge_from(&request, Some(origin), now).unwrap() else {
        panic!("charged")
    };
    // The stop refunds and marks in one transaction, then dies before telling.
    ledger.interrupt(call, now).unwrap();
    assert!(ledger.interrupt(call, now).is_err(), "refunded once");
    assert_eq!(ledger.balance_matoms(&ALICE_ID).unwrap(), FUNDS);
    drop(ledger);
    let opened = Ledger::open(dir.path(), now).unwrap();
    assert_eq!(opened.refunded, 0);
    let owed = opened.ledger.interrupted(now).unwrap();
    assert_eq!(owed.len(), 1);
    assert_eq!((owed[0].call, &owed[0].request_id), (call, &request_id));
    assert_eq!(opened.ledger.balance_matoms(&ALICE_ID).unwrap(), FUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_answers_a_free_call_without_a_key_too() {
    let dir = tempfile::tempdir().unwrap();
    let fabric = Fabric::new(32);
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let free = ToolSpec::fixed(
        "wait",
        "Free work that never ends",
        0,
        move |_, _: NoArgs| {
            let _ = started_tx.send(());
            async {
                std::future::pending::<()>().await;
                Ok::<_, ToolError>("unreachable")
            }
        },
    );
    let server = alice_harness(dir.path(), free);
    let _router = start(&fabric, &server);
    let alice = Arc::new(client(&fabric, ALICE).await);
    let caller = alice.clone();
    let pending = tokio::spawn(async move {
        caller
            .call_tool(params("wait", serde_json::json!({}), None))
            .await
    });
    tokio::time::timeout(WITHIN, started.recv())
        .await
        .expect("the handler started");

    let stopped = server.stop(WITHIN).await;
    assert_eq!(
        (stopped.calls, stopped.told, stopped.free_told),
        (0, 0, 1),
        "nothing charged, its caller told"
    );
    match tokio::time::timeout(WITHIN, pending)
        .await
        .expect("answered, not left to time out")
        .unwrap()
    {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, CALL_INTERRUPTED);
            assert_eq!(e.message, FREE_STOPPED_NOTICE);
        }
        other => panic!("expected CALL_INTERRUPTED, got {other:?}"),
    }
    // Nothing was charged or kept of it.
    let ledger = server.ledger().unwrap().clone();
    assert!(ledger.journal(None, 10).unwrap().is_empty());
    assert_eq!(balance(&server, ALICE).await, 0);
}

/// `slow` at [`PRICE`], its price asked when a call comes: each asking says so on
/// `asking` and waits for `gate` to open.
fn gated_price(
    asking: mpsc::UnboundedSender<()>,
    gate: tokio::sync::watch::Receiver<bool>,
) -> ToolSpec {
    let ask: brmcp::server::AskPriceFn<NoArgs> = Arc::new(move |_, _| {
        let _ = asking.send(());
        let mut gate = gate.clone();
        Box::pin(async move {
            let _ = gate.wait_for(|open| *open).await;
            Ok(PRICE)
        })
    });
    ToolSpec::new(
        "slow",
        "Slow paid work",
        Price::Asked(PriceBounds::NONE, ask),
        |_, _: NoArgs| async { Ok::<_, ToolError>("ran") },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_comes_as_the_harness_stops_keeps_its_reserved_credit_and_is_told() {
    let dir = tempfile::tempdir().unwrap();
    let fabric = Fabric::new(33);
    let (asking_tx, mut asking) = mpsc::unbounded_channel();
    let (gate, gate_rx) = tokio::sync::watch::channel(true);
    let server = alice_harness(dir.path(), gated_price(asking_tx, gate_rx));
    let _router = start(&fabric, &server);
    let alice = Arc::new(client(&fabric, ALICE).await);
    // Refused for payment, then paid: the tip's credit is reserved for that key.
    let asked = alice
        .call_tool(params("slow", serde_json::json!({}), Some(KEY)))
        .await
        .unwrap();
    assert_eq!(asked.is_error, Some(true), "payment required: {asked:?}");
    tip(&server, 1, ALICE, PRICE * 1000).await;
    let ledger = server.ledger().unwrap().clone();
    let now = ManualClock::at_unix(T0).now();
    assert_eq!(
        ledger.reserved_matoms(&peer(ALICE), now).unwrap(),
        PRICE * 1000
    );

    // The retry is being priced when the harness stops; it goes on once stopped.
    gate.send_replace(false);
    let _ = asking.recv().await;
    let caller = alice.clone();
    let retry = tokio::spawn(async move {
        caller
            .call_tool(params("slow", serde_json::json!({}), Some(KEY)))
            .await
    });
    tokio::time::timeout(WITHIN, asking.recv())
        .await
        .expect("the retry is priced");
    let stopped = server.stop(WITHIN).await;
    assert_eq!(stopped.calls, 0);
    gate.send_replace(true);

    // Refused uncharged, its caller told now or kept to be told by the next start.
    until("the refusal recorded", || {
        ledger
            .journal(None, 10)
            .unwrap()
            .iter()
            .any(|e| e.reason.as_deref() == Some(STOPPING_REFUSAL))
    })
    .await;
    let answered = tokio::time::timeout(Duration::from_secs(2), retry).await;
    let told_now = match answered {
        Ok(Ok(Err(ServiceError::McpError(e)))) => {
            assert_eq!(e.code, CALL_INTERRUPTED);
            assert_eq!(e.message, STOPPING);
            true
        }
        Ok(other) => panic!("expected CALL_INTERRUPTED, got {other:?}"),
        Err(_) => false,
    };
    let owed = ledger.interrupted(now).unwrap();
    assert_eq!(owed.len(), usize::from(!told_now), "{owed:?}");
    // The credit stays the retry's: no other call may spend it.
    assert_eq!(
        ledger.reserved_matoms(&peer(ALICE), now).unwrap(),
        PRICE * 1000
    );
    assert_eq!(balance(&server, ALICE).await, PRICE * 1000);
    let journal = ledger.journal(None, 10).unwrap();
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert_eq!(journal[0].price_atoms, 0);
    let totals = ledger.totals(now).unwrap();
    assert_eq!(
        (totals.calls_24h, totals.refunds_24h),
        (0, 0),
        "a notice, not a call"
    );
}

#[test]
fn a_refusal_at_the_stop_never_sent_is_owed_to_the_next_start() {
    const ALICE_ID: PeerId = PeerId::from_bytes([0xa1; 32]);
    let now = UnixTime(1_767_225_600);
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), now).unwrap().ledger;
    let request_id = RequestId::Number(9);
    let origin = Origin {
        sid: SessionId::from_entropy([7; 8]),
        request_id: &request_id,
    };
    // The refusal is kept durably, then the process dies before sending it.
    let mark = ledger
        .refuse_stopping(&ALICE_ID, "slow", origin, now)
        .unwrap()
        .expect("a mark");
    drop(ledger);
    let opened = Ledger::open(dir.path(), now).unwrap();
    assert_eq!(opened.refunded, 0, "nothing was charged");
    let owed = opened.ledger.interrupted(now).unwrap();
    assert_eq!(owed.len(), 1);
    assert_eq!((owed[0].call, &owed[0].request_id), (mark, &request_id));
    assert_eq!(opened.ledger.balance_matoms(&ALICE_ID).unwrap(), 0);
    opened.ledger.told(mark).unwrap();
    assert!(opened.ledger.interrupted(now).unwrap().is_empty());
}
