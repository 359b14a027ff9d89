//! Paying bots with tips through the client, and settling the spend log from the
//! client's tip outcomes, whenever they arrive.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use brmcp_adapters::{BoxError, PeerId};
use brmcp_clientrpc::{ClientRpcError, ClientRpcHost, TipProgressEvent};
use tokio::sync::broadcast;

use crate::bridge::{
    Bridge, Payer, PaymentFailed, PaymentUnconfirmed, Resolution, TipOutcomeEvent,
};
use crate::server::MATOMS_PER_ATOM;

/// Terminal outcomes a [`TipPayer`] remembers having claimed: a tip's outcome is
/// claimed within the tip wait, so the last 1024 cover every payment in flight.
const MAX_CLAIMED: usize = 1024;

/// What the payer knows of the client's TipProgress stream: the highest id seen (its
/// position) and the outcomes already taken by a payment.
#[derive(Default)]
struct OutcomeStream {
    position: AtomicU64,
    claimed: Mutex<VecDeque<u64>>,
}

/// Pays bots with Bison Relay tips through the client.
///
/// TipProgress events carry no tag, so the host's own matching (payee and amount) can
/// hand a tip a replayed or unrelated outcome. The payer therefore decides itself which
/// outcome is its tip's: the oldest terminal event for the same bot and amount that it
/// saw after sending, whose id is above the stream position recorded when the payment
/// was made and that no other payment claimed. With none, the payment stays
/// unconfirmed, and the spend log's rule settles it later from the late outcomes.
pub(crate) struct TipPayer {
    host: ClientRpcHost,
    stream: Arc<OutcomeStream>,
}

