//! The client bridge: local MCP endpoints for any agent, proxying to Bison Relay bots
//! under the user's spending policy.
//!
//! ```text
//! agent ── streamable HTTP /mcp/<bot uid> + bearer ──┐
//! agent ── stdio (one bot) ──────────────────────────┤
//!                                       ProxyServer (one per agent session)
//!                                                    │ tools/call: fresh brmcp/callKey,
//!                                                    │ payment_required → Policy → Payer
//!                                       BotLink (one per bot): rmcp client over BR
//!                                                    │ Router::dial
//!                                                  the bot
//! ```
//!
//! - [`Bridge`]: the engine a host embeds. It owns the settings
//!   ([`SETTINGS_FILE`]), the spend log ([`SPEND_FILE`]), one link per bot, the approval
//!   queue, and the owned HTTP listener, which follows the settings live.
//! - The proxy forwards everything an MCP server offers: tools (names, schemas and
//!   `_meta` verbatim), resources and templates, prompts, completions, logging, progress
//!   (tokens mapped), cancellation both ways, and the bot's requests to the client
//!   (sampling, elicitation, roots) to an agent that declared them. Results keep
//!   `content`, `structuredContent` and `isError` as the bot sent them, and carry
//!   `resultType` for agents on the 2026-07-28 protocol.
//! - Paid calls: each agent `tools/call` gets a fresh `brmcp/callKey` (WIRE.md §10), or
//!   one derived from the agent's own; a transport retry and the reissue after payment
//!   reuse it, so the bot runs and charges one logical call at most once. The call
//!   journal ([`CALLS_FILE`], `calls`) records each call and its steps before they are
//!   taken, so a call cut by the bridge's stop or crash is resumed under its key at
//!   the next start, never paid again, and its outcome held for the agent's retry. What is paid is decided by the quote rules
//!   ([`quote`]): never for a free, unlisted or unpriced tool, never more than the
//!   listed price or the quoted shortfall, at most one payment per call, caps on top.
//!   A refused payment appends `<name>: payment not made: <reason>` to the bot's
//!   `payment_required` result; a refused quote's reason names the bot, the tool and
//!   the numbers.
//! - [`serve_stdio`] serves one bot over stdio for hosts that spawn MCP servers.
//! - The directories of the settings are served as local tools (search, a provider,
//!   introductions, "add this bot"): see [`serve_directory_stdio`] and
//!   `/mcp/directory`.
//!
//! # Limits of the shared link
//!
//! All agents of one bot share one Bison Relay session to it. A request the bot sends
//! to the client carries no link to the call that caused it, so it goes to the newest
//! forwarded request of an agent that declared the capability (else to the newest such
//! agent session); agents on the 2026-07-28 lifecycle cannot take such requests at all
//! (rmcp refuses server-to-client requests there), so the bot gets an error. A bot
//! keeps one prepaid balance per caller: two concurrent paid calls may spend each
//! other's credit, so one of them can end with the bot's `payment_required` after
//! polling although the bridge paid; the payments never exceed the caps and each buys
//! exactly one run.

pub mod announcements;
pub(crate) mod approval;
mod attach;
mod calls;
mod credit;
pub(crate) mod directory;
mod fair_share;
pub use fair_share::BOT_CALLS_PER_MINUTE;
mod http;
mod link;
mod policy;
mod presence;
mod proxy;
pub mod quote;
mod session_store;
mod settings;
mod spend;
mod stdio;
pub(crate) mod ui;
mod watch;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use brmcp_adapters::{Clock, PeerId, Router, SystemClock};

