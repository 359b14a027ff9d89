//! One bot's link: the MCP client session to it over Bison Relay, shared by every agent
//! session of that bot, and the routing of what the bot sends back on its own
//! (progress, logging, list changes, requests to the client) to the right agents.
//!
//! Progress is taken off the transport ([`Tap`]) before rmcp sees the message, in
//! arrival order, so it reaches the agent before the result it precedes: rmcp handles
//! notifications in spawned tasks, which a response may overtake. A progress
//! notification that arrives before its call is registered is kept until it is (rmcp
//! draws the upstream token only as it sends the request). Log messages are taken off
//! the same way, so an agent on the stateless lifecycle gets them on its request's
//! stream before the answer.
//!
//! While idle the session parks (`park`): its rmcp service goes, its sid, the bot's
//! `initialize` result and the tool cache stay, and the next use or the bot's next
//! request or notification revives it with no traffic, as a
//! [`Client`](brmcp_adapters::Client) does.

mod handler;
mod hub;
mod park;
mod tap;

use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, Weak};
use std::time::Duration;

use super::quote::Listed;
use brmcp_adapters::protocol::{self, PriceBounds, ToolPrice};
use brmcp_adapters::wire::SessionId;
use brmcp_adapters::{BrTransport, IdRange, PeerId, Router, SessionWatch};
use rmcp::ServiceExt;
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, ListToolsRequest,
    PaginatedRequestParams, ServerPeerInfo, ServerResult, Tool,
};
use rmcp::service::{Peer, RoleClient, RunningService, serve_directly};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lock;
use super::proxy::Held;
use super::proxy::input_required::HeldCalls;
use super::session_store::{MAX_EPOCH, Saved, SessionStore};
use handler::LinkHandler;
pub(crate) use hub::{AgentSession, Hub, Tracked};
use park::{Current, Session};
pub use park::{LINK_PARK_AFTER, router_config};
use tap::Tap;

/// Pages of `tools/list` read at most when the tool cache is filled: 100 pages bound
/// a hostile bot's endless cursor.
const MAX_TOOL_PAGES: usize = 100;

/// Why a bot said nothing, as far as the bridge can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Silence {
    /// The Bison Relay client has not taken the message: its connection (to the
    /// bridge, or to its relay) is down.
    #[error("the Bison Relay client has not sent the message (is it running and connected?)")]
    Unsent,
    /// The message went out and nothing came back.
    #[error(
        "it never answered: it is offline, the relay to it is down, or it does not allow this client"
    )]
    NoAnswer,
}

impl Silence {
    /// What `watch` tells of a session that said nothing.
    pub(crate) fn of(watch: &SessionWatch) -> Self {
        if watch.unsent() {
            Self::Unsent
        } else {
            Self::NoAnswer
        }
    }
}

/// Why a link to a bot is not up.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The bot did not answer in time.
    #[error("no answer from the bot within {0:?}")]
    Timeout(Duration),
    /// The bot did not answer a new session in time, for this reason.
    #[error("bot {bot} did not answer within {waited:?}: {why}")]
    Unanswered {
        /// The bot.
        bot: PeerId,
        /// How long it was given.
        waited: Duration,
        /// What the bridge can tell of why.
        why: Silence,
    },
    /// The session could not be opened or failed.
    #[error("{0}")]
    Failed(String),
    /// The bot was removed from the allowed bots, or the bridge closed.
    #[error("bot link closed")]
    Closed,
}

/// What a bot said of itself in its session's `initialize` result, read once (a
/// malformed value warned of once) and kept while the session parks.
pub(crate) struct About {
    /// The result itself.
    pub(crate) info: ServerPeerInfo,
    /// The calls a minute the bot says it allows each caller (`brmcp/callsPerMinute`);
    /// `None` when it does not say (a Go bot) or says it malformed.
    pub(crate) calls_per_minute: Option<u32>,
    /// Whether the bot says it reserves credit per call (`brmcp/reservesCredit`).
    pub(crate) reserves_credit: bool,
}

