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
//! 7. the handler, in its own task: a dropped request or a panic cannot skip step 8;
//! 8. the outcome: `complete` (kept for replay when keyed) or, when the handler failed,
//!    `refund` with the error as the key's answer.
//!
//! Refusals before step 7 release the key, so a funded retry runs. A process killed
//! between steps 6 and 8 leaves the charge pending, and the ledger refunds it when the
//! next harness opens it.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};

use brmcp_adapters::{AdapterError, BoxError, PeerId, PmSender, Router, RouterConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, PromptsCapability,
    ReadResourceRequestParams, ReadResourceResponse, ResourcesCapability, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData, Peer, ServerHandler};

use super::billing::{Billing, CallId, CallRequest, Charge, Keyed, Tip, TipOutcome};
use super::call_key::{ArgsHash, CALL_KEY_META, CallKey};
use super::calls::{Claim, InFlight};
use super::catalog::Catalog;
use super::chat::{AutoReply, Throttle};
use super::clock::{Clock, SystemClock};
use super::config::ServeConfig;
use super::dynamic::DynamicTools;
use super::gate::AllowGate;
use super::ledger::{Ledger, LedgerError};
use super::listeners::{Changed, Listeners};
use super::rate_limit::{RATE_LIMITED, RateLimiter};
use super::tools::{CallContext, PreparedCall, ToolSpec};

/// The longest handler error message kept in a refund's reason, in bytes.
const MAX_REASON_LEN: usize = 256;

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

/// Why the harness could not be built or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HarnessError {
    /// Neither a data directory (for the built-in ledger) nor a [`Billing`] store.
    #[error("harness: needs a data directory for the built-in ledger or a billing store")]
    NoStore,
    /// The ledger or billing store failed.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
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

/// Builds a [`Harness`].
#[must_use]
pub struct HarnessBuilder {
    data_dir: Option<PathBuf>,
    billing: Option<Arc<dyn Billing>>,
    gate: AllowGate,
    calls_per_minute: u32,
    visibility: Option<Visibility>,
    tools: Vec<ToolSpec>,
    dynamic: Option<DynamicTools>,
    catalog: Option<Arc<dyn Catalog>>,
    chat_hook: Option<ChatHook>,
    auto_reply: Option<AutoReply>,
    tip_hook: Option<TipHook>,
    clock: Arc<dyn Clock>,
    router_config: RouterConfig,
    info: Implementation,
    instructions: Option<String>,
}

impl fmt::Debug for HarnessBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessBuilder")
            .field("data_dir", &self.data_dir)
            .field("gate", &self.gate)
            .field("calls_per_minute", &self.calls_per_minute)
            .field("tools", &self.tools)
            .finish_non_exhaustive()
    }
}

impl HarnessBuilder {
    fn new() -> Self {
        Self {
            data_dir: None,
            billing: None,
            gate: AllowGate::list([]),
            calls_per_minute: 0,
            visibility: None,
            tools: Vec::new(),
            dynamic: None,
            catalog: None,
            chat_hook: None,
            auto_reply: None,
            tip_hook: None,
            clock: Arc::new(SystemClock),
            router_config: RouterConfig::server(),
            info: Implementation::new("brmcp", env!("CARGO_PKG_VERSION")),
            instructions: None,
        }
    }

    /// The data directory of the built-in SQLite [`Ledger`] (created if missing).
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// Another [`Billing`] store instead of the built-in ledger; no ledger is opened.
    pub fn billing(mut self, billing: Arc<dyn Billing>) -> Self {
        self.billing = Some(billing);
        self
    }

    /// The allowed callers from a settings file, and its rate limit.
    pub fn config(self, config: &ServeConfig) -> Self {
        self.allowed_uids(config.allowed_uids.iter().copied())
            .calls_per_minute(config.calls_per_minute)
    }

    /// Allow exactly these callers (the default allows nobody).
    pub fn allowed_uids(mut self, uids: impl IntoIterator<Item = PeerId>) -> Self {
        self.gate = AllowGate::list(uids);
        self
    }

    /// Allow whoever `allow` says, instead of a list.
    pub fn allow(mut self, allow: impl Fn(&PeerId) -> bool + Send + Sync + 'static) -> Self {
        self.gate = AllowGate::predicate(allow);
        self
    }