impl TipPayer {
    /// A payer on `host`, following its TipProgress stream from now on: make it before
    /// the host connects, so replayed outcomes raise its position too.
    pub(crate) fn new(host: ClientRpcHost) -> Self {
        let stream = Arc::new(OutcomeStream::default());
        let mut events = host.subscribe_tip_progress();
        let weak = Arc::downgrade(&stream);
        tokio::spawn(async move {
            loop {
                let id = match events.recv().await {
                    Ok(event) => event.sequence_id,
                    // Missed ids leave the position lower, never higher: outcomes are
                    // then only less likely to be refused.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let Some(stream) = weak.upgrade() else { return };
                stream.position.fetch_max(id, Ordering::SeqCst);
            }
        });
        Self { host, stream }
    }
}

/// The oldest terminal event in `events` (those received since the tip was sent) for
/// `bot` and `matoms` above `position` that is not in `claimed`, claimed.
fn claim_outcome(
    events: &mut broadcast::Receiver<TipProgressEvent>,
    claimed: &Mutex<VecDeque<u64>>,
    bot: PeerId,
    matoms: i64,
    position: u64,
) -> Option<TipProgressEvent> {
    let mut candidates = Vec::new();
    loop {
        match events.try_recv() {
            Ok(event) => {
                if event.is_terminal()
                    && event.uid == bot
                    && event.amount_matoms == matoms
                    && event.sequence_id > position
                {
                    candidates.push(event);
                }
            }
            Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    candidates.sort_by_key(|e| e.sequence_id);
    let mut claimed = claimed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let event = candidates
        .into_iter()
        .find(|e| !claimed.contains(&e.sequence_id))?;
    if claimed.len() == MAX_CLAIMED {
        claimed.pop_front();
    }
    claimed.push_back(event.sequence_id);
    Some(event)
}

impl Payer for TipPayer {
    async fn pay(&self, bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.pay_traced(bot, atoms, self.position()).await.map(drop)
    }

    fn position(&self) -> u64 {
        self.stream.position.load(Ordering::SeqCst)
    }

    async fn pay_traced(
        &self,
        bot: PeerId,
        atoms: u64,
        position: u64,
    ) -> Result<Option<u64>, BoxError> {
        let matoms = atoms
            .checked_mul(MATOMS_PER_ATOM)
            .and_then(|m| i64::try_from(m).ok())
            .ok_or("tip too large")?;
        // Subscribed before TipUser: the tip's outcome cannot be missed.
        let mut events = self.host.subscribe_tip_progress();
        match self.host.tip(bot, atoms).await {
            // Refused by the client, or never sent.
            Err(
                e @ (ClientRpcError::Rpc { .. }
                | ClientRpcError::Config(_)
                | ClientRpcError::NoTipProgress),
            ) => return Err(e.into()),
            // After TipUser may have reached the client (the host closing, a lost
            // connection, an answer it could not read): the tip may be paid.
            Err(e) => {
                tracing::warn!(error = %e, %bot, atoms, "tip outcome unknown");
                return Err(PaymentUnconfirmed.into());
            }
            // Whatever the host matched, the outcome this payment takes is decided
            // here, from the events seen since it was sent.
            Ok(_) => {}
        }
        match claim_outcome(&mut events, &self.stream.claimed, bot, matoms, position) {
            Some(event) if event.completed => Ok(Some(event.sequence_id)),
            Some(event) => Err(PaymentFailed {
                id: event.sequence_id,
                reason: format!("tip failed: {}", event.attempt_err),
            }
            .into()),
            // No outcome yet, or only ones that cannot be this tip's: it may still be
            // paid; the spend log keeps it pending until its outcome arrives (see
            // `settle_late_tip`).
            None => Err(PaymentUnconfirmed.into()),
        }
    }
}

/// Settles the spend log's pending payment a tip outcome belongs to, by the spend log's
/// attribution rule ([`SpendLog::resolve_outcome`]): every terminal outcome, the one a
/// payment still waiting takes (its payer's own settlement by the same outcome then
/// changes nothing, and neither does this after it), those that arrive after the bridge
/// stopped waiting, and those redelivered after a restart. A replayed outcome or one of
/// a tip sent before the payment settles nothing. The host acknowledges the outcome
/// only after this returns `Ok`, so an outcome is never lost between its
/// acknowledgement and its record; on `Err` it is offered again.
pub(super) async fn settle_late_tip(
    bridge: Bridge,
    event: TipProgressEvent,
) -> Result<(), BoxError> {
    let Some(outcome) = late_outcome(&event) else {
        return Ok(());
    };
    match bridge.resolve_spend(&outcome) {
        Ok(Resolution::Settled(id)) => {
            tracing::info!(id, bot = %event.uid, atoms = outcome.atoms, paid = event.completed, "tip outcome recorded");
        }
        Ok(Resolution::Replay) => {
            tracing::debug!(outcome = event.sequence_id, "replayed tip outcome ignored");
        }
        // A tip sent by hand, or by another program on the same client.
        Ok(Resolution::NotOurs) => {
            tracing::debug!(bot = %event.uid, atoms = outcome.atoms, "tip outcome matches no pending payment");
        }
        Err(e) => {
            tracing::warn!(error = %e, "late tip outcome not recorded; retrying");
            return Err(e.into());
        }
    }
    Ok(())
}

/// A terminal TipProgress event as a spend-log outcome; `None` for an amount the
/// bridge never tips (not whole atoms).
fn late_outcome(event: &TipProgressEvent) -> Option<TipOutcomeEvent<'_>> {
    let atoms = u64::try_from(event.amount_matoms)
        .ok()
        .filter(|m| m % MATOMS_PER_ATOM == 0)
        .map(|m| m / MATOMS_PER_ATOM)?;
    let outcome = if event.completed {
        Ok(())
    } else if event.attempt_err.is_empty() {
        Err("tip failed")
    } else {
        Err(event.attempt_err.as_str())
    };
    Some(TipOutcomeEvent {
        id: event.sequence_id,
        bot: event.uid,
        atoms,
        outcome,
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use rmcp::model::CallToolRequestParams;
    use rmcp::service::{RoleClient, RunningService};

    use super::*;
    use crate::bridge::SpendEntry;
    use crate::server::Harness;
    use brmcp_devnet::{Devnet, NodeInfo};
    use std::net::SocketAddr;

    use crate::bridge::SpendStatus;
    use crate::cli::bridge::start_bridge;

    fn terminal(id: u64, bot: PeerId, matoms: i64, completed: bool) -> TipProgressEvent {
        serde_json::from_value(serde_json::json!({
            "sequenceId": id.to_string(),
            "uid": base64_uid(bot),
            "amountMatoms": matoms.to_string(),
            "completed": completed,
            "attempt": 1,
            "attemptErr": if completed { "" } else { "no route" },
        }))
        .unwrap()
    }

    fn base64_uid(bot: PeerId) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(bot.as_bytes())
    }

    #[test]
    fn a_tip_takes_only_an_outcome_that_can_be_its_own() {
        let (tx, mut rx) = broadcast::channel(16);
        let claimed = Mutex::new(VecDeque::new());
        let (bot, other) = (PeerId::from_bytes([1; 32]), PeerId::from_bytes([2; 32]));
        // Replayed from before the tip was sent (at position 100), another bot's, another
        // amount, a retrying attempt: none of them is this tip's outcome.
        tx.send(terminal(90, bot, 5000, true)).unwrap();
        tx.send(terminal(110, other, 5000, true)).unwrap();
        tx.send(terminal(111, bot, 6000, true)).unwrap();
        let mut retrying = terminal(112, bot, 5000, false);
        retrying.will_retry = true;
        tx.send(retrying).unwrap();
        assert_eq!(claim_outcome(&mut rx, &claimed, bot, 5000, 100), None);
        // Two tips of one amount in flight: each takes its own outcome, once.
        tx.send(terminal(130, bot, 5000, false)).unwrap();
        tx.send(terminal(120, bot, 5000, true)).unwrap();
        let mut second = tx.subscribe();
        let first = claim_outcome(&mut rx, &claimed, bot, 5000, 100).unwrap();
        assert_eq!((first.sequence_id, first.completed), (120, true));
        tx.send(terminal(120, bot, 5000, true)).unwrap();
        tx.send(terminal(130, bot, 5000, false)).unwrap();
        let next = claim_outcome(&mut second, &claimed, bot, 5000, 100).unwrap();
        assert_eq!((next.sequence_id, next.completed), (130, false));
        assert_eq!(claim_outcome(&mut rx, &claimed, bot, 5000, 100), None);
    }

    /// A devnet with the example bot on alice and the CLI's bridge on bob, tipping
    /// through bob's clientrpc, and an agent connected to the bridge. The bridge waits
    /// 1 s for a tip; the devnet retries a failed tip attempt after 2 s.
    struct Net {
        dir: tempfile::TempDir,
        devnet: Devnet,
        alice: NodeInfo,
        bob: NodeInfo,
        harness: Harness,
        bridge: Bridge,
        host_b: ClientRpcHost,
        agent: RunningService<RoleClient, ()>,
    }

    async fn net() -> Net {
        let dir = tempfile::tempdir().unwrap();
        let devnet = Devnet::start(dir.path().join("devnet"), &["alice", "bob"])
            .await
            .unwrap();
        let [alice, bob] = <[NodeInfo; 2]>::try_from(devnet.nodes()).unwrap();
        let config = crate::cli::testing::allowing(&alice, &bob);
        let host_a = crate::cli::serve::host_from(&alice.config_path).unwrap();
        let (harness, _upstreams) = crate::cli::serve::start_serving(&alice.dir, &config, &host_a)
            .await
            .unwrap();
        let (bridge, host_b, agent) =
            crate::cli::testing::autopay_bridge(&dir.path().join("bridge"), &bob, &alice, Some(1))
                .await;
        Net {
            dir,
            devnet,
            alice,
            bob,
            harness,
            bridge,
            host_b,
            agent,
        }
    }

    async fn fortune(net: &Net) -> String {
        let r = net
            .agent
            .call_tool(CallToolRequestParams::new("fortune"))
            .await
            .unwrap();
        brmcp_adapters::protocol::result_texts(&r)
            .last()
            .unwrap_or_default()
            .to_owned()
    }

    /// The spend log once its only entry is no longer pending.
    async fn settled(bridge: &Bridge) -> (SpendEntry, u64) {
        for _ in 0..200 {
            let (entries, today) = bridge.spend_log().unwrap();
            if let [entry] = entries.as_slice()
                && entry.status != SpendStatus::Pending
            {
                return (entry.clone(), today);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the payment stayed pending: {:?}", bridge.spend_log());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tip_paid_after_the_wait_is_recorded_paid() {
        let net = net().await;
        // The first attempt fails; the retry 2 s later succeeds.
        net.devnet.set_can_invoice(net.alice.id, false).unwrap();
        assert_eq!(
            fortune(&net).await,
            "brmcp-bridge: payment not made: tip not confirmed within 1s"
        );
        let (entries, today) = net.bridge.spend_log().unwrap();
        assert_eq!(entries[0].status, SpendStatus::Pending);
        assert_eq!(today, 10_000, "a pending tip counts");
        net.devnet.set_can_invoice(net.alice.id, true).unwrap();

        let (entry, today) = settled(&net.bridge).await;
        assert_eq!(entry.status, SpendStatus::Paid);
        assert_eq!(today, 10_000);
        // The bot was credited, so the next call runs on that credit: no new payment.
        for _ in 0..200 {
            let bob = PeerId::from_bytes(net.bob.uid);
            if net.harness.balance_matoms(bob).await.unwrap() > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = fortune(&net).await;
        assert!(!text.starts_with("brmcp-bridge"), "{text}");
        assert_eq!(net.bridge.spend_log().unwrap().0.len(), 1);
        net.devnet.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tip_failing_after_the_wait_frees_the_budget() {
        let net = net().await;
        net.devnet.set_can_invoice(net.alice.id, false).unwrap();
        assert_eq!(
            fortune(&net).await,
            "brmcp-bridge: payment not made: tip not confirmed within 1s"
        );
        // Three attempts, 2 s apart, all refused: the terminal event fails it.
        let (entry, today) = settled(&net.bridge).await;
        assert_eq!(entry.status, SpendStatus::Failed);
        assert_eq!(
            entry.err.as_deref(),
            Some("unable to generate payment invoice")
        );
        assert_eq!(today, 0, "a failed tip no longer counts");
        net.devnet.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tip_paid_while_the_bridge_was_stopped_is_recorded_at_its_next_start() {
        let net = net().await;
        net.devnet.set_can_invoice(net.alice.id, false).unwrap();
        let alice_before = net.devnet.balance(&net.alice.uid);
        assert_eq!(
            fortune(&net).await,
            "brmcp-bridge: payment not made: tip not confirmed within 1s"
        );
        // The bridge stops before any retry of the tip can succeed.
        net.bridge.close().await;
        net.host_b.close();
        net.devnet.set_can_invoice(net.alice.id, true).unwrap();
        for _ in 0..200 {
            if net.devnet.balance(&net.alice.uid) > alice_before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            net.devnet.balance(&net.alice.uid) > alice_before,
            "the client's retry paid the tip"
        );
        let (entries, _) = net.bridge.spend_log().unwrap();
        assert_eq!(
            entries[0].status,
            SpendStatus::Pending,
            "nobody was listening"
        );

        // Started again on the same directory, the bridge gets the outcome the client
        // kept for it and settles the payment.
        let listen = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let (bridge, host) = start_bridge(
            &net.dir.path().join("bridge"),
            &net.bob.config_path,
            listen,
            false,
        )
        .await
        .unwrap();
        let (entry, today) = settled(&bridge).await;
        assert_eq!(entry.status, SpendStatus::Paid);
        assert_eq!(today, 10_000);
        host.close();
        net.devnet.shutdown().await;
    }
}