pub use approval::{
    APPROVAL_SECRET_FILE, ApprovalSecretError, approval_secret, existing_approval_secret,
    rotate_approval_secret,
};
pub use attach::{BRIDGE_GONE, Upstream, pump};
pub use calls::{CALLS_FILE, JournalError};
pub use credit::{APPROVED_CREDIT_HOLD_SECS, CREDIT_HOLD_SECS, DEFAULT_CREDIT_WAIT, MAX_REPAYS};
pub use directory::{
    AnswerError, DIRECTORY_ADD_BOT, DIRECTORY_GET_PROVIDER, DIRECTORY_INTRODUCE, DIRECTORY_SEARCH,
    ListedBot, MAX_ANSWER_BYTES, serve_directory_stdio,
};
pub use http::{
    BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT, HttpLimits, MAX_CONNECTIONS, MAX_SESSIONS,
    MAX_SESSIONS_PER_TOKEN, MAX_UNPROVEN_CONNECTIONS, RefusedAddress, SESSION_IDLE, UNPROVEN_GRACE,
};
pub use link::{LINK_PARK_AFTER, LinkError, Silence, router_config};
pub use policy::{Payer, PaymentFailed, PaymentUnconfirmed, PendingPayment};
pub use presence::{
    ENDPOINT_FILE, EndpointRecord, Ownership, PresenceError, RunningBridge, running_bridge,
};
pub use proxy::input_required::INPUT_HOLD;
pub use proxy::reask::MAX_REASKS;
pub use settings::{
    AgentEntry, Approver, BotChange, Caller, DEFAULT_AGENT, DEFAULT_APPROVAL_TIMEOUT_SECS,
    DEFAULT_TIP_WAIT_SECS, DirectoryEntry, IpRange, MIN_TOKEN_LEN, Mode, NamedBot,
    RESERVED_BOT_NAMES, SETTINGS_FILE, Settings, SettingsError, token_hash,
};
pub use spend::{
    CallPayment, Collected, CreditUse, DAY_SECS, KEEP_SECS, OverCap, OverDailyCap, Payment,
    Resolution, SPEND_FILE, SpendEntry, SpendError, SpendLog, SpendStatus, Spender,
    TipOutcomeEvent, Uncollected,
};
pub use stdio::serve_stdio;
pub use watch::Reload;
use watch::SETTINGS_POLL;

use link::BotLink;
use policy::Policy;

/// Default listen address: loopback, port 8891 (the Go bridge's).
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8891);

/// Default bound on a bot that says nothing: 20 s. A request the bot has not answered
/// in any way (no answer, no progress, no answer to the session's silence probe, which
/// goes out after 10 s) fails then, with the reason, and is cancelled at the bot. Bison
/// Relay delivers in seconds when the bot is online; a bot that is offline, refuses
/// this client, or sits behind a lost relay answers never, and the agent should hear
/// so promptly. A call the bot answered anything for is not cut.
pub const DEFAULT_ANSWER_BOUND: Duration = Duration::from_secs(20);

/// Default bound on establishing a bot session (handshake plus tool listing) before an
/// endpoint answers 503: [`DEFAULT_ANSWER_BOUND`], for the same reason.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = DEFAULT_ANSWER_BOUND;

/// Default time a failed connection attempt is remembered, answering 503 at once: 5 s.
pub const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(5);

/// How long after its response body ended an answer counts as delivered: 2 s. The
/// body ends when the server let go of its last bytes, not when the agent read them:
/// the kernel resets the connections of a killed process, and an agent's read of bytes
/// it had not taken yet then fails (soak seed 71 lost a paid answer so, and the
/// agent's repeat paid for the call again). A bridge that dies within the grace leaves
/// the answer for the agent's repeat in the next run; a stopping bridge marks at once,
/// since a graceful stop closes its connections after their bytes went out.
pub const DEFAULT_DELIVERY_GRACE: Duration = Duration::from_secs(2);

/// Default wait before a paid call the bot is heard for but has not answered is asked
/// again under its call key: 30 s, the next re-asks after twice the wait before each
/// (see [`MAX_REASKS`]). Most calls are answered well within it, so a re-ask is rare;
/// an agent that gives up after a minute (soak seed 29's) still gets an answer its bot
/// lost.
pub const DEFAULT_REASK_AFTER: Duration = Duration::from_secs(30);

