//! The serving harness: the operator's tools, served over Bison Relay to allowed
//! callers who pay per call from their tipped balance.
//!
//! Build one with [`Harness::builder`], [`start`](Harness::start) it with the host's
//! [`PmSender`], then hand it every PM ([`handle_pm`](Harness::handle_pm)) and every
//! tip ([`record_tip`](Harness::record_tip)) the host receives.
//!
//! Every `tools/call` goes through, in order (the Go harness's §4.1, with its weaknesses
//! §4.10 fixed):
//!
//! 1. the allow gate, in the router, before any state exists for the peer;
//! 2. the tool lookup (a tool hidden from the caller is unknown), and the arguments'
//!    decoding into the tool's input type;
//! 3. the call-key claim: a duplicate of a call running here waits for it and gets its
//!    exact answer, refusals included; a key the ledger holds answers from there
//!    (replay, or a refusal for a key reused with another tool or other arguments);
//! 4. the rate limit (`rate limited; retry later`);
//! 5. the price (a dynamic price may fail with a message);
//! 6. the debit and its journal entry, in one ledger transaction, or a
//!    `payment_required` refusal;
//! 7. the handler, in its own task: a dropped request or a panic cannot skip step 9;
//! 8. the framing: an answer over [`max_answer_bytes`] (what one message carries) is
//!    replaced by a refusal saying so, and the call is refunded;
//! 9. the outcome: `complete` (kept for replay when keyed) or, when the handler failed
//!    or its answer did not fit, `refund` with the refusal as the key's answer.
//!
//! Refusals before step 7 release the key, so a funded retry runs. A process killed
//! between steps 6 and 9 leaves the charge pending, and the ledger refunds it when the
//! next harness opens it; that harness, once started, answers the caller's request (on
//! the session and request id kept with the charge) with `CALL_INTERRUPTED`.

mod builder;
mod call;
mod fit;
mod interrupted;
mod session;
mod stop;
pub use builder::{DEFAULT_PARK_AFTER, HarnessBuilder, LISTENED_PARK_AFTER};
pub use call::ANSWER_TOO_LARGE;
pub use fit::{ANSWER_WRAPPER_BYTES, max_answer_bytes, max_message_bytes};
pub use interrupted::INTERRUPTED_NOTICE;
use session::Session;
pub use stop::{FREE_STOPPED_NOTICE, STOPPED_NOTICE, STOPPING};

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

use brmcp_adapters::{AdapterError, BoxError, PeerId, PmSender, Router, RouterConfig};
use rmcp::Peer;
use rmcp::model::{CallToolResult, ServerConfig, Tool};
use rmcp::service::RoleServer;

use super::Clock;
use super::billing::{Billing, BillingError, Charge, Tip, TipOutcome};
use super::calls::InFlight;
use super::catalog::Catalog;
use super::chat::{AutoReply, Throttle};
use super::dynamic::DynamicTools;
use super::gate::AllowGate;
use super::ledger::{Ledger, LedgerError};
use super::listeners::{Changed, Listeners};
use super::rate_limit::RateLimiter;
use super::tools::ToolSpec;

/// Which tools a caller sees: `(caller, tool name) -> visible`. A hidden tool is absent
/// from the caller's `tools/list` and unknown to its `tools/call`. Asked per request,
/// so nothing is kept per caller.
pub type Visibility = Arc<dyn Fn(&PeerId, &str) -> bool + Send + Sync>;

/// Receives every plain-chat PM: `(sender, text)`. It runs on the host's task that
/// called [`Harness::handle_pm`]: return quickly.
pub type ChatHook = Arc<dyn Fn(PeerId, &str) + Send + Sync>;

/// Receives every newly recorded tip (not redeliveries).
pub type TipHook = Arc<dyn Fn(TipEvent) + Send + Sync>;

/// A tip the harness recorded for the first time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct TipEvent {
    /// The tip's sequence id.
    pub seq: u64,
    /// Who tipped.
    pub caller: PeerId,
    /// The amount, in milliatoms.
    pub matoms: u64,
    /// Whether it was credited (the tipper passes the allow gate).
    pub credited: bool,
}

