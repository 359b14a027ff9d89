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

#![allow(deprecated)] // sampling, roots and logging are SEP-2577-deprecated; still relayed

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};
use std::time::Duration;

use brmcp_adapters::{AdapterError, BrTransport, PeerId, Router};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, ClientResult, CreateMessageRequest,
    CreateMessageRequestParams, CreateMessageResult, CustomRequest, CustomResult, ElicitRequest,
    ElicitRequestParams, ElicitResult, ErrorCode, ErrorData, Implementation, JsonRpcMessage,
    ListRootsRequest, ListRootsResult, ListToolsRequest, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, ProgressToken,
    ResourceUpdatedNotificationParam, ServerJsonRpcMessage, ServerNotification, ServerPeerInfo,
    ServerRequest, ServerResult, Tool,
};
use rmcp::model::{ClientNotification, GetMeta, NumberOrString};
use rmcp::service::{
    NotificationContext, OriginatingRequestId, Peer, PeerRequestOptions, RequestContext,
    RoleClient, RoleServer, RunningService, RxJsonRpcMessage, TxJsonRpcMessage, serve_directly,
};
use rmcp::transport::Transport;
use rmcp::{ClientHandler, ServiceExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::lock;
use super::session_store::{EPOCH_SPAN, MAX_EPOCH, Saved, SessionStore};
use crate::early_progress::EarlyProgress;
use brmcp_adapters::protocol::ToolPrice;
use brmcp_adapters::protocol::quote::Listed;
use brmcp_adapters::wire::SessionId;

/// Notifications kept per upstream progress token before its call is registered.
const EARLY_PER_TOKEN: usize = 32;

/// Upstream progress tokens with early notifications kept at once; the oldest go first.
const EARLY_TOKENS: usize = 64;

/// Pages of `tools/list` read at most when the tool cache is filled: 100 pages bound
/// a hostile bot's endless cursor.
const MAX_TOOL_PAGES: usize = 100;

/// Why a link to a bot is not up.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LinkError {
    /// The bot did not answer the handshake and tool listing in time.
    #[error("no answer from the bot within {0:?}")]
    Timeout(Duration),
    /// The session could not be opened or failed.
    #[error("{0}")]
    Failed(String),
    /// The bot was removed from the allowed bots, or the bridge closed.
    #[error("bot link closed")]
    Closed,
}