/// Default wait between reissues of a paid call whose credit is still in flight: 3 s.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(3);

/// Default number of such reissues: 5, as the Go bridge (15 s of credit latency).
pub const DEFAULT_POLL_ATTEMPTS: u32 = 5;

/// How the bridge is set up. The policy itself lives in [`Settings`].
#[derive(Clone)]
#[non_exhaustive]
pub struct Config {
    /// Where `mcpclient.json` and the spend log live.
    pub data_dir: PathBuf,
    /// The bridge's name in refusal notes and in its client info toward bots.
    pub name: String,
    /// Where the owned HTTP listener binds (see [`Bridge::start`]).
    pub listen: SocketAddr,
    /// When a loopback `listen` address is taken, bind an ephemeral port on the same
    /// address instead of failing: for a bridge whose agents find its address in the
    /// data directory (a `bridge stdio` that became the bridge), not at a fixed port.
    pub listen_fallback: bool,
    /// Allow a non-loopback `listen` address. Off by default; never without a token.
    pub allow_remote: bool,
    /// Host names (optionally `host:port`) accepted in the `Host` header besides the
    /// loopback names; needed for a non-loopback bind.
    pub allowed_hosts: Vec<String>,
    /// Bound on establishing a bot session.
    pub connect_timeout: Duration,
    /// Bound on a request the bot has not answered in any way (see
    /// [`DEFAULT_ANSWER_BOUND`]).
    pub answer_bound: Duration,
    /// How long after its response ended a paid answer counts as delivered (see
    /// [`DEFAULT_DELIVERY_GRACE`]).
    pub delivery_grace: Duration,
    /// How long a paid call the bot is heard for but has not answered waits before it
    /// is asked again under its call key (see [`DEFAULT_REASK_AFTER`]).
    pub reask_after: Duration,
    /// How long a failed attempt is remembered.
    pub retry_after: Duration,
    /// Wait between reissues of a paid call whose credit is in flight.
    pub poll_interval: Duration,
    /// Number of such reissues.
    pub poll_attempts: u32,
    /// Unix time for the spend log's rolling window.
    pub clock: Arc<dyn Clock>,
    /// Require the bearer token (the default). `false` is a test mode for suites that
    /// cannot send headers (the MCP conformance suite): it is honoured only while the
    /// listen address is loopback.
    pub require_token: bool,
    /// The HTTP endpoints' connection and session bounds.
    pub http_limits: HttpLimits,
    /// How often [`Bridge::watch_settings`] looks at the settings file.
    pub settings_poll: Duration,
    /// How long a call held for the input of an agent on protocol 2026-07-28 waits for
    /// its retry (see [`INPUT_HOLD`]).
    pub input_hold: Duration,
    /// How long a priced call waits for another agent's calls or uncollected credit
    /// at its bot before it is refused (see [`DEFAULT_CREDIT_WAIT`]).
    pub credit_wait: Duration,
    /// The calls a minute each bot allows the bridge's identity, which the agents'
    /// fair shares divide (see [`BOT_CALLS_PER_MINUTE`]): a bot's limit is not on the
    /// wire, so an embedder that knows its bots' limits says so here.
    pub bot_calls_per_minute: u32,
}

