//! Which tip outcome settles which payment: each payment records the outcome stream's
//! position when its tip is sent, and only a later outcome for the same bot and amount
//! can settle it, oldest payment first, each outcome once. A replayed old outcome and
//! a hand-sent tip of the same amount, seen before the payment was sent, settle
//! nothing, so the payment keeps counting until its own outcome arrives; across a
//! restart the recorded positions hold. An outcome the stream records while its
//! payment is in flight settles it once, and the payer settling by it changes nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, ManualClock, PeerId, RouterConfig};
use brmcp::bridge::{Bridge, Payer, PaymentUnconfirmed, Resolution, SpendStatus, TipOutcomeEvent};
use serde_json::json;

use crate::common::{FORTUNE_PRICE, autopay, base_config, call, connect, serve_test_bot};

/// A payer whose tips never confirm in time, on a stream at `position`.
#[derive(Clone, Default)]
struct StreamPayer {
    position: Arc<AtomicU64>,
}

impl Payer for StreamPayer {
    async fn pay(&self, _bot: PeerId, _atoms: u64) -> Result<(), BoxError> {
        Err(PaymentUnconfirmed.into())
    }

    fn position(&self) -> u64 {
        self.position.load(Ordering::SeqCst)
    }
}

struct Net {
    _fabric: Fabric,
    _bot_router: brmcp::adapters::Router,
    bot: PeerId,
    bridge: Bridge,
}

async fn start(dir: &std::path::Path, payer: StreamPayer) -> Net {
    let fabric = Fabric::new(3);
    let (bot, me) = (uid(1), uid(2));
    let (bot_router, _) = serve_test_bot(&fabric, bot);
    let bridge = Bridge::new(
        base_config(dir),
        fabric.router(me, RouterConfig::client()),
        payer,
    )
    .unwrap();
    bridge.apply_settings(autopay(bot)).await.unwrap();
    Net {
        _fabric: fabric,
        _bot_router: bot_router,
        bot,
        bridge,
    }
}

fn outcome(id: u64, bot: PeerId, paid: bool) -> TipOutcomeEvent<'static> {
    TipOutcomeEvent {
        id,
        bot,
        atoms: FORTUNE_PRICE,
        outcome: if paid { Ok(()) } else { Err("no route") },
    }
}

async fn pay_once(net: &Net) {
    let agent = connect(&net.bridge, net.bot, ()).await;
    let result = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(result.is_error, Some(true), "unconfirmed: not paid yet");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn replayed_and_hand_sent_outcomes_do_not_settle_a_new_payment() {
    let dir = tempfile::tempdir().unwrap();
    let payer = StreamPayer::default();
    let net = start(dir.path(), payer.clone()).await;

    // An earlier payment, settled by its outcome 80.
    payer.position.store(70, Ordering::SeqCst);
    pay_once(&net).await;
    assert!(matches!(
        net.bridge
            .resolve_spend(&outcome(80, net.bot, true))
            .unwrap(),
        Resolution::Settled(_)
    ));
    // Meanwhile the client saw a hand-sent tip of the same amount fail (95); the
    // stream is at 100 when the new payment's tip is sent.
    payer.position.store(100, Ordering::SeqCst);
    pay_once(&net).await;

    // After a reconnect the client replays outcome 80 and the hand-sent failure 95.
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(80, net.bot, true))
            .unwrap(),
        Resolution::Replay
    );
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(95, net.bot, false))
            .unwrap(),
        Resolution::NotOurs
    );
    let (entries, counted) = net.bridge.spend_log().unwrap();
    assert_eq!(entries[1].status, SpendStatus::Pending);
    assert_eq!(entries[1].tip_pos, 100);
    assert_eq!(counted, 2 * FORTUNE_PRICE, "the new payment still counts");

    // Restarted with a payer that has seen nothing yet: the recorded position holds.
    net.bridge.close().await;
    drop(net);
    let payer = StreamPayer::default();
    let net = start(dir.path(), payer.clone()).await;
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(95, net.bot, false))
            .unwrap(),
        Resolution::NotOurs
    );
    // A third payment sent before the stream replayed anything is recorded at 100.
    pay_once(&net).await;
    let (entries, _) = net.bridge.spend_log().unwrap();
    assert_eq!(entries[2].tip_pos, 100);

    // Their own outcomes settle them, oldest first, each once.
    let second = entries[1].id;
    let third = entries[2].id;
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(120, net.bot, false))
            .unwrap(),
        Resolution::Settled(second)
    );
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(120, net.bot, true))
            .unwrap(),
        Resolution::Replay
    );
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(130, uid(9), true))
            .unwrap(),
        Resolution::NotOurs,
        "another bot's"
    );
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(131, net.bot, true))
            .unwrap(),
        Resolution::Settled(third)
    );
    let (entries, counted) = net.bridge.spend_log().unwrap();
    assert_eq!(entries[1].status, SpendStatus::Failed);
    assert_eq!(entries[2].status, SpendStatus::Paid);
    assert_eq!(counted, 2 * FORTUNE_PRICE);
}

