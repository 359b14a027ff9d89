//! The spending policy: caps, approval, payment through the host's [`Payer`], and the
//! spend log.
//!
//! [`Policy::settle`] runs, for one amount the quote rules allowed
//! ([`quote::decide`](super::quote::decide)):
//! 1. the per-call cap (0: never pay);
//! 2. a first look at the daily cap, so the user is not asked for a payment that
//!    cannot be made;
//! 3. in approval mode, the user's decision, with a timeout: always parked for the
//!    page and `approvals approve/deny`; asked of the agent's client too where it can
//!    and the agent's [`Approver`] is the agent itself ([`Ask`]: by elicitation, or on
//!    protocol 2026-07-28 by `input_required`, the payment then settled in the
//!    background while the agent's call is held for its retry); whichever answers
//!    first decides. The ask of an agent whose approver is the user is dropped
//!    unasked, whoever made it: only the parked approval decides its payments;
//! 4. the daily cap again, reserving the amount in the spend log in the same
//!    transaction ([`SpendLog::reserve`]): this is the check that binds;
//! 5. [`Payer::pay`] with the tip wait as deadline: success marks the row paid, an
//!    error marks it failed, a timeout leaves it pending (still counted whatever its
//!    age; a late tip outcome resolves it through
//!    [`Bridge::resolve_spend`](super::Bridge::resolve_spend), or the user does).
//!    A payment the payer reports [`PaymentUnconfirmed`] (it lost sight of the tip,
//!    which may be paid) is waited on for that late outcome, within the tip wait and
//!    [`LATE_OUTCOME_WAIT`]: paid, the call goes on, on the credit it bought at the
//!    bot; failed, it ends. Only with no outcome by then does the call end with its
//!    payment pending.
//!    The row records the rail's stream position first ([`Payer::position`]), and the
//!    outcome's id when it settles, for the attribution rule of
//!    [`SpendLog::resolve_outcome`](super::SpendLog::resolve_outcome).
//!
//! Before a call of a priced tool is even sent, [`Policy::may_pay`] applies steps 1
//! and 2 to its listed price, and the credit rules hold it while another agent's
//! calls or credit are at the bot ([`credit`](super::credit)).
//!
//! Caps bind in both modes; approving cannot override them. An agent of the
//! settings' `agents` is held to its own caps and bots as well as the global caps: the
//! per-call cap is the lower of the two, and the reservation checks the agent's daily
//! total and everyone's in one transaction.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{BoxError, Clock, PeerId};
use tokio::sync::{Notify, broadcast, oneshot};
use tokio::time::Instant;

use super::credit::CreditBook;
use super::quote::DynamicQuote;
use super::settings::{Approver, Caller, Mode, Settings};
use super::spend::{OverCap, Payment, SpendLog, SpendStatus, Spender, fits_daily_cap};

/// How a payment reaches a bot: the host's payment rail (Bison Relay tips).
pub trait Payer: Send + Sync + 'static {
    /// Pays `atoms` to `bot`. Resolves `Ok` only once the payment is confirmed; an
    /// error's text reaches the agent verbatim.
    fn pay(&self, bot: PeerId, atoms: u64) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// The rail's outcome-stream position now: the highest outcome id seen, so that
    /// no outcome at or below it can belong to a payment sent from now on. The spend
    /// log records it with each payment before [`pay_traced`](Self::pay_traced) (see
    /// [`SpendLog::resolve_outcome`](super::SpendLog::resolve_outcome)). 0 (the default)
    /// for a rail without outcome ids.
    fn position(&self) -> u64 {
        0
    }

    /// [`pay`](Self::pay) for a payment recorded at stream position `position`,
    /// resolving to the id of the outcome that confirmed it, if the rail has ids; a
    /// failure the rail reported with an outcome id is [`PaymentFailed`]. The id is
    /// recorded, so a replay of that outcome settles nothing later.
    fn pay_traced(
        &self,
        bot: PeerId,
        atoms: u64,
        position: u64,
    ) -> impl Future<Output = Result<Option<u64>, BoxError>> + Send {
        let _ = position;
        async move { self.pay(bot, atoms).await.map(|()| None) }
    }
}