impl Config {
    /// Defaults with the data directory `data_dir`.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            name: "brmcp-bridge".into(),
            listen: DEFAULT_LISTEN,
            listen_fallback: false,
            allow_remote: false,
            allowed_hosts: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            answer_bound: DEFAULT_ANSWER_BOUND,
            delivery_grace: DEFAULT_DELIVERY_GRACE,
            reask_after: DEFAULT_REASK_AFTER,
            retry_after: DEFAULT_RETRY_AFTER,
            poll_interval: DEFAULT_POLL_INTERVAL,
            poll_attempts: DEFAULT_POLL_ATTEMPTS,
            clock: Arc::new(SystemClock),
            require_token: true,
            http_limits: HttpLimits::default(),
            settings_poll: SETTINGS_POLL,
            input_hold: INPUT_HOLD,
            credit_wait: DEFAULT_CREDIT_WAIT,
            bot_calls_per_minute: BOT_CALLS_PER_MINUTE,
        }
    }

    /// Sets the listen address.
    #[must_use]
    pub fn with_listen(mut self, listen: SocketAddr) -> Self {
        self.listen = listen;
        self
    }

    /// Sets the clock.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("data_dir", &self.data_dir)
            .field("name", &self.name)
            .field("listen", &self.listen)
            .field("listen_fallback", &self.listen_fallback)
            .field("allow_remote", &self.allow_remote)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("connect_timeout", &self.connect_timeout)
            .field("answer_bound", &self.answer_bound)
            .field("delivery_grace", &self.delivery_grace)
            .field("reask_after", &self.reask_after)
            .field("poll_interval", &self.poll_interval)
            .field("poll_attempts", &self.poll_attempts)
            .field("require_token", &self.require_token)
            .field("http_limits", &self.http_limits)
            .field("settings_poll", &self.settings_poll)
            .finish_non_exhaustive()
    }
}

/// Why the bridge could not start or apply something.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BridgeError {
    /// The settings were refused or could not be read or written.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// The spend log could not be opened.
    #[error(transparent)]
    Spend(#[from] SpendError),
    /// The call journal could not be opened.
    #[error(transparent)]
    Calls(#[from] JournalError),
    /// The listener could not bind.
    #[error("listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A non-loopback listen address without [`Config::allow_remote`].
    #[error(
        "refusing to listen on non-loopback {0} without --allow-remote (Config::allow_remote) and a token"
    )]
    RemoteRefused(SocketAddr),
    /// The bot is not an allowed bot.
    #[error("bot {0} is not allowed")]
    NotAllowed(String),
    /// No directory of the settings has this name or uid.
    #[error("no directory {0:?} in the settings' directories")]
    UnknownDirectory(String),
    /// The directory refused, or answered what the bridge does not take.
    #[error("directory: {0}")]
    Directory(String),
    /// The bot could not be reached.
    #[error("bot unavailable: {0}")]
    Unavailable(#[from] LinkError),
    /// Serving failed.
    #[error("serve: {0}")]
    Serve(String),
}

/// The client bridge. Cheap to clone; every clone is the same bridge.
#[derive(Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bridge")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    router: Router,
    settings: Mutex<Settings>,
    pub(crate) policy: Policy,
    links: Mutex<HashMap<PeerId, Arc<BotLink>>>,
    pub(crate) http: http::HttpState,
    /// The call journal.
    pub(crate) calls: calls::Calls,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// `value` as a `T`, through JSON: a peer's answer arrives as an untagged union, and
/// whichever variant it was read as, this lands it in the type the method answers
/// with. The error names `whose` answer it was.
fn reshape<T: serde::de::DeserializeOwned>(
    value: impl serde::Serialize,
    whose: &str,
) -> Result<T, rmcp::ErrorData> {
    serde_json::to_value(value)
        .and_then(serde_json::from_value)
        .map_err(|e| rmcp::ErrorData::internal_error(format!("{whose}: {e}"), None))
}