impl About {
    fn new(bot: &PeerId, info: ServerPeerInfo) -> Self {
        let meta = info.meta.as_ref().map(|m| &m.0);
        let calls_per_minute = protocol::calls_per_minute(meta).unwrap_or_else(|e| {
            tracing::warn!(%bot, error = %e, "bot's initialize result refused; its limit is taken as the default");
            None
        });
        let reserves_credit = protocol::reserves_credit(meta).unwrap_or_else(|e| {
            tracing::warn!(%bot, error = %e, "bot's initialize result refused; its calls wait for each other");
            false
        });
        Self {
            info,
            calls_per_minute,
            reserves_credit,
        }
    }
}

/// A running session to a bot.
pub(crate) struct Conn {
    service: RunningService<RoleClient, LinkHandler>,
    /// What the bot said of itself in the session's `initialize`.
    pub(crate) about: Arc<About>,
    /// Its serial in the link (see [`Hub::next_serial`]).
    pub(crate) serial: u64,
    /// What a request waiting on it can see of the session.
    pub(crate) watch: SessionWatch,
    /// The session it runs on, as the router parks it.
    session: Session,
}

impl Conn {
    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        self.service.peer()
    }
}

/// One bot: its session (re)established on demand, and the agents it talks to.
pub(crate) struct BotLink {
    pub(crate) bot: PeerId,
    router: Router,
    client_name: String,
    connect_timeout: Duration,
    retry_after: Duration,
    /// The session: none, running, or parked.
    current: RwLock<Current>,
    connecting: tokio::sync::Mutex<Option<(Instant, LinkError)>>,
    store: SessionStore,
    /// The session a previous run left, until it is resumed or found lost.
    resumable: Mutex<Option<Saved>>,
    /// The live session as saved, if it was resumed, and its connection: its transport
    /// has no `initialize` of its own to repeat, so once it fails the next connect
    /// initializes it again on its sid (a Go bot then keeps no stray session), under
    /// the next epoch (requests of the failed one may still be answered).
    resumed: Mutex<Option<(Saved, Weak<Conn>)>>,
    pub(crate) hub: Arc<Hub>,
    /// Cancelled when the bot is de-listed: its agent sessions end.
    pub(crate) closed: CancellationToken,
    /// The session being opened or resumed, to tell why it is not answered.
    dialing: Mutex<Option<SessionWatch>>,
    /// Requests (`tools/call`, `prompts/get`, `resources/read`) of agents asked through
    /// `input_required`, held for their retries.
    pub(crate) held: Arc<HeldCalls<Held>>,
    /// This link, for the slots its sessions park through.
    me: Weak<Self>,
}

impl BotLink {
    pub(crate) fn new(
        bot: PeerId,
        router: Router,
        client_name: String,
        connect_timeout: Duration,
        retry_after: Duration,
        store: SessionStore,
    ) -> Arc<Self> {
        let resumable = Mutex::new(store.load(&bot));
        Arc::new_cyclic(|me| Self {
            bot,
            router,
            client_name,
            connect_timeout,
            retry_after,
            current: RwLock::new(Current::None),
            connecting: tokio::sync::Mutex::new(None),
            store,
            resumable,
            resumed: Mutex::new(None),
            hub: Arc::new(Hub::new()),
            closed: CancellationToken::new(),
            dialing: Mutex::new(None),
            held: Arc::default(),
            me: me.clone(),
        })
    }

    fn current(&self) -> RwLockReadGuard<'_, Current> {
        self.current.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the bot said of itself in the session's `initialize`, running or parked.
    pub(crate) fn about(&self) -> Option<Arc<About>> {
        match &*self.current() {
            Current::Live(conn) if !conn.service.is_closed() => Some(conn.about.clone()),
            Current::Parked(parked) => Some(parked.about.clone()),
            _ => None,
        }
    }

    /// The running session (a parked one revived), or a new one within the connect
    /// timeout. A failure is remembered for `retry_after`, so requests in that time
    /// fail at once.
    pub(crate) async fn ensure(&self) -> Result<Arc<Conn>, LinkError> {
        if self.closed.is_cancelled() {
            return Err(LinkError::Closed);
        }
        if let Some(conn) = self.running().await {
            return Ok(conn);
        }
        let mut last_failure = self.connecting.lock().await;
        if let Some(conn) = self.running().await {
            return Ok(conn);
        }
        if let Some((at, error)) = &*last_failure
            && at.elapsed() < self.retry_after
        {
            return Err(error.clone());
        }
        let attempt = tokio::select! {
            r = tokio::time::timeout(self.connect_timeout, self.connect()) => {
                r.unwrap_or_else(|_| Err(self.unanswered()))
            }
            () = self.closed.cancelled() => Err(LinkError::Closed),
        };
        *lock(&self.dialing) = None;
        match attempt {
            Ok(conn) => {
                *last_failure = None;
                self.replace(Current::Live(conn.clone()));
                Ok(conn)
            }
            Err(error) => {
                tracing::info!(bot = %self.bot, %error, "bot unavailable");
                *last_failure = Some((Instant::now(), error.clone()));
                Err(error)
            }
        }
    }