/// A live session to a bot.
pub(crate) struct Conn {
    service: RunningService<RoleClient, LinkHandler>,
    pub(crate) info: ServerPeerInfo,
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
    current: RwLock<Option<Arc<Conn>>>,
    connecting: tokio::sync::Mutex<Option<(Instant, LinkError)>>,
    store: SessionStore,
    /// The session a previous run left, until it is resumed or found lost.
    resumable: Mutex<Option<Saved>>,
    /// The live session as saved, if it was resumed: its transport has no `initialize`
    /// of its own to repeat, so once it fails the next connect initializes it again on
    /// its sid (a Go bot then keeps no stray session), under the next epoch (requests
    /// of the failed one may still be answered).
    resumed: Mutex<Option<Saved>>,
    pub(crate) hub: Arc<Hub>,
    /// Cancelled when the bot is de-listed: its agent sessions end.
    pub(crate) closed: CancellationToken,
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
        Arc::new(Self {
            bot,
            router,
            client_name,
            connect_timeout,
            retry_after,
            current: RwLock::new(None),
            connecting: tokio::sync::Mutex::new(None),
            store,
            resumable,
            resumed: Mutex::new(None),
            hub: Arc::new(Hub::new()),
            closed: CancellationToken::new(),
        })
    }

    /// The live session, if there is one.
    pub(crate) fn live(&self) -> Option<Arc<Conn>> {
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        current.as_ref().filter(|c| !c.service.is_closed()).cloned()
    }

    /// The live session, or a new one within the connect timeout. A failure is
    /// remembered for `retry_after`, so requests in that time fail at once.
    pub(crate) async fn ensure(&self) -> Result<Arc<Conn>, LinkError> {
        if self.closed.is_cancelled() {
            return Err(LinkError::Closed);
        }
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        let mut last_failure = self.connecting.lock().await;
        if let Some(conn) = self.live() {
            return Ok(conn);
        }
        if let Some((at, error)) = &*last_failure
            && at.elapsed() < self.retry_after
        {
            return Err(error.clone());
        }
        let attempt = tokio::select! {
            r = tokio::time::timeout(self.connect_timeout, self.connect()) => {
                r.unwrap_or(Err(LinkError::Timeout(self.connect_timeout)))
            }
            () = self.closed.cancelled() => Err(LinkError::Closed),
        };
        match attempt {
            Ok(conn) => {
                *last_failure = None;
                *self.current.write().unwrap_or_else(PoisonError::into_inner) = Some(conn.clone());
                Ok(conn)
            }
            Err(error) => {
                tracing::info!(bot = %self.bot, %error, "bot unavailable");
                *last_failure = Some((Instant::now(), error.clone()));
                Err(error)
            }
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
                    self.store.forget(&self.bot);
                    return self.open(again).await;
                }
                // Not answered: the bot may be offline; the next attempt tries again.
                Err(Resume::Failed(e)) => return Err(e),
            }
        }
        let again = lock(&self.resumed).take().and_then(|mut saved| {
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
        let sid = transport.sid().as_str().to_owned();
        let service = self
            .handler()
            .serve(self.tap(transport, epoch_base(epoch)))
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
        Ok(Arc::new(Conn { service, info }))
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
        let info = saved.server;
        let service = serve_directly(
            self.handler(),
            self.tap(transport, epoch_base(saved.epoch)),
            Some(info.clone()),
        );
        match list_all_tools_checked(service.peer()).await {
            Ok(tools) => {
                tracing::debug!(bot = %self.bot, %sid, "session resumed");
                *lock(&self.resumed) = Some(Saved {
                    server: info.clone(),
                    ..saved
                });
                self.hub.set_tools(tools);
                Ok(Arc::new(Conn { service, info }))
            }
            Err(Listing::Lost(why)) => {
                let _ = service.cancel().await;
                Err(Resume::Lost {
                    why,
                    again: Some((sid, saved.epoch)),
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

    fn tap(&self, inner: BrTransport<RoleClient>, base: i64) -> Tap {
        Tap {
            inner,
            hub: self.hub.clone(),
            base,
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

    /// Lists the bot's tools again on the live session (a quote disagreed with the
    /// cached listing), within the connect timeout: a bot that does not answer keeps
    /// its old listing.
    pub(crate) async fn relist(&self) -> Result<(), LinkError> {
        let conn = self.live().ok_or(LinkError::Closed)?;
        let tools = tokio::time::timeout(self.connect_timeout, list_all_tools(conn.peer()))
            .await
            .map_err(|_| LinkError::Timeout(self.connect_timeout))?
            .map_err(|e| LinkError::Failed(format!("list tools: {e}")))?;
        self.hub.set_tools(tools);
        Ok(())
    }

    /// Forgets `conn` if it is still the current session (after a transport failure).
    pub(crate) fn reset(&self, conn: &Arc<Conn>) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *current = None;
        }
    }

    /// Ends the link: the session to the bot and every agent session of it.
    pub(crate) fn close(&self) {
        self.closed.cancel();
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = None;
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

/// The first request id of `epoch`'s range on the wire.
fn epoch_base(epoch: u64) -> i64 {
    i64::try_from(epoch.min(MAX_EPOCH)).unwrap_or(0) * EPOCH_SPAN
}

/// Why a saved session was not resumed.
enum Resume {
    /// The bot does not have it (any more): initialize it `again` on the same sid and
    /// epoch, or (`None`) open a new one.
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

/// An agent session (legacy lifecycle) of a bot: where notifications go.
pub(crate) struct AgentSession {
    pub(crate) peer: Peer<RoleServer>,
    pub(crate) subscriptions: Mutex<HashSet<String>>,
}

/// An agent request being forwarded on the link: a bot's request to the client made
/// meanwhile goes to this agent, on this request's stream.
struct Inflight {
    seq: u64,
    peer: Peer<RoleServer>,
    id: rmcp::model::RequestId,
    /// For an agent without a session here (stateless lifecycle): the log messages to
    /// send on this request's stream.
    logs: Option<Arc<LogOutbox>>,
}

/// Log messages for an agent on the stateless lifecycle, sent on the stream of its
/// request, in order, before the request's answer.
pub(crate) struct LogOutbox {
    peer: Peer<RoleServer>,
    queue: Mutex<VecDeque<LoggingMessageNotificationParam>>,
    send: tokio::sync::Mutex<()>,
}

impl LogOutbox {
    async fn flush(&self) {
        let _turn = self.send.lock().await;
        loop {
            let Some(params) = lock(&self.queue).pop_front() else {
                return;
            };
            if let Err(e) = self.peer.notify_logging_message(params).await {
                tracing::debug!(error = %e, "log message not relayed");
            }
        }
    }
}

/// One registered progress route: upstream token to the agent's token.
pub(crate) struct Route {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    queue: Mutex<VecDeque<ProgressNotificationParam>>,
    send: tokio::sync::Mutex<()>,
}

impl Route {
    fn queue(&self) -> MutexGuard<'_, VecDeque<ProgressNotificationParam>> {
        lock(&self.queue)
    }

    /// Sends what is queued, in order; concurrent flushes take turns.
    async fn flush(&self) {
        let _turn = self.send.lock().await;
        loop {
            let Some(mut params) = self.queue().pop_front() else {
                return;
            };
            params.progress_token = self.token.clone();
            if let Err(e) = self.peer.notify_progress(params).await {
                tracing::debug!(error = %e, "progress not relayed");
            }
        }
    }
}

struct Progress {
    routes: HashMap<ProgressToken, Arc<Route>>,
    early: EarlyProgress,
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            routes: HashMap::new(),
            early: EarlyProgress::new(EARLY_TOKENS, EARLY_PER_TOKEN),
        }
    }
}

/// Routing state of one link, shared with its client handler and transport tap.
pub(crate) struct Hub {
    progress: Mutex<Progress>,
    sessions: Mutex<Vec<Weak<AgentSession>>>,
    inflight: Mutex<Vec<Inflight>>,
    seq: AtomicU64,
    tools: RwLock<Arc<Vec<Tool>>>,
}

impl Hub {
    fn new() -> Self {
        Self {
            progress: Mutex::default(),
            sessions: Mutex::default(),
            inflight: Mutex::default(),
            seq: AtomicU64::new(0),
            tools: RwLock::new(Arc::new(Vec::new())),
        }
    }

    /// The bot's tools as last listed.
    pub(crate) fn tools(&self) -> Arc<Vec<Tool>> {
        self.tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_tools(&self, tools: Vec<Tool>) {
        *self.tools.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tools);
    }

    /// Registers an agent session for notifications.
    pub(crate) fn add_session(&self, session: &Arc<AgentSession>) {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|s| s.strong_count() > 0);
        sessions.push(Arc::downgrade(session));
    }

    fn live_sessions(&self) -> Vec<Arc<AgentSession>> {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|s| s.strong_count() > 0);
        sessions.iter().filter_map(Weak::upgrade).collect()
    }

    /// Marks an agent request as being forwarded; the guard unmarks it.
    pub(crate) fn track(
        self: &Arc<Self>,
        peer: &Peer<RoleServer>,
        id: &rmcp::model::RequestId,
        sessionless: bool,
    ) -> Tracked {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let logs = sessionless.then(|| {
            Arc::new(LogOutbox {
                peer: peer.clone(),
                queue: Mutex::default(),
                send: tokio::sync::Mutex::new(()),
            })
        });
        lock(&self.inflight).push(Inflight {
            seq,
            peer: peer.clone(),
            id: id.clone(),
            logs: logs.clone(),
        });
        Tracked {
            hub: self.clone(),
            seq,
            logs,
        }
    }

    /// Called by the tap, in arrival order: agent sessions get the message as a
    /// notification; stateless agents with a request in flight get it on that
    /// request's stream, before its answer.
    fn on_log(&self, params: LoggingMessageNotificationParam) {
        for session in self.live_sessions() {
            let params = params.clone();
            tokio::spawn(async move {
                let _ = session.peer.notify_logging_message(params).await;
            });
        }
        let stateless: Vec<Arc<LogOutbox>> = lock(&self.inflight)
            .iter()
            .filter_map(|i| i.logs.clone())
            .collect();
        for outbox in stateless {
            lock(&outbox.queue).push_back(params.clone());
            tokio::spawn(async move { outbox.flush().await });
        }
    }

    /// Routes upstream progress for `upstream` to the agent's `token`; progress that
    /// arrived early is queued first.
    pub(crate) fn route_progress(
        &self,
        upstream: ProgressToken,
        peer: Peer<RoleServer>,
        token: ProgressToken,
    ) -> Arc<Route> {
        let mut progress = lock(&self.progress);
        let early = progress.early.take(&upstream);
        let route = Arc::new(Route {
            peer,
            token,
            queue: Mutex::new(early),
            send: tokio::sync::Mutex::new(()),
        });
        progress.routes.insert(upstream, route.clone());
        drop(progress);
        if !route.queue().is_empty() {
            let r = route.clone();
            tokio::spawn(async move { r.flush().await });
        }
        route
    }

    /// Ends a route once its request is answered; what is still queued is sent first.
    pub(crate) async fn finish_progress(&self, upstream: &ProgressToken, route: &Route) {
        lock(&self.progress).routes.remove(upstream);
        route.flush().await;
    }

    /// Forgets early progress of a request that will never be routed.
    pub(crate) fn drop_progress(&self, upstream: &ProgressToken) {
        lock(&self.progress).early.take(upstream);
    }

    /// Called by the tap, in arrival order.
    fn on_progress(&self, params: ProgressNotificationParam) {
        let mut progress = lock(&self.progress);
        if let Some(route) = progress.routes.get(&params.progress_token).cloned() {
            drop(progress);
            route.queue().push_back(params);
            tokio::spawn(async move { route.flush().await });
            return;
        }
        progress.early.push(params);
    }

    /// The agent a bot's request to the client goes to: the newest forwarded request
    /// of an agent that declared the capability, else the newest such agent session.
    fn pick_agent(
        &self,
        supports: impl Fn(&ClientCapabilities) -> bool,
    ) -> Option<(Peer<RoleServer>, Option<rmcp::model::RequestId>)> {
        let declares = |peer: &Peer<RoleServer>| {
            peer.peer_info()
                .is_some_and(|info| supports(&info.capabilities))
        };
        let inflight = lock(&self.inflight);
        if let Some(found) = inflight
            .iter()
            .rev()
            .find(|i| declares(&i.peer))
            .map(|i| (i.peer.clone(), Some(i.id.clone())))
        {
            return Some(found);
        }
        drop(inflight);
        self.live_sessions()
            .into_iter()
            .rev()
            .find(|s| declares(&s.peer))
            .map(|s| (s.peer.clone(), None))
    }

    /// Relays a bot's request to an agent and its answer back.
    async fn relay(
        &self,
        mut request: ServerRequest,
        ctx: &RequestContext<RoleClient>,
        supports: impl Fn(&ClientCapabilities) -> bool,
    ) -> Result<ClientResult, ErrorData> {
        let method = match &request {
            ServerRequest::PingRequest(_) => "ping".to_owned(),
            ServerRequest::CreateMessageRequest(_) => "sampling/createMessage".to_owned(),
            ServerRequest::ListRootsRequest(_) => "roots/list".to_owned(),
            ServerRequest::ElicitRequest(_) => "elicitation/create".to_owned(),
            ServerRequest::CustomRequest(r) => r.method.clone(),
            _ => "this request".to_owned(),
        };
        let Some((peer, origin)) = self.pick_agent(supports) else {
            return Err(ErrorData::new(
                ErrorCode::METHOD_NOT_FOUND,
                format!("no agent connected to the bridge supports {method}"),
                None,
            ));
        };
        if let Some(origin) = origin {
            rmcp::model::GetExtensions::extensions_mut(&mut request)
                .insert(OriginatingRequestId(origin));
        }
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| ErrorData::internal_error(format!("relay to agent: {e}"), None))?;
        let id = handle.id.clone();
        tokio::select! {
            answer = handle.rx => match answer {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(rmcp::ServiceError::McpError(e))) => Err(e),
                Ok(Err(e)) => Err(ErrorData::internal_error(format!("relay to agent: {e}"), None)),
                Err(_) => Err(ErrorData::internal_error("relay to agent: agent gone", None)),
            },
            () = ctx.ct.cancelled() => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some("cancelled by the bot".into()),
                    ))
                    .await;
                Err(ErrorData::internal_error("cancelled by the bot", None))
            }
        }
    }
}