/// A [`Payer`]'s error for a payment that failed with a known outcome: the rail's
/// outcome `id` and its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentFailed {
    /// The outcome's id on the rail's stream.
    pub id: u64,
    /// Why it failed, as the agent will read it.
    pub reason: String,
}

impl std::fmt::Display for PaymentFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for PaymentFailed {}

/// A [`Payer`]'s error for a payment that may still complete: it stopped waiting for
/// the confirmation (a tip sent, its outcome not known in time). The spend log keeps
/// the payment `pending`, counting against the daily cap, until
/// [`Bridge::resolve_spend`](super::Bridge::resolve_spend) or the user settles it; any
/// other error records it `failed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PaymentUnconfirmed;

impl std::fmt::Display for PaymentUnconfirmed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("payment not confirmed in time; it may still complete")
    }
}

impl std::error::Error for PaymentUnconfirmed {}

type PayFuture<'a> = Pin<Box<dyn Future<Output = Result<Option<u64>, BoxError>> + Send + 'a>>;

/// Object-safe form of [`Payer`].
pub(crate) trait DynPayer: Send + Sync + 'static {
    fn position_dyn(&self) -> u64;
    fn pay_dyn(&self, bot: PeerId, atoms: u64, position: u64) -> PayFuture<'_>;
}

impl<P: Payer> DynPayer for P {
    fn position_dyn(&self) -> u64 {
        self.position()
    }

    fn pay_dyn(&self, bot: PeerId, atoms: u64, position: u64) -> PayFuture<'_> {
        Box::pin(self.pay_traced(bot, atoms, position))
    }
}

/// A payment waiting for the user's decision (approval mode).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PendingPayment {
    /// Its id, for [`Bridge::resolve_payment`](super::Bridge::resolve_payment).
    pub id: String,
    /// The bot to be paid.
    pub bot: PeerId,
    /// The tool the payment is for.
    pub tool: String,
    /// The amount, in atoms.
    pub atoms: u64,
    /// When it was asked for.
    pub created: UnixTime,
    /// The agent whose call it pays for.
    pub agent: String,
    /// For a dynamically priced tool, its quote and the bound it was checked within.
    pub quoted: Option<DynamicQuote>,
}

/// The decision's channel and what the user sees.
struct Parked {
    info: PendingPayment,
    decide: oneshot::Sender<bool>,
}

/// The payment-deciding half of the bridge.
pub(crate) struct Policy {
    pub(crate) payer: Arc<dyn DynPayer>,
    pub(crate) spend: SpendLog,
    pub(crate) clock: Arc<dyn Clock>,
    /// The priced calls under way at each bot (see [`credit`](super::credit)).
    pub(crate) credit: Arc<CreditBook>,
    parked: Mutex<HashMap<String, Parked>>,
    announce: broadcast::Sender<PendingPayment>,
    /// Told when a late outcome settles a pending payment.
    settled: Notify,
}

/// How long a call waits for the late outcome of a payment its payer could not
/// confirm, within the tip wait: 30 s, the longest reconnection backoff of the host's
/// clientrpc client, so one reconnection (and the outcome's redelivery) fits.
pub(crate) const LATE_OUTCOME_WAIT: Duration = Duration::from_secs(30);

/// How often such a call looks at its payment's row meanwhile: 1 s, for a settlement
/// by the user from another process, which does not wake it.
const LATE_OUTCOME_POLL: Duration = Duration::from_secs(1);

/// A refusal: the reason, as the agent will read it after "payment not made: ".
pub(crate) type Refusal = String;

/// Asks the user about one payment where the agent is (its client's elicitation):
/// `Ok` once approved, a refusal if declined, cancelled or failed. Dropped unanswered
/// when the parked approval decides first, and dropped unpolled for an agent whose
/// [`Approver`] is the user.
pub(crate) type Ask<'a> = Pin<Box<dyn Future<Output = Result<(), Refusal>> + Send + 'a>>;