    /// Calls per minute per caller; 0 means the default (30).
    pub fn calls_per_minute(mut self, calls: u32) -> Self {
        self.calls_per_minute = calls;
        self
    }

    /// Which tools each caller sees (default: all).
    pub fn visibility(
        mut self,
        visible: impl Fn(&PeerId, &str) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.visibility = Some(Arc::new(visible));
        self
    }

    /// Adds a tool.
    pub fn tool(mut self, tool: ToolSpec) -> Self {
        self.tools.push(tool);
        self
    }

    /// Serves these run-time tools too, after the fixed ones (a fixed tool's name
    /// wins), and announces `tools.listChanged`: callers that listed the tools are
    /// notified whenever the set changes.
    pub fn dynamic_tools(mut self, tools: DynamicTools) -> Self {
        self.dynamic = Some(tools);
        self
    }

    /// Serves the resources and prompts of `catalog` (free, to the callers the gate
    /// admits, each request counted by the rate limit).
    pub fn catalog(mut self, catalog: Arc<dyn Catalog>) -> Self {
        self.catalog = Some(catalog);
        self
    }

    /// Receives plain-chat PMs.
    pub fn on_chat(mut self, hook: impl Fn(PeerId, &str) + Send + Sync + 'static) -> Self {
        self.chat_hook = Some(Arc::new(hook));
        self
    }

    /// Answers plain chat automatically, at most once per sender per interval.
    pub fn auto_reply(mut self, reply: AutoReply) -> Self {
        self.auto_reply = Some(reply);
        self
    }

    /// Receives every newly recorded tip.
    pub fn on_tip(mut self, hook: impl Fn(TipEvent) + Send + Sync + 'static) -> Self {
        self.tip_hook = Some(Arc::new(hook));
        self
    }

    /// The clock for rate limits, replay windows and the auto-reply throttle (default:
    /// the system clock).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The router's settings (default [`RouterConfig::server`]); its authorizer is
    /// replaced by the harness's allow gate.
    pub fn router_config(mut self, config: RouterConfig) -> Self {
        self.router_config = config;
        self
    }

    /// The name and version the server announces (default `brmcp` and this crate's
    /// version).
    pub fn server_info(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.info = Implementation::new(name, version);
        self
    }

    /// Instructions the server announces to clients.
    pub fn instructions(mut self, text: impl Into<String>) -> Self {
        self.instructions = Some(text.into());
        self
    }

    /// Opens the ledger (refunding calls a dead process left pending) unless a billing
    /// store was given, and checks the tools.
    ///
    /// # Errors
    ///
    /// [`HarnessError::NoStore`], [`HarnessError::Ledger`] (the ledger cannot be
    /// opened: in use, corrupt, not a ledger), [`HarnessError::BadTool`],
    /// [`HarnessError::DuplicateTool`].
    pub fn build(self) -> Result<Harness, HarnessError> {
        let mut tools = HashMap::new();
        let mut order = Vec::new();
        for spec in self.tools {
            if let Some(reason) = &spec.schema_error {
                return Err(HarnessError::BadTool {
                    name: spec.name().to_owned(),
                    reason: reason.clone(),
                });
            }
            let name: Arc<str> = spec.name().into();
            if tools.contains_key(&name) {
                return Err(HarnessError::DuplicateTool(name.to_string()));
            }
            order.push(name.clone());
            tools.insert(name, Arc::new(spec));
        }
        let (billing, ledger, refunded_at_open) = match (self.billing, self.data_dir) {
            (Some(billing), _) => (billing, None, 0),
            (None, Some(dir)) => {
                let opened = Ledger::open(&dir, self.clock.unix())?;
                if opened.refunded > 0 {
                    tracing::info!(
                        refunded = opened.refunded,
                        "refunded calls interrupted by the last shutdown"
                    );
                }
                let ledger = Arc::new(opened.ledger);
                (
                    ledger.clone() as Arc<dyn Billing>,
                    Some(ledger),
                    opened.refunded,
                )
            }
            (None, None) => return Err(HarnessError::NoStore),
        };
        let mut capabilities = ServerCapabilities::builder().enable_tools().build();
        if self.dynamic.is_some()
            && let Some(tools) = capabilities.tools.as_mut()
        {
            tools.list_changed = Some(true);
        }
        let (resources, prompts) = self.catalog.as_ref().map_or((false, false), |c| c.offers());
        if resources {
            let mut resources = ResourcesCapability::default();
            resources.list_changed = Some(true);
            capabilities.resources = Some(resources);
        }
        if prompts {
            let mut prompts = PromptsCapability::default();
            prompts.list_changed = Some(true);
            capabilities.prompts = Some(prompts);
        }
        let mut info = ServerConfig::new(capabilities).with_server_info(self.info);
        if let Some(text) = self.instructions {
            info = info.with_instructions(text);
        }
        let throttle = self
            .auto_reply
            .map(|reply| (Throttle::new(reply.interval), reply));
        Ok(Harness {
            shared: Arc::new(Shared {
                billing,
                ledger,
                refunded_at_open,
                gate: self.gate,
                limiter: RateLimiter::new(self.calls_per_minute),
                visibility: self.visibility,
                tools,
                order,
                dynamic: self.dynamic,
                catalog: self.catalog,
                listeners: Arc::default(),
                in_flight: InFlight::new(),
                clock: self.clock,
                chat_hook: self.chat_hook,
                auto_reply: throttle,
                tip_hook: self.tip_hook,
                router_config: self.router_config,
                info,
                counters: Counters::default(),
                started: OnceLock::new(),
            }),
        })
    }
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
    /// allowlist is empty.
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
        router.serve(move |peer: &PeerId| Session {
            shared: shared.clone(),
            caller: *peer,
        });
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
        let now = self.shared.clock.unix();
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