/// Unmarks a forwarded request when dropped.
pub(crate) struct Tracked {
    hub: Arc<Hub>,
    seq: u64,
    logs: Option<Arc<LogOutbox>>,
}

impl Tracked {
    /// Sends the log messages still queued for the request (call before answering).
    pub(crate) async fn flush(&self) {
        if let Some(logs) = &self.logs {
            logs.flush().await;
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        lock(&self.hub.inflight).retain(|i| i.seq != self.seq);
    }
}

/// The transport to the bot with progress taken off in arrival order.
///
/// On a resumed session it also moves this run's request ids and progress tokens into
/// its epoch's range (`base`, see `session_store`), and drops answers and progress
/// outside it: they are a previous run's.
struct Tap {
    inner: BrTransport<RoleClient>,
    hub: Arc<Hub>,
    /// `epoch · 2^32`; 0 on a session this run opened.
    base: i64,
}

impl Tap {
    /// A local number to the wire's.
    fn out(&self, n: &mut NumberOrString) {
        if let NumberOrString::Number(n) = n {
            *n = n.saturating_add(self.base);
        }
    }

    /// A wire number back to the local one; `false` if it is not this run's.
    fn back(&self, n: &mut NumberOrString) -> bool {
        match n {
            NumberOrString::Number(v) if (self.base..self.base + EPOCH_SPAN).contains(v) => {
                *v -= self.base;
                true
            }
            NumberOrString::Number(_) => false,
            // rmcp draws numbers only: a string is not one of our ids.
            NumberOrString::String(_) => self.base == 0,
        }
    }