    /// Why the session being dialed did not come up within the connect timeout.
    fn unanswered(&self) -> LinkError {
        let why = lock(&self.dialing)
            .as_ref()
            .map_or(Silence::NoAnswer, Silence::of);
        LinkError::Unanswered {
            bot: self.bot,
            waited: self.connect_timeout,
            why,
        }
    }

    /// The session a previous run saved, resumed, or else a new one.
    async fn connect(&self) -> Result<Arc<Conn>, LinkError> {
        let saved = lock(&self.resumable).clone();
        if let Some(saved) = saved {
            match self.resume(saved).await {
                Ok(conn) => {
                    *lock(&self.resumable) = None;
                    return Ok(conn);
                }
                Err(Resume::Lost { why, again }) => {
                    tracing::info!(bot = %self.bot, %why, "saved session lost at the bot; initializing it again");
                    *lock(&self.resumable) = None;
                    if again.is_none() {
                        self.store.forget(&self.bot);
                    }
                    return self.open(again).await;
                }
                // Not answered: the bot may be offline; the next attempt tries again.
                Err(Resume::Failed(e)) => return Err(e),
            }
        }
        let again = lock(&self.resumed).take().and_then(|(mut saved, old)| {
            // A connection that timed out but did not close still carries calls: a
            // second dial of its sid would take its place at the router and fail them
            // all, so a new session is opened beside it.
            if old.upgrade().is_some_and(|c| !c.service.is_closed()) {
                return None;
            }
            saved.epoch += 1;
            let sid = saved.session_id()?;
            // Saved before anything is sent, as in `resume`.
            let fits = saved.epoch < MAX_EPOCH && self.store.save(&self.bot, &saved).is_ok();
            fits.then_some((sid, saved.epoch))
        });
        self.open(again).await
    }

    /// Opens a session with `initialize` and saves it for the next run: on a fresh
    /// sid, or `on` a saved one the bot lost (as WIRE.md §8 *Recovering* does, so a Go
    /// bot, which opened a session for the refused request, keeps no stray one), under
    /// that run's epoch.
    async fn open(&self, on: Option<(SessionId, u64)>) -> Result<Arc<Conn>, LinkError> {
        let (transport, epoch) = match on {
            Some((sid, epoch)) => (self.router.dial_on(self.bot, sid), epoch),
            None => (self.router.dial(self.bot), 0),
        };
        let transport = transport.map_err(|e| LinkError::Failed(e.to_string()))?;
        let watch = transport.watch();
        *lock(&self.dialing) = Some(watch.clone());
        let sid = transport.sid().as_str().to_owned();
        let session = self.session(&transport, epoch);
        let serial = self.hub.next_serial();
        let service = self
            .handler()
            .serve(self.tap(transport, serial, IdRange::new(epoch)))
            .await
            .map_err(|e| LinkError::Failed(format!("connect to bot: {e}")))?;
        let info = service
            .peer()
            .peer_info()
            .map(|i| (*i).clone())
            .ok_or_else(|| LinkError::Failed("connect to bot: no server info".into()))?;
        let tools = list_all_tools(service.peer())
            .await
            .map_err(|e| LinkError::Failed(format!("list tools: {e}")))?;
        self.hub.set_tools(tools);
        let saved = Saved {
            sid,
            epoch,
            server: info.clone(),
        };
        if let Err(e) = self.store.save(&self.bot, &saved) {
            tracing::warn!(bot = %self.bot, error = %e, "session not saved; the next run opens a new one");
        }
        Ok(Arc::new(Conn {
            service,
            about: Arc::new(About::new(&self.bot, info)),
            serial,
            watch,
            session,
        }))
    }

