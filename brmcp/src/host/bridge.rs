//! The bridge on a client: paying bots with tips through the client, the streams that
//! feed the bridge's router its PMs, and the spend log settled from the client's tip
//! outcomes, whenever they arrive.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use brmcp_adapters::protocol::MATOMS_PER_ATOM;
use brmcp_adapters::{BoxError, Clock as _, PeerId, Router, SystemClock};
use brmcp_clientrpc::{ClientRpcError, ClientRpcHost, ReceivedPost, Streams, TipProgressEvent};
use tokio::sync::broadcast;

use super::feed::journal_streams;
use super::journal::PmJournalError;
use crate::bridge::announcements::{Announcements, Offered};
use crate::bridge::{
    Bridge, Payer, PaymentFailed, PaymentUnconfirmed, Resolution, TipOutcomeEvent,
};

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
pub struct TipPayer {
    host: ClientRpcHost,
    stream: Arc<OutcomeStream>,
}

impl TipPayer {
    /// A payer on `host`, following its TipProgress stream from now on: make it before
    /// the host connects, so replayed outcomes raise its position too.
    pub fn new(host: ClientRpcHost) -> Self {
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
    let mut claimed = claimed.lock().unwrap_or_else(PoisonError::into_inner);
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
async fn settle_late_tip(bridge: Bridge, event: TipProgressEvent) -> Result<(), BoxError> {
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

/// The streams that feed `bridge` from a client: PMs through the journal of `datadir`
/// to `router` (the bridge's), and every tip outcome to `settle_late_tip`. Make the
/// bridge (and its [`TipPayer`]) before the host connects: the client redelivers
/// unacknowledged outcomes at once.
///
/// # Errors
/// [`PmJournalError`] when the journal cannot be opened.
pub fn bridge_streams(
    datadir: &Path,
    router: Router,
    bridge: &Bridge,
) -> Result<Streams, PmJournalError> {
    let streams = journal_streams(datadir, move |from, body| {
        let router = router.clone();
        async move { router.handle_pm(from, body).await.map_err(Into::into) }
    })?;
    let settler = bridge.clone();
    let announcements = announcement_handler(datadir);
    Ok(streams
        .tip_results(move |event| settle_late_tip(settler.clone(), event))
        .posts(announcements))
}

/// Offers every post received to the data directory's announcements
/// ([`Announcements`]), recorded in its file before the post is acknowledged.
fn announcement_handler(
    datadir: &Path,
) -> impl Fn(ReceivedPost) -> std::future::Ready<Result<(), BoxError>> + Send + Sync + 'static {
    let datadir = datadir.to_path_buf();
    // Read at the first post (not at start): a file made unreadable by hand stops
    // the posts stream, not the bridge.
    let store: Arc<Mutex<Option<Announcements>>> = Arc::new(Mutex::new(None));
    move |post: ReceivedPost| {
        let now = u64::try_from(SystemClock.now().secs()).unwrap_or(0);
        let mut store = store.lock().unwrap_or_else(PoisonError::into_inner);
        let result = (|| {
            let loaded = match store.take() {
                Some(loaded) => loaded,
                None => Announcements::load(&datadir, now)?,
            };
            let announcements = store.insert(loaded);
            let offered = announcements.offer(post.author, &post.id, post.text(), now);
            match offered {
                Offered::NotAnnouncement | Offered::Older => return Ok(()),
                Offered::Kept => {
                    tracing::info!(author = %post.author, "announcement kept");
                }
                Offered::Evicted => {}
                Offered::Skipped(why) => {
                    tracing::warn!(author = %post.author, %why, "announcement skipped");
                }
            }
            announcements.save(&datadir)
        })();
        if result.is_err() {
            // Read again from the file at the retry: what was not saved is not kept.
            *store = None;
        }
        std::future::ready(result.map_err(Into::into))
    }
}

/// Subscribes, through `host`, to the posts of `users` (bots the user allowed, users
/// the user named), so their announcements reach [`bridge_streams`]'s handler; each
/// refusal (an unknown user) is logged, not fatal.
pub async fn subscribe_to_announcements(host: &ClientRpcHost, users: &[String]) {
    for user in users {
        if let Err(e) = host.subscribe_to_posts(user).await {
            tracing::warn!(%user, error = %e, "posts not subscribed to");
        }
    }
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
    use super::*;

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
}