/// A payer whose tip's outcome the outcome stream records while the payment is in
/// flight (the host hands every outcome to the spend log before acknowledging it),
/// before the payer settles by the same outcome; with no outcome scripted, the tip
/// stays unconfirmed.
#[derive(Clone, Default)]
struct InFlightPayer {
    position: Arc<AtomicU64>,
    bridge: Arc<std::sync::OnceLock<Bridge>>,
    outcomes: Arc<std::sync::Mutex<std::collections::VecDeque<u64>>>,
    recorded: Arc<std::sync::Mutex<Vec<Resolution>>>,
}

impl Payer for InFlightPayer {
    async fn pay(&self, _bot: PeerId, _atoms: u64) -> Result<(), BoxError> {
        Err(PaymentUnconfirmed.into())
    }

    fn position(&self) -> u64 {
        self.position.load(Ordering::SeqCst)
    }

    async fn pay_traced(
        &self,
        bot: PeerId,
        _atoms: u64,
        _position: u64,
    ) -> Result<Option<u64>, BoxError> {
        let Some(id) = self.outcomes.lock().unwrap().pop_front() else {
            return Err(PaymentUnconfirmed.into());
        };
        let bridge = self.bridge.get().unwrap();
        let resolution = bridge.resolve_spend(&outcome(id, bot, false)).unwrap();
        self.recorded.lock().unwrap().push(resolution);
        Err(brmcp::bridge::PaymentFailed {
            id,
            reason: "tip failed: no route".into(),
        }
        .into())
    }
}

#[tokio::test]
async fn an_outcome_recorded_in_flight_settles_its_payment_once_and_the_payer_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let payer = InFlightPayer::default();
    let fabric = Fabric::new(3);
    let (bot, me) = (uid(1), uid(2));
    let (bot_router, _) = serve_test_bot(&fabric, bot);
    let clock = ManualClock::at_unix(1_800_000_000);
    let bridge = Bridge::new(
        base_config(dir.path()).with_clock(clock.clone()),
        fabric.router(me, RouterConfig::client()),
        payer.clone(),
    )
    .unwrap();
    payer.bridge.set(bridge.clone()).ok().unwrap();
    bridge.apply_settings(autopay(bot)).await.unwrap();
    let net = Net {
        _fabric: fabric,
        _bot_router: bot_router,
        bot,
        bridge,
    };

    // Its outcome (11) recorded while it was in flight: settled by it, and the payer's
    // settlement by the same outcome changes nothing.
    payer.position.store(10, Ordering::SeqCst);
    payer.outcomes.lock().unwrap().push_back(11);
    pay_once(&net).await;
    let (entries, counted) = net.bridge.spend_log().unwrap();
    let first = entries[0].id;
    assert_eq!(
        *payer.recorded.lock().unwrap(),
        [Resolution::Settled(first)]
    );
    assert_eq!(
        (entries[0].status, entries[0].outcome),
        (SpendStatus::Failed, Some(11))
    );
    assert_eq!(counted, 0, "failed: counted by neither");
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(11, net.bot, false))
            .unwrap(),
        Resolution::Replay
    );

    // An older payment left unconfirmed at 20; a new one at 30 whose payer takes
    // outcome 31, which the stream gives the older one first: the new one stays
    // pending (unconfirmed) until the next outcome, never counted twice.
    payer.position.store(20, Ordering::SeqCst);
    pay_once(&net).await;
    clock.advance(std::time::Duration::from_secs(100));
    payer.position.store(30, Ordering::SeqCst);
    payer.outcomes.lock().unwrap().push_back(31);
    pay_once(&net).await;
    let (entries, counted) = net.bridge.spend_log().unwrap();
    let (older, newer) = (entries[1].id, entries[2].id);
    assert_eq!(
        payer.recorded.lock().unwrap()[1],
        Resolution::Settled(older)
    );
    assert_eq!(entries[1].status, SpendStatus::Failed);
    assert_eq!(entries[2].status, SpendStatus::Pending);
    assert!(entries[2].unconfirmed, "nobody waits for it any more");
    assert_eq!(counted, FORTUNE_PRICE);
    // The outcome still unknown is the older payment's, in truth: its uncertainty,
    // and how long it holds other agents back, date from the older one.
    assert_eq!(entries[2].ts, entries[1].ts + 100);
    let (uncollected, _) = net.bridge.credit_log().unwrap();
    let pending = uncollected.iter().find(|u| u.id == newer).unwrap();
    assert_eq!(pending.since, entries[1].ts);
    assert_eq!(
        net.bridge
            .resolve_spend(&outcome(32, net.bot, true))
            .unwrap(),
        Resolution::Settled(newer)
    );
    let (entries, counted) = net.bridge.spend_log().unwrap();
    assert_eq!(entries[2].status, SpendStatus::Paid);
    assert_eq!(counted, FORTUNE_PRICE, "paid once");
    net.bridge.close().await;
}