/// What the harness has done since it was built: counts of `tools/call` outcomes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HarnessStats {
    /// `tools/call` requests for a known tool with valid arguments.
    pub calls: u64,
    /// Handler runs.
    pub runs: u64,
    /// Handler runs that failed (an error or a panic); charged ones were refunded.
    pub handler_errors: u64,
    /// Duplicates that waited for their original, running here.
    pub waited: u64,
    /// Duplicates answered with a finished call's kept outcome.
    pub replayed: u64,
    /// Calls refused by the rate limit.
    pub rate_limited: u64,
    /// Calls refused with `payment_required`.
    pub payment_required: u64,
    /// Calls refused because their key was used for another call.
    pub key_conflicts: u64,
    /// Answers over [`max_answer_bytes`] replaced by a refusal (charged ones refunded).
    pub answers_too_large: u64,
    /// Callers told (`CALL_INTERRUPTED`) that a paid call of theirs was interrupted by a
    /// restart and refunded.
    pub interrupted_told: u64,
}

#[derive(Debug, Default)]
struct Counters {
    calls: AtomicU64,
    runs: AtomicU64,
    handler_errors: AtomicU64,
    waited: AtomicU64,
    replayed: AtomicU64,
    rate_limited: AtomicU64,
    payment_required: AtomicU64,
    key_conflicts: AtomicU64,
    answers_too_large: AtomicU64,
    interrupted_told: AtomicU64,
}

impl Counters {
    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> HarnessStats {
        HarnessStats {
            calls: self.calls.load(Relaxed),
            runs: self.runs.load(Relaxed),
            handler_errors: self.handler_errors.load(Relaxed),
            waited: self.waited.load(Relaxed),
            replayed: self.replayed.load(Relaxed),
            rate_limited: self.rate_limited.load(Relaxed),
            payment_required: self.payment_required.load(Relaxed),
            key_conflicts: self.key_conflicts.load(Relaxed),
            answers_too_large: self.answers_too_large.load(Relaxed),
            interrupted_told: self.interrupted_told.load(Relaxed),
        }
    }

    /// Counts what a non-`Run` answer of the store says.
    fn count_answer(&self, charge: &Charge) {
        match charge {
            Charge::Replay(_) | Charge::OutcomeNotRetained => Self::bump(&self.replayed),
            Charge::Insufficient(_) => Self::bump(&self.payment_required),
            Charge::KeyConflict(_) => Self::bump(&self.key_conflicts),
            Charge::InProgress | Charge::Run(_) => {}
        }
    }
}

/// What a graceful [`Harness::stop`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stopped {
    /// Charged calls it stopped and refunded.
    pub calls: usize,
    /// Of those, the callers answered `CALL_INTERRUPTED` before the sessions closed;
    /// the others are told by the next start.
    pub told: usize,
    /// Free calls without a call key it stopped whose callers were answered
    /// `CALL_INTERRUPTED` (nothing to refund, and not told later).
    pub free_told: usize,
}

/// Why the harness could not be built or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// Neither a data directory (for the built-in ledger) nor a [`Billing`] store.
    #[error("harness: needs a data directory for the built-in ledger or a billing store")]
    NoStore,
    /// The built-in ledger could not be opened.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The billing store failed.
    #[error(transparent)]
    Billing(#[from] BillingError),
    /// A tool's input type does not describe a JSON object.
    #[error("harness: tool {name:?}: {reason}")]
    BadTool {
        /// The tool.
        name: String,
        /// What is wrong with its schema.
        reason: String,
    },
    /// Two tools share a name.
    #[error("harness: two tools are named {0:?}")]
    DuplicateTool(String),
    /// [`Harness::start`] was called twice.
    #[error("harness: already started")]
    AlreadyStarted,
    /// [`Harness::handle_pm`] before [`Harness::start`].
    #[error("harness: not started")]
    NotStarted,
    /// The router refused the PM.
    #[error("harness: {0}")]
    Router(#[from] AdapterError),
    /// A billing call's blocking task died (it panicked).
    #[error("harness: billing task failed: {0}")]
    Task(String),
}

/// The serving harness. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Harness {
    shared: Arc<Shared>,
}