impl Policy {
    pub(crate) fn new(payer: Arc<dyn DynPayer>, spend: SpendLog, clock: Arc<dyn Clock>) -> Self {
        Self {
            payer,
            spend,
            clock,
            credit: Arc::default(),
            parked: Mutex::new(HashMap::new()),
            announce: broadcast::channel(64).0,
            settled: Notify::new(),
        }
    }

    fn parked(&self) -> MutexGuard<'_, HashMap<String, Parked>> {
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn pending(&self) -> Vec<PendingPayment> {
        let mut list: Vec<_> = self.parked().values().map(|p| p.info.clone()).collect();
        list.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        list
    }

    pub(crate) fn subscribe(&self) -> broadcast::Receiver<PendingPayment> {
        self.announce.subscribe()
    }

    pub(crate) fn decide(&self, id: &str, approve: bool) -> bool {
        match self.parked().remove(id) {
            Some(parked) => parked.decide.send(approve).is_ok(),
            None => false,
        }
    }

    /// The caps and bots that bind `caller` paying `amount` to `bot`, without the
    /// daily totals: the agent's daily cap (for an agent of `agents`) if they allow it.
    pub(crate) fn caps(
        &self,
        settings: &Settings,
        caller: &Caller,
        bot: &PeerId,
        amount: u64,
    ) -> Result<Option<u64>, Refusal> {
        if amount == 0 {
            return Err("nothing to pay".into());
        }
        let cap = settings.per_call_cap_atoms;
        if cap == 0 || amount > cap {
            return Err(format!("{amount} atoms exceeds the per-call cap ({cap})"));
        }
        let name = caller.name();
        let agent = match caller {
            Caller::Default => None,
            // Removed since the request was let in: its token is no longer valid.
            Caller::Agent(n) => Some(
                settings
                    .agent(n)
                    .ok_or_else(|| format!("agent {n:?} was removed"))?,
            ),
        };
        if let Some(agent) = agent {
            if !agent.allows_bot(&bot.to_string()) {
                return Err(format!("bot {bot} is not one of agent {name:?}'s bots"));
            }
            let cap = agent.per_call_cap_atoms;
            if cap == 0 || amount > cap {
                return Err(format!(
                    "{amount} atoms exceeds agent {name:?}'s per-call cap ({cap})"
                ));
            }
        }
        Ok(agent.map(|a| a.per_day_cap_atoms))
    }

    /// A look at the daily caps (`agent_cap`, the agent's) for `amount` more, without
    /// reserving: the reservation is the check that binds.
    pub(crate) fn first_look(
        &self,
        settings: &Settings,
        caller: &Caller,
        agent_cap: Option<u64>,
        amount: u64,
    ) -> Result<(), Refusal> {
        let now = self.clock.now();
        if let Some(cap) = agent_cap {
            let spent = self
                .spend
                .spent_today_by(now, caller.name())
                .map_err(|e| e.to_string())?;
            if !fits_daily_cap(spent, amount, cap) {
                return Err(over_cap(
                    caller,
                    settings,
                    agent_cap,
                    amount,
                    OverCap::Agent(super::OverDailyCap { spent }),
                ));
            }
        }
        let spent = self.spend.spent_today(now).map_err(|e| e.to_string())?;
        if !fits_daily_cap(spent, amount, settings.per_day_cap_atoms) {
            return Err(over_cap(
                caller,
                settings,
                agent_cap,
                amount,
                OverCap::Daily(super::OverDailyCap { spent }),
            ));
        }
        Ok(())
    }