    /// Goes on with a session a previous run opened: no handshake (the bot has it, or
    /// its record), under the next epoch's ids. Its tool listing is the test: a bot
    /// that lost the session says so.
    async fn resume(&self, mut saved: Saved) -> Result<Arc<Conn>, Resume> {
        let failed = |e: String| Resume::Failed(LinkError::Failed(e));
        let sid = saved.session_id().ok_or_else(|| Resume::Lost {
            why: "bad saved sid".into(),
            again: None,
        })?;
        saved.epoch += 1;
        if saved.epoch >= MAX_EPOCH {
            return Err(Resume::Lost {
                why: "every epoch used".into(),
                again: None,
            });
        }
        // Saved before anything is sent: a run that dies now leaves its epoch used.
        self.store
            .save(&self.bot, &saved)
            .map_err(|e| failed(format!("save session: {e}")))?;
        *lock(&self.resumable) = Some(saved.clone());
        let transport = self
            .router
            .dial_on(self.bot, sid)
            .map_err(|e| failed(e.to_string()))?;
        let watch = transport.watch();
        *lock(&self.dialing) = Some(watch.clone());
        let info = saved.server.clone();
        let session = self.session(&transport, saved.epoch);
        let serial = self.hub.next_serial();
        let service = serve_directly(
            self.handler(),
            self.tap(transport, serial, IdRange::new(saved.epoch)),
            Some(info.clone()),
        );
        match list_all_tools_checked(service.peer()).await {
            Ok(tools) => {
                tracing::debug!(bot = %self.bot, %sid, "session resumed");
                let conn = Arc::new(Conn {
                    service,
                    about: Arc::new(About::new(&self.bot, info)),
                    serial,
                    watch,
                    session,
                });
                *lock(&self.resumed) = Some((saved, Arc::downgrade(&conn)));
                self.hub.set_tools(tools);
                Ok(conn)
            }
            Err(Listing::Lost(why)) => {
                let _ = service.cancel().await;
                // The next epoch: `initialize` must not share its id with the refused
                // listing, whose late answer could be taken for its. Saved before it
                // is sent, as above.
                saved.epoch += 1;
                let fits = saved.epoch < MAX_EPOCH && self.store.save(&self.bot, &saved).is_ok();
                Err(Resume::Lost {
                    why,
                    again: fits.then_some((sid, saved.epoch)),
                })
            }
            Err(Listing::Failed(why)) => {
                let _ = service.cancel().await;
                Err(failed(format!("list tools: {why}")))
            }
        }
    }

    fn handler(&self) -> LinkHandler {
        LinkHandler {
            hub: self.hub.clone(),
            info: client_config(&self.client_name),
        }
    }

    fn tap(&self, inner: BrTransport<RoleClient>, serial: u64, range: IdRange) -> Tap {
        Tap {
            inner,
            hub: self.hub.clone(),
            serial,
            range,
            save_first: None,
            unsaved: false,
        }
    }

    /// The tool named `tool` as last listed, with its price.
    pub(crate) fn listed(&self, tool: &str) -> Listed {
        self.hub
            .tools()
            .iter()
            .find(|t| t.name == tool)
            .map_or(Listed::Unknown, |t| {
                Listed::Tool(ToolPrice::from_meta(t.meta.as_deref()))
            })
    }

    /// The bound a quote for `tool` is paid within: the one last listed to an agent
    /// (a raised bound binds once an agent has listed it), or a lower one the bot lists
    /// since (the lower most and the higher least win); the bridge's own listing of
    /// the bot where no agent has listed the tool yet.
    pub(crate) fn quote_bounds(&self, tool: &str) -> PriceBounds {
        let cached = self
            .hub
            .tools()
            .iter()
            .find(|t| t.name == tool)
            .and_then(|t| PriceBounds::from_meta(t.meta.as_deref()).ok())
            .unwrap_or_default();
        match self.hub.shown_bound(tool) {
            None => cached,
            Some(shown) => shown.narrowed(&cached).unwrap_or_else(|| {
                // They leave no price: the lower most binds alone.
                let max = match (shown.max_atoms(), cached.max_atoms()) {
                    (Some(a), Some(b)) => a.min(b),
                    (a, b) => a.or(b).unwrap_or(0),
                };
                PriceBounds::at_most(max).unwrap_or_default()
            }),
        }
    }