/// `N` random bytes as lowercase hex.
pub(crate) fn random_hex<const N: usize>() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Bridge {
    /// A bridge dialing bots through `router` (a client-role router of the host's
    /// Bison Relay identity) and paying through `payer`. Loads the settings (fail
    /// closed) and opens the spend log and the call journal. Opens no socket: see
    /// [`start`](Self::start).
    ///
    /// # Errors
    /// [`BridgeError::Settings`], [`BridgeError::Spend`], [`BridgeError::Calls`].
    pub fn new(config: Config, router: Router, payer: impl Payer) -> Result<Self, BridgeError> {
        let settings = Settings::load(&config.data_dir.join(SETTINGS_FILE))?;
        crate::secure_fs::create_dir(&config.data_dir).map_err(|source| SettingsError::Io {
            path: config.data_dir.clone(),
            source,
        })?;
        let spend = SpendLog::open(&config.data_dir, config.clock.now())?;
        // Payments an earlier run was waiting for: their outcomes now arrive late.
        spend.unconfirm_left_pending()?;
        let policy = Policy::new(Arc::new(payer), spend, config.clock.clone());
        let calls = calls::Calls::open(&config.data_dir, config.clock.clone())?
            .with_delivery_grace(config.delivery_grace);
        // Payments an earlier run was about to make and never reserved were not made.
        calls::unpaid_unreserved(&calls, &policy.spend);
        let inner = Arc::new(Inner {
            http: http::HttpState::new(config.bot_calls_per_minute),
            config,
            router,
            settings: Mutex::new(settings),
            policy,
            links: Mutex::new(HashMap::new()),
            calls,
        });
        Ok(Self { inner })
    }

    /// The live settings (with the token, which hosts display).
    pub fn settings(&self) -> Settings {
        self.inner.settings()
    }

    /// Validates, applies and persists `settings`, then brings the endpoints in line:
    /// the owned listener starts, stops, or restarts on a token change (severing the
    /// old token's streams), and sessions of bots no longer allowed close. Enabling
    /// with an empty token mints one. Returns the settings as applied.
    ///
    /// # Errors
    /// A refused or unwritable settings file changes nothing. A listener that cannot
    /// bind is reported after the settings were applied.
    pub async fn apply_settings(&self, settings: Settings) -> Result<Settings, BridgeError> {
        self.apply(settings, true).await
    }

    /// As [`apply_settings`](Self::apply_settings), writing the file only if `persist`
    /// or a token was minted.
    async fn apply(&self, settings: Settings, persist: bool) -> Result<Settings, BridgeError> {
        self.apply_over(settings, persist, None).await
    }

    /// As [`apply`](Self::apply); with `base`, only while the live settings and the
    /// file (if any) still hold `base`, the settings `settings` was made from.
    async fn apply_over(
        &self,
        settings: Settings,
        persist: bool,
        base: Option<&Settings>,
    ) -> Result<Settings, BridgeError> {
        let mut settings = settings.normalized()?;
        let mint = settings.enabled && settings.token.is_empty();
        if mint {
            settings.token = random_hex::<16>().map_err(|e| BridgeError::Serve(e.to_string()))?;
        }
        let old = {
            let mut current = lock(&self.inner.settings);
            let path = self.inner.config.data_dir.join(SETTINGS_FILE);
            if let Some(base) = base {
                check_unchanged(&path, base, &current)?;
            }
            if persist || mint {
                settings.save(&path)?;
            }
            std::mem::replace(&mut *current, settings.clone())
        };
        // A bot no longer allowed loses its sessions; its link stays while it is still
        // a directory (whose own sessions end only when it is no longer one).
        let (gone, unlisted, undirected) = {
            let mut links = lock(&self.inner.links);
            let keys = || links.keys().copied();
            let unlisted: Vec<PeerId> = keys().filter(|b| !settings.allows(b)).collect();
            let undirected: Vec<PeerId> = keys().filter(|b| !settings.is_directory(b)).collect();
            let gone: Vec<Arc<BotLink>> = unlisted
                .iter()
                .filter(|b| undirected.contains(b))
                .filter_map(|b| links.remove(b))
                .collect();
            (gone, unlisted, undirected)
        };
        for bot in &unlisted {
            self.inner.http.drop_bot(bot).await;
        }
        for directory in &undirected {
            self.inner.http.drop_directory(directory).await;
        }
        for link in gone {
            link.close();
        }
        http::reconcile(&self.inner, &old, &settings).await?;
        Ok(settings)
    }

    /// Adds (or renames) a named bot and allows it.
    ///
    /// # Errors
    /// As [`apply_settings`](Self::apply_settings), a bad or taken name, and a settings
    /// file changed on disk since it was last applied (the edit is kept; retry).
    pub async fn add_bot(&self, name: &str, uid: PeerId) -> Result<Settings, BridgeError> {
        let base = self.settings();
        let settings = base.clone().with_bot(name, uid)?;
        self.apply_over(settings, true, Some(&base)).await
    }

    /// Removes a bot by name or uid; its sessions close.
    ///
    /// # Errors
    /// As [`apply_settings`](Self::apply_settings), an unknown bot, and a settings file
    /// changed on disk since it was last applied.
    pub async fn remove_bot(&self, name_or_uid: &str) -> Result<Settings, BridgeError> {
        let base = self.settings();
        let settings = base.clone().without_bot(name_or_uid)?;
        self.apply_over(settings, true, Some(&base)).await
    }

    /// The allowed bots with their names.
    pub fn bots(&self) -> Vec<NamedBot> {
        self.settings().bots()
    }

    /// Resumes, the first time, the calls an earlier run left in flight (their bots
    /// asked again under their keys, their outcomes held for their agents' retries;
    /// call it once the host is connected), and starts the owned HTTP listener if the
    /// settings enable it. Later [`apply_settings`](Self::apply_settings) calls start,
    /// stop and restart it.
    ///
    /// # Errors
    /// [`BridgeError::Bind`], [`BridgeError::RemoteRefused`].
    pub async fn start(&self) -> Result<(), BridgeError> {
        // Before the listener: a retry that arrives finds its call being resumed.
        calls::resume(&self.inner);
        http::start(&self.inner).await
    }

    /// Makes this bridge its data directory's (see [`Ownership`]): its listener's
    /// address is recorded for `bridge stdio` and `approvals`, now and at each bind.
    pub fn own_data_dir(&self, ownership: Ownership) {
        self.inner.http.own(ownership);
    }

    /// The owned listener's bound address, while it runs.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.inner.http.addr()
    }

    /// The HTTP endpoints as an axum router, for a host that runs its own server. The
    /// settings' `enabled` switch and token apply per request.
    pub fn http_router(&self) -> axum::Router {
        http::app(self.inner.clone())
    }

    /// Stops the listener and ends every bot session. Paid calls cut by the stop are
    /// left in the call journal for the next start.
    pub async fn close(&self) {
        self.inner.calls.close();
        http::stop(&self.inner).await;
        let links: Vec<_> = lock(&self.inner.links).drain().map(|(_, l)| l).collect();
        for link in links {
            link.close();
        }
    }

    /// Payments waiting for the user's decision (approval mode), oldest first.
    pub fn pending_payments(&self) -> Vec<PendingPayment> {
        self.inner.policy.pending()
    }

    /// Each payment parked for a decision from now on.
    pub fn subscribe_payments(&self) -> tokio::sync::broadcast::Receiver<PendingPayment> {
        self.inner.policy.subscribe()
    }

    /// Approves or denies a parked payment; `false` if no payment has this id.
    pub fn resolve_payment(&self, id: &str, approve: bool) -> bool {
        self.inner.policy.decide(id, approve)
    }

    /// The client-role router the bridge dials bots through (its counters, for a
    /// status).
    pub fn router(&self) -> &Router {
        &self.inner.router
    }

    /// The last remote address `allowed_ips` refused, and when.
    pub fn last_refused_address(&self) -> Option<RefusedAddress> {
        self.inner.http.last_refused()
    }

    /// What counts against the daily cap now (paid in the last 24 hours and
    /// pending), the payments pending, and their atoms.
    ///
    /// # Errors
    /// SQLite's.
    pub fn spend_totals(&self) -> Result<(u64, u64, u64), SpendError> {
        let spend = &self.inner.policy.spend;
        let (pending, pending_atoms) = spend.pending()?;
        let counted = spend.spent_today(self.inner.config.clock.now())?;
        Ok((counted, pending, pending_atoms))
    }

    /// The spend log, oldest first, and the total of the last 24 hours.
    ///
    /// # Errors
    /// SQLite's.
    pub fn spend_log(&self) -> Result<(Vec<SpendEntry>, u64), SpendError> {
        let spend = &self.inner.policy.spend;
        Ok((
            spend.entries()?,
            spend.spent_today(self.inner.config.clock.now())?,
        ))
    }

    /// The payments whose credit a bot holds and no call collected, oldest first, and
    /// the calls answered from credit not their agent's (see [`SpendLog::collect`]).
    ///
    /// # Errors
    /// SQLite's.
    pub fn credit_log(&self) -> Result<(Vec<Uncollected>, Vec<CreditUse>), SpendError> {
        let spend = &self.inner.policy.spend;
        Ok((spend.uncollected(None)?, spend.credit_uses()?))
    }

    /// Settles the payment a tip outcome the host received late belongs to (one the
    /// bridge stopped waiting for, whatever its age), by the attribution rule of
    /// [`SpendLog::resolve_outcome`]: a replayed outcome, or one that cannot belong to
    /// any unresolved payment, settles nothing. Payments still awaited are never
    /// touched.
    ///
    /// # Errors
    /// SQLite's.
    pub fn resolve_spend(&self, event: &TipOutcomeEvent<'_>) -> Result<Resolution, SpendError> {
        let resolution = self.inner.policy.spend.resolve_outcome(event)?;
        if matches!(resolution, Resolution::Settled(_)) {
            self.inner.policy.settled();
        }
        Ok(resolution)
    }

    /// Establishes (or reuses) the session to `bot` within the connect timeout.
    ///
    /// # Errors
    /// [`BridgeError::NotAllowed`], [`BridgeError::Unavailable`].
    pub async fn connect(&self, bot: &PeerId) -> Result<(), BridgeError> {
        let link = self
            .inner
            .link(bot)
            .ok_or_else(|| BridgeError::NotAllowed(bot.to_string()))?;
        link.ensure().await?;
        Ok(())
    }
}