    /// Closes the router and every session. Calls already running finish and record
    /// their outcome.
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

    /// Runs one billing call on the blocking pool.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn Billing) -> Result<T, LedgerError> + Send + 'static,
    ) -> Result<T, HarnessError> {
        let billing = self.billing.clone();
        tokio::task::spawn_blocking(move || f(&*billing))
            .await
            .map_err(|e| HarnessError::Task(e.to_string()))?
            .map_err(HarnessError::from)
    }

    /// One `tools/call` after lookup and argument decoding: steps 3 to 8.
    async fn call(
        self: Arc<Self>,
        call: Call,
        prepared: Box<dyn PreparedCall>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let owner = match &call.keyed {
            None => None,
            Some((key, args)) => match self.in_flight.claim(call.caller, key, &call.tool, *args) {
                Claim::Conflict(conflict) => {
                    Counters::bump(&self.counters.key_conflicts);
                    return refusal(conflict.to_string());
                }
                Claim::Wait(waiter) => {
                    Counters::bump(&self.counters.waited);
                    return waiter.answer().await.unwrap_or_else(|| {
                        refusal("the original call with this key failed; retry")
                    });
                }
                Claim::Owner(owner) => Some(owner),
            },
        };
        // Its own task: the request may be dropped (cancelled, session closed), but the
        // charge must still be completed or refunded and duplicates answered.
        let task = tokio::spawn(async move {
            let answer = self.run(call, prepared, request).await;
            if let Some(owner) = owner {
                owner.finish(answer.clone());
            }
            answer
        });
        task.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "tool call task failed");
            refusal("internal error")
        })
    }

    /// Steps 3 (the ledger's side) to 8, for the owner of the call's key.
    async fn run(
        &self,
        call: Call,
        prepared: Box<dyn PreparedCall>,
        request: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let Call {
            caller,
            tool,
            keyed,
        } = call;
        if let Some((key, args)) = &keyed {
            let (key, args, name, now) = (key.clone(), *args, tool.clone(), self.clock.unix());
            let held = self
                .blocking(move |b| b.held(&caller, &name, Keyed { key: &key, args }, now))
                .await;
            match held {
                Ok(None) => {}
                Ok(Some(answer)) => return self.answer(answer, &tool),
                Err(e) => return store_failure(&e),
            }
        }
        if !self.limiter.try_take(&caller, self.clock.since_epoch()) {
            Counters::bump(&self.counters.rate_limited);
            return refusal(RATE_LIMITED);
        }
        let price_atoms = match prepared.price(&caller) {
            Ok(price) => price,
            Err(message) => return refusal(message),
        };
        let charged = if price_atoms == 0 && keyed.is_none() {
            None
        } else {
            let (name, key, now) = (tool.clone(), keyed.clone(), self.clock.unix());
            let charge = self
                .blocking(move |b| {
                    let request = CallRequest {
                        caller,
                        tool: &name,
                        price_atoms,
                        keyed: key.as_ref().map(|(key, args)| Keyed { key, args: *args }),
                    };
                    b.charge(&request, now)
                })
                .await;
            match charge {
                Ok(Charge::Run(id)) => Some(id),
                Ok(answer) => return self.answer(answer, &tool),
                Err(e) => return store_failure(&e),
            }
        };

        let context = CallContext {
            caller,
            tool: tool.clone(),
            price_atoms,
            call_key: keyed.map(|(key, _)| key),
            request,
        };
        // Its own task, so a panicking handler is an error answer, not a lost charge.
        Counters::bump(&self.counters.runs);
        let outcome = match tokio::spawn(prepared.run(context)).await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) => Err(e.message().to_owned()),
            Err(e) => {
                tracing::error!(%tool, error = %e, "tool handler panicked");
                Err("tool failed".to_owned())
            }
        };
        match outcome {
            Ok(result) => {
                if let Some(id) = charged {
                    self.finish(id, &result, None).await;
                }
                result
            }
            Err(message) => {
                Counters::bump(&self.counters.handler_errors);
                let result = refusal(message.clone());
                if let Some(id) = charged {
                    self.finish(id, &result, Some(reason(&message))).await;
                }
                result
            }
        }
    }

    /// The result of a call the store answered without a run, counted.
    fn answer(&self, charge: Charge, tool: &str) -> CallToolResult {
        self.counters.count_answer(&charge);
        answer_for(charge, tool)
    }

    /// Completes (no `refund_reason`) or refunds a charged call, keeping `result` as its
    /// key's answer.
    async fn finish(&self, id: CallId, result: &CallToolResult, refund_reason: Option<String>) {
        let outcome = match serde_json::to_string(result) {
            Ok(json) => json,
            Err(e) => {
                // Not reachable for rmcp's types; the call stays pending and is refunded
                // on the next start rather than replaying something unreadable.
                tracing::error!(call = %id, error = %e, "tool result does not serialize");
                return;
            }
        };
        let now = self.clock.unix();
        let done = self
            .blocking(move |b| match refund_reason {
                None => b.complete(id, &outcome, now),
                Some(reason) => b.refund(id, &reason, Some(&outcome), now),
            })
            .await;
        if let Err(e) = done {
            // The call stays pending in the store and is refunded on the next start.
            tracing::error!(call = %id, error = %e, "call outcome not recorded");
        }
    }
}