    /// Decides and makes one `payment`, for the call of `call_key` when there is one
    /// (its spend-log row names it): the spend log row of the payment once made.
    pub(crate) async fn settle(
        &self,
        settings: &Settings,
        (caller, call_key): (&Caller, Option<&str>),
        payment: Payment<'_>,
        quoted: Option<DynamicQuote>,
        ask: Option<Ask<'_>>,
    ) -> Result<i64, Refusal> {
        let Payment {
            bot,
            tool,
            atoms: amount,
        } = payment;
        let agent_cap = self.caps(settings, caller, bot, amount)?;
        let name = caller.name();
        let daily = settings.per_day_cap_atoms;
        let over = |over: OverCap| over_cap(caller, settings, agent_cap, amount, over);
        if settings.mode == Mode::Approval {
            // Not asked about a payment a daily cap refuses anyway; `reserve_as`
            // below is the check that binds.
            self.first_look(settings, caller, agent_cap, amount)?;
            // The agent's own answer approves only where the user lets it.
            let ask = ask.filter(|_| settings.approver_of(caller) == Approver::Agent);
            self.approve(settings, name, payment, quoted, ask).await?;
        }
        let position = self.payer.position_dyn();
        let id = match self
            .spend
            .reserve_as(
                self.clock.now(),
                &Spender {
                    agent: name,
                    agent_cap,
                    call_key,
                },
                payment,
                daily,
                position,
            )
            .map_err(|e| e.to_string())?
        {
            Ok(id) => id,
            Err(refused) => return Err(over(refused)),
        };
        let wait = Duration::from_secs(settings.tip_wait_secs);
        let deadline = Instant::now() + wait;
        let paying = self.payer.pay_dyn(*bot, amount, position);
        let outcome = match tokio::time::timeout_at(deadline, paying).await {
            Ok(Ok(outcome_id)) => Ok(outcome_id),
            Ok(Err(e)) if e.is::<PaymentUnconfirmed>() => Err((e.to_string(), None, true)),
            Ok(Err(e)) => {
                let outcome_id = e.downcast_ref::<PaymentFailed>().map(|f| f.id);
                Err((e.to_string(), outcome_id, false))
            }
            Err(_) => Err((
                format!("tip not confirmed within {}s", settings.tip_wait_secs),
                None,
                true,
            )),
        };
        let recorded = match &outcome {
            Ok(outcome_id) => self.spend.settle_with(id, Ok(()), *outcome_id),
            Err((reason, outcome_id, false)) => {
                self.spend.settle_with(id, Err(reason), *outcome_id)
            }
            // Still pending: the tip may yet go through, so it keeps counting until
            // its late outcome settles it.
            Err((_, _, true)) => self.spend.unconfirm(id),
        };
        match (recorded, &outcome) {
            (Ok(true), _) | (Ok(false), Err((_, _, true))) => {}
            // The outcome stream recorded this outcome first: with this row (settled
            // already, as here), or with an older payment of the same bot and amount,
            // leaving this one pending for the next outcome (`SpendLog` module docs).
            (Ok(false), outcome) => match self.spend.unconfirm(id) {
                Ok(true) => {
                    tracing::info!(
                        id,
                        "tip outcome settled an older payment; this one stays pending"
                    );
                    // Its uncertainty is that older payment's, and dates from it.
                    let seen = match outcome {
                        Ok(seen) | Err((_, seen, _)) => *seen,
                    };
                    if let Some(seen) = seen
                        && let Err(e) = self.spend.stays_pending_for(id, seen)
                    {
                        tracing::warn!(error = %e, id, "spend log not updated");
                    }
                }
                Ok(false) => tracing::debug!(id, "payment already settled from the outcome stream"),
                Err(e) => tracing::warn!(error = %e, id, "spend log not updated"),
            },
            (Err(e), _) => tracing::warn!(error = %e, id, "spend log not updated"),
        }
        // Every outcome the rail saw by now is older than any later payment.
        if let Err(e) = self.spend.raise_floor(self.payer.position_dyn()) {
            tracing::warn!(error = %e, "spend log position not recorded");
        }
        let outcome = match outcome {
            // The payer lost sight of the tip (its connection dropped, say), which may
            // have been paid: its outcome, redelivered once the host is back, decides
            // the call rather than ending it with its credit left at the bot.
            Err((reason, _, true)) => {
                let until = deadline.min(Instant::now() + LATE_OUTCOME_WAIT);
                match self.late_settlement(id, until).await {
                    Some(Ok(())) => Ok(None),
                    Some(Err(failed)) => Err((format!("tip failed: {failed}"), None, false)),
                    None => Err((reason, None, true)),
                }
            }
            outcome => outcome,
        };
        match outcome {
            Ok(_) => {
                tracing::info!(%bot, tool, amount, agent = name, "paid");
                Ok(id)
            }
            Err((reason, _, _)) => {
                tracing::info!(%bot, tool, amount, agent = name, %reason, "payment not made");
                Err(reason)
            }
        }
    }