    fn shift_out(&self, item: &mut TxJsonRpcMessage<RoleClient>) {
        match item {
            JsonRpcMessage::Request(r) => {
                self.out(&mut r.id);
                let meta = r.request.get_meta_mut();
                if let Some(mut token) = meta.get_progress_token() {
                    self.out(&mut token.0);
                    meta.set_progress_token(token);
                }
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &mut n.notification
                    && let Some(id) = &mut c.params.request_id
                {
                    self.out(id);
                }
            }
            // Answers to the bot's requests carry the bot's ids.
            _ => {}
        }
    }

    /// `false` for a message of a previous run on this session.
    fn shift_back(&self, message: &mut ServerJsonRpcMessage) -> bool {
        match message {
            JsonRpcMessage::Response(r) => self.back(&mut r.id),
            JsonRpcMessage::Error(e) => e.id.as_mut().is_none_or(|id| self.back(id)),
            JsonRpcMessage::Notification(n) => match &mut n.notification {
                ServerNotification::ProgressNotification(p) => {
                    self.back(&mut p.params.progress_token.0)
                }
                _ => true,
            },
            _ => true,
        }
    }
}

impl Transport<RoleClient> for Tap {
    type Error = AdapterError;

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if self.base != 0 {
            self.shift_out(&mut item);
        }
        Transport::<RoleClient>::send(&mut self.inner, item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let mut message: ServerJsonRpcMessage =
                Transport::<RoleClient>::receive(&mut self.inner).await?;
            if self.base != 0 && !self.shift_back(&mut message) {
                tracing::debug!("a previous run's message on a resumed session dropped");
                continue;
            }
            if let JsonRpcMessage::Notification(n) = &message
                && let ServerNotification::ProgressNotification(p) = &n.notification
            {
                self.hub.on_progress(p.params.clone());
                continue;
            }
            if let JsonRpcMessage::Notification(n) = &message
                && let ServerNotification::LoggingMessageNotification(l) = &n.notification
            {
                self.hub.on_log(l.params.clone());
                continue;
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Transport::<RoleClient>::close(&mut self.inner).await
    }
}

/// The bridge's client side toward a bot: relays what the bot sends on its own.
#[derive(Clone)]
struct LinkHandler {
    hub: Arc<Hub>,
    info: ClientConfig,
}

impl LinkHandler {
    async fn each_session<F, Fut>(&self, f: F)
    where
        F: Fn(Arc<AgentSession>) -> Fut,
        Fut: Future<Output = ()>,
    {
        for session in self.hub.live_sessions() {
            f(session).await;
        }
    }
}

fn expect<T: serde::de::DeserializeOwned>(result: ClientResult) -> Result<T, ErrorData> {
    super::reshape(result, "agent's answer")
}

impl ClientHandler for LinkHandler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        let result = self
            .hub
            .relay(request, &context, |c| c.sampling.is_some())
            .await?;
        expect(result)
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        let result = self
            .hub
            .relay(request, &context, |c| c.roots.is_some())
            .await?;
        expect(result)
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        let result = self
            .hub
            .relay(request, &context, |c| c.elicitation.is_some())
            .await?;
        expect(result)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleClient>,
    ) -> Result<CustomResult, ErrorData> {
        let result = self
            .hub
            .relay(ServerRequest::CustomRequest(request), &context, |_| true)
            .await?;
        expect(result)
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.each_session(|s| {
            let params = params.clone();
            async move {
                let subscribed = lock(&s.subscriptions).contains(&params.uri);
                if subscribed {
                    let _ = s.peer.notify_resource_updated(params).await;
                }
            }
        })
        .await;
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.each_session(|s| async move {
            let _ = s.peer.notify_resource_list_changed().await;
        })
        .await;
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.each_session(|s| async move {
            let _ = s.peer.notify_prompt_list_changed().await;
        })
        .await;
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        // Refresh the cache before the agents hear of it, so their `tools/list` (and
        // the endpoint's schema checks) see the new list.
        match list_all_tools(&context.peer).await {
            Ok(tools) => self.hub.set_tools(tools),
            Err(e) => tracing::debug!(error = %e, "tool list not refreshed"),
        }
        self.each_session(|s| async move {
            let _ = s.peer.notify_tool_list_changed().await;
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{NumberOrString, ServerCapabilities, ServerConfig};
    use rmcp::{RoleServer, ServerHandler};

    struct Quiet;
    impl ServerHandler for Quiet {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::default())
        }
    }

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<ProgressNotificationParam>>>);
    impl ClientHandler for Seen {
        async fn on_progress(
            &self,
            params: ProgressNotificationParam,
            _context: NotificationContext<RoleClient>,
        ) {
            lock(&self.0).push(params);
        }
    }