    /// The most a call of `tool`, listed at `price`, can cost: a fixed price, a dynamic
    /// tool's listed most ([`quote_bounds`](Self::quote_bounds)); `None` when not known.
    pub(crate) fn most_price(&self, tool: &str, price: Option<ToolPrice>) -> Option<u64> {
        match price {
            Some(ToolPrice::Fixed(n)) => Some(n),
            Some(ToolPrice::Dynamic) => self.quote_bounds(tool).max_atoms(),
            Some(ToolPrice::Free) | None => None,
        }
    }

    /// Lists the bot's tools again on the live session (a quote disagreed with the
    /// cached listing), within the connect timeout: a bot that does not answer keeps
    /// its old listing.
    pub(crate) async fn relist(&self) -> Result<(), LinkError> {
        let conn = self.running().await.ok_or(LinkError::Closed)?;
        let tools = tokio::time::timeout(self.connect_timeout, list_all_tools(conn.peer()))
            .await
            .map_err(|_| LinkError::Timeout(self.connect_timeout))?
            .map_err(|e| LinkError::Failed(format!("list tools: {e}")))?;
        self.hub.set_tools(tools);
        Ok(())
    }

    /// The link's state as the user's page shows it: `"up"` (running or parked),
    /// `"connecting"`, `"down"` with the last attempt's error while it is remembered,
    /// or `"idle"` (no session yet, none failing).
    pub(crate) fn state(&self) -> (&'static str, Option<String>) {
        if self.about().is_some() {
            return ("up", None);
        }
        match self.connecting.try_lock() {
            Err(_) => ("connecting", None),
            Ok(last) => match &*last {
                Some((at, error)) if at.elapsed() < self.retry_after => {
                    ("down", Some(error.to_string()))
                }
                _ => ("idle", None),
            },
        }
    }

    /// Forgets `conn` if it is still the current session (after a transport failure).
    pub(crate) fn reset(&self, conn: &Arc<Conn>) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if matches!(&*current, Current::Live(c) if Arc::ptr_eq(c, conn)) {
            *current = Current::None;
        }
    }

    /// Ends the link: the session to the bot and every agent session of it.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        self.replace(Current::None);
    }
}

fn client_config(name: &str) -> ClientConfig {
    // Everything an agent might support: a bot's request is relayed to an agent that
    // declared it, or refused.
    let capabilities: ClientCapabilities = serde_json::from_value(serde_json::json!({
        "roots": {"listChanged": true},
        "sampling": {},
        "elicitation": {"form": {}, "url": {}},
    }))
    .unwrap_or_default();
    ClientConfig::new(
        capabilities,
        Implementation::new(name, env!("CARGO_PKG_VERSION")),
    )
}

/// Why a saved session was not resumed.
enum Resume {
    /// The bot does not have it (any more): initialize it `again` on the same sid under
    /// the next epoch (already saved), or (`None`) open a new one.
    Lost {
        why: String,
        again: Option<(SessionId, u64)>,
    },
    /// No usable answer: try again later.
    Failed(LinkError),
}

/// Why a tool listing failed.
enum Listing {
    /// The bot lost the session (WIRE.md §8, whatever its implementation).
    Lost(String),
    /// Anything else.
    Failed(String),
}

async fn list_all_tools(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, String> {
    list_all_tools_checked(peer).await.map_err(|e| match e {
        Listing::Lost(why) | Listing::Failed(why) => why,
    })
}

async fn list_all_tools_checked(peer: &Peer<RoleClient>) -> Result<Vec<Tool>, Listing> {
    let mut tools = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_TOOL_PAGES {
        let params = cursor.map(|c| PaginatedRequestParams::default().with_cursor(Some(c)));
        let request = ClientRequest::ListToolsRequest(ListToolsRequest {
            method: Default::default(),
            params,
            extensions: Default::default(),
        });
        match peer.send_request(request).await {
            Ok(ServerResult::ListToolsResult(page)) => {
                tools.extend(page.tools);
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok(tools),
                }
            }
            Ok(other) => return Err(Listing::Failed(format!("unexpected answer {other:?}"))),
            Err(rmcp::ServiceError::McpError(e)) if brmcp_adapters::is_session_lost(&e) => {
                return Err(Listing::Lost(e.message.to_string()));
            }
            Err(e) => return Err(Listing::Failed(e.to_string())),
        }
    }
    Ok(tools)
}
