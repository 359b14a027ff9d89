//! Which tip outcome settles which payment: each payment records the outcome stream's
//! position when its tip is sent, and only a later outcome for the same bot and amount
//! can settle it, oldest payment first, each outcome once. A replayed old outcome and
//! a hand-sent tip of the same amount, seen before the payment was sent, settle
//! nothing, so the payment keeps counting until its own outcome arrives; across a
//! restart the recorded positions hold.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, PeerId, RouterConfig};
use brmcp::bridge::{Bridge, Payer, PaymentUnconfirmed, Resolution, SpendStatus, TipOutcomeEvent};
use serde_json::json;

use crate::common::{BotState, FORTUNE_PRICE, TestBot, autopay, base_config, call, connect};

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
    let state = Arc::new(BotState::default());
    let bot_router = fabric.router(bot, RouterConfig::server());
    bot_router.serve(move |peer: &PeerId| TestBot {
        state: state.clone(),
        caller: *peer,
    });
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