    /// An agent's server-side peer, and what its client receives.
    async fn agent() -> (
        RunningService<RoleServer, Quiet>,
        RunningService<RoleClient, Seen>,
        Seen,
    ) {
        let (a, b) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move { Quiet.serve(b).await.unwrap() });
        let seen = Seen::default();
        let client = seen.clone().serve(a).await.unwrap();
        (server.await.unwrap(), client, seen)
    }

    fn progress(token: i64, p: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), p)
    }

    #[tokio::test]
    async fn early_progress_is_kept_until_its_call_is_registered() {
        let (server, _client, seen) = agent().await;
        let hub = Hub::new();
        let upstream = ProgressToken(NumberOrString::Number(7));
        // The bot's progress overtakes the registration of its call.
        hub.on_progress(progress(7, 1.0));
        hub.on_progress(progress(7, 2.0));
        hub.on_progress(progress(8, 9.0)); // another call's, never registered
        let agent_token = ProgressToken(NumberOrString::String("agent".into()));
        let route =
            hub.route_progress(upstream.clone(), server.peer().clone(), agent_token.clone());
        hub.on_progress(progress(7, 3.0));
        hub.finish_progress(&upstream, &route).await;
        hub.drop_progress(&ProgressToken(NumberOrString::Number(8)));
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&seen.0).len() < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seen = lock(&seen.0).clone();
        let values: Vec<f64> = seen.iter().map(|p| p.progress).collect();
        assert_eq!(values, vec![1.0, 2.0, 3.0], "in order, none lost");
        assert!(seen.iter().all(|p| p.progress_token == agent_token));
        let state = lock(&hub.progress);
        assert!(state.routes.is_empty() && state.early.is_empty());
    }

    #[test]
    fn early_progress_is_bounded() {
        let hub = Hub::new();
        for token in 0..(EARLY_TOKENS as i64 + 10) {
            for i in 0..(EARLY_PER_TOKEN + 5) {
                hub.on_progress(progress(token, i as f64));
            }
        }
        let lens = lock(&hub.progress).early.lens();
        assert_eq!(lens.len(), EARLY_TOKENS);
        assert!(lens.values().all(|&n| n == EARLY_PER_TOKEN));
        // The oldest tokens went first.
        assert!(!lens.contains_key(&ProgressToken(NumberOrString::Number(0))));
    }
}