impl fmt::Debug for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Harness")
            .field("tools", &self.shared.order)
            .field("gate", &self.shared.gate)
            .finish_non_exhaustive()
    }
}

struct Shared {
    billing: Arc<dyn Billing>,
    ledger: Option<Arc<Ledger>>,
    refunded_at_open: usize,
    gate: AllowGate,
    limiter: RateLimiter,
    visibility: Option<Visibility>,
    tools: HashMap<Arc<str>, Arc<ToolSpec>>,
    /// Tool names in registration order, the order of `tools/list`.
    order: Vec<Arc<str>>,
    dynamic: Option<DynamicTools>,
    catalog: Option<Arc<dyn Catalog>>,
    /// Told when the dynamic tools or the catalog change.
    listeners: Arc<Listeners>,
    in_flight: Arc<InFlight<CallToolResult>>,
    /// The duplicates waiting for their original, for an explicit cancellation.
    waiting: crate::server::calls::Waiting,
    /// The charged calls whose handlers run, for a graceful stop.
    running: stop::RunningCalls,
    clock: Arc<dyn Clock>,
    chat_hook: Option<ChatHook>,
    auto_reply: Option<(Throttle, AutoReply)>,
    tip_hook: Option<TipHook>,
    router_config: RouterConfig,
    info: ServerConfig,
    counters: Counters,
    started: OnceLock<Started>,
}

struct Started {
    router: Router,
    chat: Arc<dyn ChatSender>,
}

impl Harness {
    /// A builder with no tools, nobody allowed, 30 calls per minute.
    pub fn builder() -> HarnessBuilder {
        HarnessBuilder::new()
    }

    /// Starts serving: a router sending through `sender`, gated by the allow gate,
    /// serving every session a peer opens with the harness's tools on behalf of that
    /// peer. Returns the router (the host may also dial through it). Warns when the
    /// allowlist is empty. Answers the callers of paid calls a dead process was running
    /// (refunded when the ledger was opened) with `CALL_INTERRUPTED` on their sessions.
    ///
    /// # Errors
    ///
    /// [`HarnessError::AlreadyStarted`].
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(&self, sender: impl PmSender) -> Result<Router, HarnessError> {
        if self.shared.started.get().is_some() {
            return Err(HarnessError::AlreadyStarted);
        }
        let sender = Arc::new(sender);
        let config = self
            .shared
            .router_config
            .clone()
            .with_authorizer(self.shared.gate.clone());
        let router = Router::new(SharedSender(sender.clone()), config);
        let started = Started {
            router: router.clone(),
            chat: sender,
        };
        if self.shared.started.set(started).is_err() {
            router.close();
            return Err(HarnessError::AlreadyStarted);
        }
        if self.shared.gate.refuses_everyone() {
            tracing::warn!("the allowlist (allowed_uids) is empty: every caller is refused");
        }
        let listeners = &self.shared.listeners;
        if let Some(dynamic) = &self.shared.dynamic {
            listeners.notify_on(dynamic.subscribe(), Changed::Tools);
        }
        if let Some(catalog) = &self.shared.catalog {
            listeners.notify_on(catalog.changes(), Changed::Catalog(catalog.offers()));
        }
        // Weak: the router's acceptor must not keep the harness (which holds the
        // router) alive.
        let shared = Arc::downgrade(&self.shared);
        router.serve_sessions(move |peer: &PeerId, sid| Session {
            shared: shared.clone(),
            caller: *peer,
            sid,
        });
        // The refunds of calls a dead process was running are durable (opening the
        // ledger committed them): their callers may be told now.
        tokio::spawn(interrupted::tell_all(Arc::downgrade(&self.shared)));
        Ok(router)
    }

