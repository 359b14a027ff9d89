//! [`HarnessBuilder`]: the operator's tools, callers, limits and hooks, checked and
//! assembled into a [`Harness`].

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use brmcp_adapters::{PeerId, RouterConfig, protocol};
use rmcp::model::{
    Implementation, PromptsCapability, ResourcesCapability, ServerCapabilities, ServerConfig,
};

use super::{ChatHook, Counters, Harness, HarnessError, Shared, TipEvent, TipHook, Visibility};
use crate::server::billing::Billing;
use crate::server::calls::InFlight;
use crate::server::catalog::Catalog;
use crate::server::chat::{AutoReply, Throttle};
use crate::server::config::ServeConfig;
use crate::server::dynamic::DynamicTools;
use crate::server::gate::AllowGate;
use crate::server::ledger::Ledger;
use crate::server::rate_limit::RateLimiter;
use crate::server::tools::ToolSpec;
use crate::server::{Clock, SystemClock};

/// How long a caller's session stays at rest (its answers sent, no request in
/// progress) before the harness parks it (`RouterConfig::server_park_after`), by
/// default: 100 ms. A session holds an rmcp service (some 28 KB: its task and the
/// first blocks of its channels) only while it has work; over Bison Relay a caller's
/// next message comes a round trip later at the soonest, so a session parks between
/// its calls, and one parked costs about 1.5 KB. Back-to-back calls of a local caller
/// keep it running; a revival costs tens of microseconds, nothing beside a round trip.
/// A harness session keeps no state of its own (balances, call keys and rate limits
/// live in the harness), so parking is safe for every harness.
pub const DEFAULT_PARK_AFTER: std::time::Duration = std::time::Duration::from_millis(100);

/// The park delay of a harness whose lists can change at run time (dynamic tools, a
/// catalog), by default: 30 s. A parked session cannot be told of a change until its
/// next message (it is told then), so a caller's session stays running this long
/// after its last message to hear of changes as they happen.
pub const LISTENED_PARK_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// The default router settings: sessions parked after [`DEFAULT_PARK_AFTER`], or
/// [`LISTENED_PARK_AFTER`] when the harness `pushes` list changes.
fn parking(pushes: bool) -> RouterConfig {
    let mut config = RouterConfig::server();
    config.server_park_after = Some(if pushes {
        LISTENED_PARK_AFTER
    } else {
        DEFAULT_PARK_AFTER
    });
    config
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
    /// Set by the operator; the default ([`parking`]) depends on what the harness pushes.
    router_config: Option<RouterConfig>,
    tell_refused: bool,
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
    pub(super) fn new() -> Self {
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
            router_config: None,
            tell_refused: true,
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

    /// The allowed callers from a settings file, its rate limit, and whether refused
    /// callers are told.
    pub fn config(self, config: &ServeConfig) -> Self {
        self.allowed_uids(config.allowed_uids.iter().copied())
            .calls_per_minute(config.calls_per_minute)
            .tell_refused(config.tell_refused)
    }

    /// Whether a caller the allow gate refuses is answered at once with a JSON-RPC
    /// `NOT_ALLOWED` error (on its session, to its request; at most once per
    /// [`REFUSAL_REPLY_INTERVAL`](brmcp_adapters::REFUSAL_REPLY_INTERVAL) per caller)
    /// instead of hearing nothing. Default: on.
    pub fn tell_refused(mut self, tell: bool) -> Self {
        self.tell_refused = tell;
        self
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

    /// The router's settings (default [`RouterConfig::server`] with sessions parked
    /// after [`DEFAULT_PARK_AFTER`] at rest, or [`LISTENED_PARK_AFTER`] with dynamic
    /// tools or a catalog); its authorizer is replaced by the harness's allow gate.
    pub fn router_config(mut self, config: RouterConfig) -> Self {
        self.router_config = Some(config);
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
                let opened = Ledger::open(&dir, self.clock.now())?;
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
        let pushes = self.dynamic.is_some() || resources || prompts;
        let router_config = self.router_config.unwrap_or_else(|| parking(pushes));
        let mut info = ServerConfig::new(capabilities).with_server_info(self.info);
        if let Some(text) = self.instructions {
            info = info.with_instructions(text);
        }
        if billing.reserves_credit() {
            // Bridges let their agents' paid calls run side by side here.
            let mut meta = info.meta.take().unwrap_or_default();
            protocol::advertise_reserves_credit(&mut meta.0);
            info.meta = Some(meta);
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
                waiting: crate::server::calls::Waiting::default(),
                running: super::stop::RunningCalls::default(),
                clock: self.clock,
                chat_hook: self.chat_hook,
                auto_reply: throttle,
                tip_hook: self.tip_hook,
                router_config: router_config.with_tell_refused(self.tell_refused),
                info,
                counters: Counters::default(),
                started: OnceLock::new(),
            }),
        })
    }
}