    /// Waits until the spend row `id`, left pending, is settled by its late outcome
    /// (or the user), until `until`: `Ok` paid, `Err` with why it failed; `None` while
    /// it is still pending.
    async fn late_settlement(&self, id: i64, until: Instant) -> Option<Result<(), String>> {
        loop {
            let settled = self.settled.notified();
            tokio::pin!(settled);
            settled.as_mut().enable();
            match self.spend.status(id) {
                Ok(Some((SpendStatus::Paid, _))) => return Some(Ok(())),
                Ok(Some((SpendStatus::Failed, err))) => {
                    return Some(Err(err.unwrap_or_else(|| "no reason given".into())));
                }
                Ok(Some((SpendStatus::Pending, _)) | None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, id, "spend log not read");
                    return None;
                }
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            // Settled here by the outcome stream; polled too, for the user's
            // `spend resolve` from another process.
            let _ = tokio::time::timeout_at(until.min(now + LATE_OUTCOME_POLL), settled).await;
        }
    }

    /// A pending payment was settled (by its late outcome): wakes the calls waiting on
    /// theirs.
    pub(crate) fn settled(&self) {
        self.settled.notify_waiters();
    }

    /// Parks the payment for the user, and asks through `ask` if given; `Ok` once
    /// approved.
    async fn approve(
        &self,
        settings: &Settings,
        agent: &str,
        payment: Payment<'_>,
        quoted: Option<DynamicQuote>,
        ask: Option<Ask<'_>>,
    ) -> Result<(), Refusal> {
        let Payment { bot, tool, atoms } = payment;
        let id = super::random_hex::<8>().map_err(|e| e.to_string())?;
        let info = PendingPayment {
            id: id.clone(),
            bot: *bot,
            tool: tool.to_owned(),
            atoms,
            created: self.clock.now(),
            agent: agent.to_owned(),
            quoted,
        };
        let (decide, decision) = oneshot::channel();
        self.parked().insert(
            id.clone(),
            Parked {
                info: info.clone(),
                decide,
            },
        );
        let _ = self.announce.send(info);
        // Removed from the queue however this ends, cancellation included.
        let _unpark = Unpark { policy: self, id };
        let wait = Duration::from_secs(settings.approval_timeout_secs);
        let parked = async {
            match decision.await {
                Ok(true) => Ok(()),
                Ok(false) | Err(_) => Err(Refusal::from("payment denied by the user")),
            }
        };
        let decided = async {
            match ask {
                Some(ask) => tokio::select! {
                    d = parked => d,
                    d = ask => d,
                },
                None => parked.await,
            }
        };
        match tokio::time::timeout(wait, decided).await {
            Ok(decided) => decided,
            Err(_) => Err(format!(
                "approval timed out after {}s",
                settings.approval_timeout_secs
            )),
        }
    }
}

/// The refusal of a payment of `amount` by `caller` that a daily cap refuses.
fn over_cap(
    caller: &Caller,
    settings: &Settings,
    agent_cap: Option<u64>,
    amount: u64,
    over: OverCap,
) -> Refusal {
    match over {
        OverCap::Daily(o) => format!(
            "{amount} atoms would exceed the daily cap ({} spent of {})",
            o.spent, settings.per_day_cap_atoms
        ),
        OverCap::Agent(o) => format!(
            "{amount} atoms would exceed agent {:?}'s daily cap ({} spent of {})",
            caller.name(),
            o.spent,
            agent_cap.unwrap_or_default()
        ),
    }
}

struct Unpark<'a> {
    policy: &'a Policy,
    id: String,
}

impl Drop for Unpark<'_> {
    fn drop(&mut self) {
        self.policy.parked().remove(&self.id);
    }
}