    /// Hands the harness one PM the host received from `from`. Plain chat goes to the
    /// chat hook (and may be auto-answered); everything else to the router.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NotStarted`], or [`HarnessError::Router`] once the router has
    /// stopped.
    pub async fn handle_pm(
        &self,
        from: PeerId,
        body: impl Into<String>,
    ) -> Result<(), HarnessError> {
        let started = self.shared.started.get().ok_or(HarnessError::NotStarted)?;
        let body = body.into();
        match brmcp_adapters::wire::parse(&body) {
            Err(e) if e.is_foreign() => {
                self.on_chat(started, from, &body);
                Ok(())
            }
            _ => Ok(started.router.handle_pm(from, body).await?),
        }
    }

    fn on_chat(&self, started: &Started, from: PeerId, body: &str) {
        if let Some(hook) = &self.shared.chat_hook {
            hook(from, body);
        }
        if let Some((throttle, reply)) = &self.shared.auto_reply
            && throttle.try_reply(&from, self.shared.clock.since_epoch())
        {
            let chat = started.chat.clone();
            let text = reply.text.clone();
            tokio::spawn(async move {
                if let Err(e) = chat.send_chat(from, text).await {
                    tracing::debug!(peer = %from, error = %e, "auto-reply not sent");
                }
            });
        }
    }

    /// Records a tip the host received and credits it if the tipper passes the allow
    /// gate and its sequence id is new; then tells the tip hook (not for a
    /// redelivery). Acknowledge the tip to the host only after this returns `Ok`: the
    /// credit and the sequence id commit together, so a redelivery after a crash is
    /// recognised and not credited twice.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Ledger`] (do not acknowledge: the redelivery is tried again), or
    /// [`HarnessError::Task`].
    pub async fn record_tip(&self, tip: Tip) -> Result<TipOutcome, HarnessError> {
        let allowed = self.shared.gate.allows(&tip.caller);
        let now = self.shared.clock.now();
        let outcome = self
            .shared
            .blocking(move |b| b.record_tip(&tip, allowed, now))
            .await?;
        if outcome != TipOutcome::Duplicate
            && let Some(hook) = &self.shared.tip_hook
        {
            hook(TipEvent {
                seq: tip.seq,
                caller: tip.caller,
                matoms: tip.matoms,
                credited: outcome == TipOutcome::Credited,
            });
        }
        Ok(outcome)
    }

    /// A caller's balance in milliatoms.
    ///
    /// # Errors
    ///
    /// [`HarnessError::Ledger`] or [`HarnessError::Task`].
    pub async fn balance_matoms(&self, caller: PeerId) -> Result<u64, HarnessError> {
        self.shared
            .blocking(move |b| b.balance_matoms(&caller))
            .await
    }

    /// Whether `peer` passes the allow gate.
    pub fn allows(&self, peer: &PeerId) -> bool {
        self.shared.gate.allows(peer)
    }

    /// The allow gate.
    pub fn gate(&self) -> &AllowGate {
        &self.shared.gate
    }

    /// The billing store.
    pub fn billing(&self) -> &Arc<dyn Billing> {
        &self.shared.billing
    }

    /// The built-in ledger, for the operator's calls (balances, journal, manual credit
    /// and refund); `None` with another billing store.
    pub fn ledger(&self) -> Option<&Arc<Ledger>> {
        self.shared.ledger.as_ref()
    }

    /// Calls a dead process left pending that opening the ledger refunded.
    pub fn refunded_at_open(&self) -> usize {
        self.shared.refunded_at_open
    }

    /// The tools, as `tools/list` shows them to `caller`.
    pub fn tools_for(&self, caller: &PeerId) -> Vec<Tool> {
        self.shared.visible_tools(caller)
    }

    /// The per-caller rate limit (its rate may be changed while serving).
    pub fn rate_limiter(&self) -> &RateLimiter {
        &self.shared.limiter
    }

    /// Counts of `tools/call` outcomes so far.
    pub fn stats(&self) -> HarnessStats {
        self.shared.counters.snapshot()
    }