/// Who calls which tool, with which key.
struct Call {
    caller: PeerId,
    tool: Arc<str>,
    keyed: Option<(CallKey, ArgsHash)>,
}

/// A tool error result with one text content.
fn refusal(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// The answer for anything [`Billing::charge`] or [`Billing::held`] says other than
/// `Run`.
fn answer_for(charge: Charge, tool: &str) -> CallToolResult {
    match charge {
        Charge::Replay(outcome) => serde_json::from_str(&outcome).unwrap_or_else(|e| {
            tracing::error!(error = %e, "stored outcome does not parse");
            refusal("duplicate call: stored outcome unreadable")
        }),
        Charge::Insufficient(shortfall) => refusal(shortfall.payment_required_json(tool)),
        Charge::OutcomeNotRetained => refusal(
            "duplicate call: outcome not retained (too large, or dropped by the per-caller bound)",
        ),
        Charge::InProgress => refusal("duplicate call: still in progress; retry later"),
        Charge::KeyConflict(conflict) => refusal(conflict.to_string()),
        Charge::Run(id) => {
            // Never passed here; a charge without a handler run would stay pending.
            tracing::error!(call = %id, "charge answered without a run");
            refusal("internal error")
        }
    }
}

fn store_failure(e: &HarnessError) -> CallToolResult {
    tracing::error!(error = %e, "billing store failed");
    refusal("server error: billing unavailable; retry later")
}

/// A refund reason: the handler's message, cut to [`MAX_REASON_LEN`] bytes.
fn reason(message: &str) -> String {
    let mut end = message.len().min(MAX_REASON_LEN);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("handler error: {}", &message[..end])
}

/// One session: an rmcp server on behalf of the peer that opened it.
struct Session {
    shared: Weak<Shared>,
    caller: PeerId,
}

impl Session {
    fn shared(&self) -> Result<Arc<Shared>, ErrorData> {
        self.shared
            .upgrade()
            .ok_or_else(|| ErrorData::internal_error("server shutting down", None))
    }

    /// The catalog for one request of the part `offered` selects: method not found
    /// when it is not offered, refused by the rate limit like a call.
    fn catalog(
        &self,
        context: &RequestContext<RoleServer>,
        offered: impl Fn((bool, bool)) -> bool,
    ) -> Result<Arc<dyn Catalog>, ErrorData> {
        let shared = self.shared()?;
        let Some(catalog) = shared.catalog.clone().filter(|c| offered(c.offers())) else {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "not offered by this server",
                None,
            ));
        };
        shared.listen(self.caller, &context.peer);
        if !shared
            .limiter
            .try_take(&self.caller, shared.clock.since_epoch())
        {
            Counters::bump(&shared.counters.rate_limited);
            return Err(ErrorData::invalid_request(RATE_LIMITED, None));
        }
        Ok(catalog)
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        self.shared
            .upgrade()
            .map(|s| s.info.clone())
            .unwrap_or_default()
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let shared = self.shared()?;
        shared.listen(self.caller, &context.peer);
        Ok(ListToolsResult::with_all_items(
            shared.visible_tools(&self.caller),
        ))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let catalog = self.catalog(&context, |(resources, _)| resources)?;
        Ok(ListResourcesResult::with_all_items(
            catalog.list_resources().await?,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let catalog = self.catalog(&context, |(resources, _)| resources)?;
        Ok(ListResourceTemplatesResult::with_all_items(
            catalog.list_resource_templates().await?,
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let catalog = self.catalog(&context, |(resources, _)| resources)?;
        Ok(catalog.read_resource(request).await?.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let catalog = self.catalog(&context, |(_, prompts)| prompts)?;
        Ok(ListPromptsResult::with_all_items(
            catalog.list_prompts().await?,
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let catalog = self.catalog(&context, |(_, prompts)| prompts)?;
        Ok(catalog.get_prompt(request).await?.into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(shared) = self.shared() {
            shared.listen(self.caller, &context.peer);
        }
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let shared = self.shared.upgrade()?;
        shared
            .visible_tool(&self.caller, name)
            .map(|(_, spec)| spec.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let shared = self.shared()?;
        let Some((tool, spec)) = shared.visible_tool(&self.caller, &request.name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        };
        // A key that is not a string of 8 to 128 bytes is ignored (WIRE.md §10).
        let key = context
            .meta
            .get(CALL_KEY_META)
            .or_else(|| request.meta.as_ref().and_then(|m| m.get(CALL_KEY_META)))
            .and_then(serde_json::Value::as_str)
            .and_then(|key| CallKey::new(key).ok());
        let keyed = key.map(|key| (key, ArgsHash::of_arguments(request.arguments.as_ref())));
        let prepared = match spec.prepare(request.arguments) {
            Ok(prepared) => prepared,
            Err(message) => return Ok(refusal(message).into()),
        };
        Counters::bump(&shared.counters.calls);
        let (started, price) = (std::time::Instant::now(), prepared.price(&self.caller));
        let call = Call {
            caller: self.caller,
            tool,
            keyed,
        };
        let name = call.tool.clone();
        let result = shared.call(call, prepared, context).await;
        super::call_log::log_call(&self.caller, &name, price.ok(), &result, started.elapsed());
        Ok(result.into())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refund_reasons_are_cut_on_a_char_boundary() {
        let long = "é".repeat(200);
        let cut = reason(&long);
        assert!(cut.len() <= "handler error: ".len() + MAX_REASON_LEN);
        assert!(cut.starts_with("handler error: éé"));
        assert_eq!(reason("boom"), "handler error: boom");
    }
}