impl Inner {
    pub(crate) fn settings(&self) -> Settings {
        lock(&self.settings).clone()
    }

    /// The link of an allowed bot, made on first use.
    pub(crate) fn link(&self, bot: &PeerId) -> Option<Arc<BotLink>> {
        let allowed = lock(&self.settings).allows(bot);
        allowed.then(|| self.link_unchecked(bot))
    }

    /// The link of a configured directory, made on first use (shared with the bot's
    /// own endpoint if the directory is an allowed bot too).
    pub(crate) fn directory_link(&self, directory: &PeerId) -> Option<Arc<BotLink>> {
        let listed = lock(&self.settings).is_directory(directory);
        listed.then(|| self.link_unchecked(directory))
    }

    fn link_unchecked(&self, bot: &PeerId) -> Arc<BotLink> {
        let mut links = lock(&self.links);
        links
            .entry(*bot)
            .or_insert_with(|| {
                BotLink::new(
                    *bot,
                    self.router.clone(),
                    self.config.name.clone(),
                    self.config.connect_timeout,
                    self.config.retry_after,
                    session_store::SessionStore::new(&self.config.data_dir),
                )
            })
            .clone()
    }
}

/// [`SettingsError::ChangedOnDisk`] unless the live settings `current` and the file
/// `path` (when there is one) both hold `base`: a change made from `base` must not
/// overwrite an edit the watcher has not applied yet, or refused.
fn check_unchanged(path: &Path, base: &Settings, current: &Settings) -> Result<(), SettingsError> {
    let changed = || SettingsError::ChangedOnDisk(path.to_owned());
    if current != base {
        return Err(changed());
    }
    match crate::file_watch::read(path) {
        Ok(None) => Ok(()),
        Ok(Some(text)) => match Settings::parse(path, &text) {
            Ok(on_disk) if on_disk == *base => Ok(()),
            _ => Err(changed()),
        },
        Err(source) => Err(SettingsError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}