    /// The router, once started.
    pub fn router(&self) -> Option<&Router> {
        self.shared.started.get().map(|s| &s.router)
    }

    /// A graceful stop: no call starts from now on; every call still running is
    /// stopped, a charged one refunded, and its caller answered `CALL_INTERRUPTED`
    /// (waiting up to `wait` for those answers to be sent; a caller not told by then is
    /// told by the next start, as after a crash); then the router and every session
    /// close.
    pub async fn stop(&self, wait: std::time::Duration) -> Stopped {
        let (calls, told, free_told) = self.shared.clone().stop(wait).await;
        self.close();
        Stopped {
            calls,
            told,
            free_told,
        }
    }

    /// Closes the router and every session. Calls already running finish and record
    /// their outcome, but their answers are not sent: [`stop`](Self::stop) answers
    /// them first.
    pub fn close(&self) {
        if let Some(started) = self.shared.started.get() {
            started.router.close();
        }
    }
}

impl Shared {
    fn visible(&self, caller: &PeerId, tool: &str) -> bool {
        self.visibility.as_ref().is_none_or(|v| v(caller, tool))
    }

    fn visible_tools(&self, caller: &PeerId) -> Vec<Tool> {
        let fixed = self
            .order
            .iter()
            .filter_map(|name| self.tools.get(name).map(|spec| (name, spec.tool.clone())));
        let dynamic = self.dynamic.iter().flat_map(DynamicTools::definitions);
        let dynamic = dynamic.filter(|(name, _)| !self.tools.contains_key(name));
        fixed
            .map(|(name, tool)| (name.clone(), tool))
            .chain(dynamic)
            .filter(|(name, _)| self.visible(caller, name))
            .map(|(_, tool)| tool)
            .collect()
    }

    fn visible_tool(&self, caller: &PeerId, name: &str) -> Option<(Arc<str>, Arc<ToolSpec>)> {
        self.tools
            .get_key_value(name)
            .map(|(name, spec)| (name.clone(), spec.clone()))
            .or_else(|| self.dynamic.as_ref().and_then(|d| d.get(name)))
            .filter(|(name, _)| self.visible(caller, name))
    }

    /// Keeps `peer` to be told when the dynamic tools or the catalog change.
    fn listen(&self, caller: PeerId, peer: &Peer<RoleServer>) {
        if self.dynamic.is_some() || self.catalog.is_some() {
            self.listeners.listen(caller, peer);
        }
    }

    /// `done` if the store made the call at once (a `try_` call), else `blocking` on
    /// the blocking pool.
    async fn or_blocking<T: Send + 'static>(
        &self,
        done: Option<Result<T, BillingError>>,
        blocking: impl FnOnce(&dyn Billing) -> Result<T, BillingError> + Send + 'static,
    ) -> Result<T, HarnessError> {
        match done {
            Some(done) => done.map_err(HarnessError::from),
            None => self.blocking(blocking).await,
        }
    }

    /// Runs one billing call on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Billing) -> Result<T, BillingError> + Send + 'static,
    ) -> Result<T, HarnessError> {
        let billing = self.billing.clone();
        tokio::task::spawn_blocking(move || f(&*billing))
            .await
            .map_err(|e| HarnessError::Task(e.to_string()))?
            .map_err(HarnessError::from)
    }
}
/// Object-safe sending of one chat PM.
trait ChatSender: Send + Sync {
    fn send_chat(
        &self,
        to: PeerId,
        body: String,
    ) -> Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + '_>>;
}

impl<S: PmSender> ChatSender for S {
    fn send_chat(
        &self,
        to: PeerId,
        body: String,
    ) -> Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + '_>> {
        Box::pin(async move { self.send_pm(&to, body).await.map_err(BoxError::from) })
    }
}

/// The host's sender, shared by the router and chat replies.
struct SharedSender<S>(Arc<S>);

impl<S: PmSender> PmSender for SharedSender<S> {
    type Error = S::Error;

    fn send_pm(
        &self,
        to: &PeerId,
        body: String,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.0.send_pm(to, body)
    }
}
