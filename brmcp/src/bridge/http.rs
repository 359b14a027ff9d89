//! The streamable HTTP endpoints: `/mcp/<bot name or 64-hex uid>`, one rmcp
//! `StreamableHttpService` per allowed bot (whichever path reached it), behind these
//! gates in order:
//!
//! 1. `Host` must be one header (a host and an optional numeric port) naming a
//!    loopback name, the address the connection reached, the listen address, or a
//!    name the config allows (DNS rebinding): 403;
//! 2. an `Origin`, when sent, must be `http(s)://` one of those hosts (a page of
//!    another site holding the token still cannot drive the bridge): 403;
//! 3. the settings must enable the endpoint: 404;
//! 4. a remote (non-loopback) agent must come from an address of `allowed_ips`, when
//!    the list is not empty: refused exactly as a wrong token is (below), so a
//!    scanner learns nothing; the last address refused is kept for `bridge status`;
//! 5. `Authorization: Bearer <token>` of the default agent or of one of `agents`, scheme case-insensitive, token compared in
//!    constant time; an empty configured token never authorizes; a raw token without
//!    the scheme is refused: 401 with `WWW-Authenticate: Bearer` (waived only by
//!    [`Config::require_token`](super::Config::require_token) on a loopback bind);
//!    `/payments` (deciding payments) takes the user's approval secret instead: an
//!    agent's token gets 403, anything else 401 (see [`super::approval`]); `/ui`,
//!    the user's page, takes a session opened by a login code made under that
//!    secret (see [`super::ui`]);
//! 6. the path must name an allowed bot, one of the agent's own bots if it has any
//!    (403 otherwise), (the name resolved per request, so a rename
//!    applies at once), or be `/mcp/directory` (the first configured directory's
//!    tools) or `/mcp/directory/<name or uid>`: 404 naming what was asked for;
//! 7. the bot's session must be up, or come up within the connect timeout: 503 with
//!    `Retry-After`, naming the bot and why;
//! 8. a new MCP session must fit the bounds of [`HttpLimits`] (idle ones make room):
//!    503 with `Retry-After`.
//!
//! On the `/mcp` paths a refusal is a JSON-RPC error object (see [`refusal`]) whose
//! message MCP clients show; elsewhere plain text.
//!
//! Before any of these, the [`listener`] holds every request to its header and body
//! deadlines (408) and keeps its connection slots for requests that carry a
//! credential ([`credentialed`]: the page's session, the approval secret, an agent's
//! token), so connections held without one cannot keep those out.
//!
//! `DELETE` of a session answers 204, as the MCP specification allows (rmcp says 202,
//! on which the Python SDK warns).

pub(crate) mod access;
pub(crate) mod listener;
mod payments;
mod refusal;
mod remote;
mod sessions;
mod tasks25;

pub use remote::RefusedAddress;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use brmcp_adapters::PeerId;
use futures_util::StreamExt;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::directory::DirectoryServer;
use super::link::BotLink;
use super::presence::Ownership;
use super::proxy::ProxyServer;
use super::settings::Caller;
use super::{BridgeError, Inner, Settings, lock};
use access::{
    allowed_hosts, authorize_user, authorized, caller_of, host_allowed, not_the_agents_bot,
    origin_allowed, token_key,
};
use payments::{PAYMENTS_PATH, payments};
use refusal::{Form, echoed, plain, retry_after};
use remote::{Refusals, peer_allowed};
use sessions::Sessions;

/// How long a stopping listener waits for open requests before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Default bound on open connections to the owned listener: 256, well under the
/// usual 1024 descriptors, yet far more than the agents of one user open.
pub const MAX_CONNECTIONS: usize = 256;

/// Default bound on the connections that have not yet carried a credential: 192,
/// three quarters of [`MAX_CONNECTIONS`]. Past it the oldest such connection is
/// dropped for a new one, so the last quarter is only ever held by connections that
/// proved a credential (an agent's token, the approval secret, a page's session).
pub const MAX_UNPROVEN_CONNECTIONS: usize = 192;

/// Default time a connection just accepted keeps its slot before a newer one may take
/// it: 100 ms, ample for a client that sends its headers at once to have them read on
/// a loaded machine. Without it a process that reconnects as fast as it is dropped
/// turns the unproven slots over faster than a real client's headers are read; with
/// it, the slots turn over at most [`MAX_UNPROVEN_CONNECTIONS`] times per grace (1,920
/// connections a second), so a burst of connections queued ahead of a client delays it
/// by one grace per share of them, not by their timeouts.
pub const UNPROVEN_GRACE: Duration = Duration::from_millis(100);

/// Default time a connection has to send a request's headers (and an idle
/// keep-alive connection to start its next request): 10 s. Real clients send their
/// headers at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default time a request's whole body has to arrive once its headers have: 10 s,
/// one deadline however the body trickles (408 past it). The bodies here are JSON
/// messages and forms a client sends at once; a body held back only holds a slot.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default bound on the MCP sessions of one bearer token (one agent), over all bots:
/// 32, half of [`MAX_SESSIONS`], an agent's share: however many one agent opens and
/// keeps busy, the others keep the other half, and its new sessions close only its
/// own or those of an agent holding more. A session costs about 60 KB; agents open
/// one each.
pub const MAX_SESSIONS_PER_TOKEN: usize = 32;

/// Default bound on all MCP sessions of the endpoints: 64.
pub const MAX_SESSIONS: usize = 64;

/// Default time a session with no open request lives on: 10 minutes, long enough for
/// an agent that pauses between calls.
pub const SESSION_IDLE: Duration = Duration::from_secs(600);

/// The HTTP endpoints' bounds; [`Default`] gives the constants above.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct HttpLimits {
    /// Open connections to the owned listener.
    pub max_connections: usize,
    /// Open connections that have not yet carried a credential (at most
    /// `max_connections`); past it the oldest of them is dropped for a new one.
    pub max_unproven_connections: usize,
    /// Time an unproven connection keeps its slot before a newer one may take it.
    pub unproven_grace: Duration,
    /// Time to send a request's headers.
    pub header_read_timeout: Duration,
    /// Time to send a request's whole body once its headers are in.
    pub body_read_timeout: Duration,
    /// MCP sessions per bearer token.
    pub max_sessions_per_token: usize,
    /// MCP sessions in all.
    pub max_sessions: usize,
    /// Time an idle session lives on.
    pub session_idle: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS,
            max_unproven_connections: MAX_UNPROVEN_CONNECTIONS,
            unproven_grace: UNPROVEN_GRACE,
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            max_sessions_per_token: MAX_SESSIONS_PER_TOKEN,
            max_sessions: MAX_SESSIONS,
            session_idle: SESSION_IDLE,
        }
    }
}

/// What an MCP endpoint serves: one bot, or the tools of one directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Endpoint {
    /// `/mcp/<uid>`.
    Bot(PeerId),
    /// `/mcp/directory[/<name>]`, by the directory's uid.
    Directory(PeerId),
}

/// The path prefix of the directory endpoints.
pub(crate) const DIRECTORY_PATH: &str = "/mcp/directory";

enum Handler {
    Bot(StreamableHttpService<ProxyServer, LocalSessionManager>),
    Directory(StreamableHttpService<DirectoryServer, LocalSessionManager>),
}

struct BotService {
    service: Handler,
    sessions: Arc<LocalSessionManager>,
    ct: CancellationToken,
}

struct Listener {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct Listening {
    /// `start` was called: the listener follows the settings.
    owned: bool,
    listener: Option<Listener>,
}

/// The endpoints' state: the owned listener and one service per bot.
pub(crate) struct HttpState {
    state: tokio::sync::Mutex<Listening>,
    addr: Mutex<Option<SocketAddr>>,
    /// Cancelled to sever every stream of the current token; replaced after.
    generation: Mutex<CancellationToken>,
    services: Mutex<HashMap<Endpoint, Arc<BotService>>>,
    sessions: Sessions,
    /// The data directory's ownership, when this bridge is its process's: each bind
    /// is recorded for `bridge stdio` and `approvals` to find.
    owner: Mutex<Option<Arc<Ownership>>>,
    /// The last remote address `allowed_ips` refused.
    refusals: Refusals,
    /// The user's page's sessions.
    pub(crate) ui: super::ui::UiState,
    /// The agents' shares of each bot's rate limit.
    pub(crate) fair_shares: super::fair_share::FairShares,
}

impl HttpState {
    /// The state of a bridge whose bots each allow `bot_calls_per_minute`.
    pub(crate) fn new(bot_calls_per_minute: u32) -> Self {
        Self {
            state: tokio::sync::Mutex::default(),
            addr: Mutex::new(None),
            generation: Mutex::new(CancellationToken::new()),
            services: Mutex::default(),
            sessions: Sessions::default(),
            owner: Mutex::new(None),
            refusals: Refusals::default(),
            ui: super::ui::UiState::default(),
            fair_shares: super::fair_share::FairShares::new(bot_calls_per_minute),
        }
    }

    /// The last remote address `allowed_ips` refused, and when.
    pub(crate) fn last_refused(&self) -> Option<RefusedAddress> {
        self.refusals.last()
    }

    /// Takes `ownership` of the data directory: the listener's address is recorded
    /// now if it runs, and at each bind from now on.
    pub(crate) fn own(&self, ownership: Ownership) {
        let ownership = Arc::new(ownership);
        *lock(&self.owner) = Some(ownership.clone());
        // After storing it: a bind from now on records itself.
        if let Some(addr) = self.addr() {
            publish(&ownership, addr);
        }
    }

    pub(crate) fn addr(&self) -> Option<SocketAddr> {
        *lock(&self.addr)
    }

    /// Ends every agent session of `bot`.
    pub(crate) async fn drop_bot(&self, bot: &PeerId) {
        self.drop_endpoint(Endpoint::Bot(*bot)).await;
    }

    /// Ends every agent session of the directory endpoint of `directory`.
    pub(crate) async fn drop_directory(&self, directory: &PeerId) {
        self.drop_endpoint(Endpoint::Directory(*directory)).await;
    }

    async fn drop_endpoint(&self, endpoint: Endpoint) {
        let service = lock(&self.services).remove(&endpoint);
        self.sessions.forget_bot(Some(&endpoint));
        if let Some(service) = service {
            close_service(&service).await;
        }
    }

    /// Ends every agent session of every bot (the token changed, or the listener
    /// stops).
    async fn sever_all(&self) {
        let old = std::mem::replace(&mut *lock(&self.generation), CancellationToken::new());
        old.cancel();
        let services: Vec<_> = lock(&self.services).drain().map(|(_, s)| s).collect();
        self.sessions.forget_bot(None);
        for service in services {
            close_service(&service).await;
        }
    }

    /// Closes sessions the registry let go of.
    async fn close_sessions(&self, gone: Vec<(Endpoint, String)>) {
        for (bot, id) in gone {
            let service = lock(&self.services).get(&bot).cloned();
            if let Some(service) = service {
                let _ = service.sessions.close_session(&id.into()).await;
            }
        }
    }

    /// The endpoint's service, made on first use by `make` (given the session manager
    /// and the rmcp config).
    fn service(
        &self,
        endpoint: Endpoint,
        make: impl FnOnce(Arc<LocalSessionManager>, StreamableHttpServerConfig) -> Handler,
    ) -> Arc<BotService> {
        let mut services = lock(&self.services);
        if let Some(s) = services.get(&endpoint) {
            return s.clone();
        }
        let ct = lock(&self.generation).child_token();
        let mut manager = LocalSessionManager::default();
        // The registry expires idle sessions; rmcp's own timer would also end those
        // that only hold an event stream open.
        manager.session_config.keep_alive = None;
        let sessions = Arc::new(manager);
        // The gate checked Host (with the connection's address, which rmcp lacks).
        let config = StreamableHttpServerConfig::default()
            .disable_allowed_hosts()
            .with_cancellation_token(ct.clone());
        let service = Arc::new(BotService {
            service: make(sessions.clone(), config),
            sessions,
            ct,
        });
        services.insert(endpoint, service.clone());
        service
    }

    /// The service of `link`'s bot.
    fn bot_service(&self, inner: &Arc<Inner>, link: &Arc<BotLink>) -> Arc<BotService> {
        self.link_service(inner, link, Endpoint::Bot, Handler::Bot, ProxyServer::new)
    }

    /// The service of the directory tools of `link`'s directory.
    fn directory_service(&self, inner: &Arc<Inner>, link: &Arc<BotLink>) -> Arc<BotService> {
        self.link_service(
            inner,
            link,
            Endpoint::Directory,
            Handler::Directory,
            DirectoryServer::new,
        )
    }

    /// The `endpoint` service of `link`: each MCP session gets a fresh `server` while
    /// the bridge is open.
    fn link_service<S>(
        &self,
        inner: &Arc<Inner>,
        link: &Arc<BotLink>,
        endpoint: fn(PeerId) -> Endpoint,
        handler: fn(StreamableHttpService<S, LocalSessionManager>) -> Handler,
        server: fn(Arc<Inner>, Arc<BotLink>) -> S,
    ) -> Arc<BotService>
    where
        S: rmcp::ServerHandler + Send + 'static,
    {
        let weak: Weak<Inner> = Arc::downgrade(inner);
        let link = link.clone();
        self.service(endpoint(link.bot), move |sessions, config| {
            handler(StreamableHttpService::new(
                move || {
                    let inner = weak
                        .upgrade()
                        .ok_or_else(|| std::io::Error::other("bridge closed"))?;
                    Ok(server(inner, link.clone()))
                },
                sessions,
                config,
            ))
        })
    }
}

async fn close_service(service: &BotService) {
    service.ct.cancel();
    let ids: Vec<_> = service
        .sessions
        .sessions
        .read()
        .await
        .keys()
        .cloned()
        .collect();
    for id in ids {
        let _ = service.sessions.close_session(&id).await;
    }
}

async fn endpoint(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    gate(inner, None, peer, request).await
}

/// Whether `parts`, a request's headers, carry a valid credential for its path: the
/// page's session under `/ui`, the approval secret on `/payments`, else an agent's
/// token (or any request to the MCP endpoints when the token is waived). A request
/// that does makes its connection one the listener keeps (see [`listener`]).
fn credentialed(inner: &Inner, parts: &Parts) -> bool {
    let path = parts.uri.path();
    if super::ui::is_ui_path(path) {
        return super::ui::credentialed(inner, parts);
    }
    if path.starts_with(PAYMENTS_PATH) {
        return authorize_user(&inner.config.data_dir, &parts.headers);
    }
    if refusal::is_mcp_path(path)
        && !inner.config.require_token
        && inner.config.listen.ip().is_loopback()
    {
        return true;
    }
    authorized(&lock(&inner.settings), &parts.headers)
}

/// Answers `request`, which reached the local address `local` from `peer` (when
/// known).
async fn gate(
    inner: Arc<Inner>,
    local: Option<SocketAddr>,
    peer: Option<SocketAddr>,
    mut request: Request,
) -> Response {
    let form = Form::of(request.uri().path());
    let allowed = allowed_hosts(&inner.config, local);
    if !host_allowed(&allowed, request.headers()) {
        return form.refuse(
            StatusCode::FORBIDDEN,
            "forbidden: host not allowed (the bridge accepts a remote name given with \
             --allow-host)",
        );
    }
    if !origin_allowed(&allowed, request.headers()) {
        return form.refuse(
            StatusCode::FORBIDDEN,
            "forbidden: origin not allowed (pages of other sites may not call the bridge)",
        );
    }
    let settings = inner.settings();
    if !settings.enabled {
        return form.refuse(
            StatusCode::NOT_FOUND,
            "not found: the bridge's endpoints are disabled",
        );
    }
    let now = inner.config.clock.now();
    if !peer_allowed(&settings, &inner.http.refusals, peer, now) {
        return form.unauthorized(request.headers());
    }
    if super::ui::is_ui_path(request.uri().path()) {
        // The user's page: its own login; an agent's token opens nothing there.
        let agent = authorized(&settings, request.headers());
        return super::ui::handle(inner, request, agent).await;
    }
    if let Some(rest) = request.uri().path().strip_prefix(PAYMENTS_PATH) {
        // Deciding payments is the user's: an agent's token is known but not enough.
        if authorize_user(&inner.config.data_dir, request.headers()) {
            return payments(&inner, request.method(), rest);
        }
        if authorized(&settings, request.headers()) {
            return plain(
                StatusCode::FORBIDDEN,
                "forbidden: deciding payments takes the approval secret, not an agent's token",
            );
        }
        return form.unauthorized(request.headers());
    }
    let token_waived = !inner.config.require_token && inner.config.listen.ip().is_loopback();
    let caller = match caller_of(&settings, request.headers()) {
        Some(caller) => caller,
        None if token_waived => Caller::Default,
        None => return form.unauthorized(request.headers()),
    };
    let (link, endpoint) = match served(&inner, &settings, request.uri().path()) {
        Ok(served) => served,
        Err(message) => return form.refuse(StatusCode::NOT_FOUND, &message),
    };
    if let Some(message) = not_the_agents_bot(&settings, &caller, endpoint) {
        return form.refuse(StatusCode::FORBIDDEN, &message);
    }
    // The proxy reads who pays from the request's parts.
    request.extensions_mut().insert(caller);
    if let Err(e) = link.ensure().await {
        tracing::debug!(bot = %link.bot, error = %e, "503");
        let what = match endpoint {
            Endpoint::Bot(uid) => format!("bot unavailable: {}", settings.bot_label(&uid)),
            Endpoint::Directory(uid) => format!("directory unavailable: {uid}"),
        };
        let secs = inner.config.retry_after.as_secs();
        return retry_after(
            secs,
            form.refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("{what}: {e}; retry in {} s", secs.max(1)),
            ),
        );
    }
    let service = match endpoint {
        Endpoint::Bot(_) => inner.http.bot_service(&inner, &link),
        Endpoint::Directory(_) => inner.http.directory_service(&inner, &link),
    };
    session_request(&inner, endpoint, &service, request).await
}

/// The link and endpoint `path` names: `/mcp/<bot name or uid>` (the name resolved
/// now, so a rename applies at once; by either, the bot's one endpoint),
/// `/mcp/directory[/<name or uid>]`; else the refusal's message.
fn served(
    inner: &Arc<Inner>,
    settings: &Settings,
    path: &str,
) -> Result<(Arc<BotLink>, Endpoint), String> {
    let directory = match path.strip_prefix(DIRECTORY_PATH) {
        Some("" | "/") => Some(None),
        Some(rest) => rest.strip_prefix('/').map(Some),
        None => None,
    };
    if let Some(name) = directory {
        let uid = settings.directory(name).and_then(|d| d.peer());
        let Some(link) = uid.and_then(|uid| inner.directory_link(&uid)) else {
            return Err(match name {
                Some(name) => format!(
                    "unknown directory {}: not a name or uid of mcpclient.json's `directories`",
                    echoed(name)
                ),
                None => "unknown directory: mcpclient.json lists no `directories`".to_owned(),
            });
        };
        let endpoint = Endpoint::Directory(link.bot);
        return Ok((link, endpoint));
    }
    let Some(bot) = path.strip_prefix("/mcp/") else {
        return Err(
            "not found: the MCP endpoints are /mcp/<bot name or uid> and /mcp/directory".into(),
        );
    };
    let Some(link) = settings.resolve(bot).and_then(|uid| inner.link(&uid)) else {
        return Err(format!(
            "unknown bot {}: not the name or uid of an allowed bot (`brmcp bridge --datadir \
             DIR bots list` lists them)",
            echoed(bot)
        ));
    };
    let endpoint = Endpoint::Bot(link.bot);
    Ok((link, endpoint))
}

/// Hands `request` to the bot's service under the session bounds.
async fn session_request(
    inner: &Arc<Inner>,
    endpoint: Endpoint,
    service: &BotService,
    request: Request,
) -> Response {
    let http = &inner.http;
    let limits = &inner.config.http_limits;
    http.close_sessions(http.sessions.expire(limits)).await;
    let method = request.method().clone();
    let session = request
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut busy = None;
    let mut reservation = None;
    match &session {
        Some(id) => busy = http.sessions.touch(&endpoint, id),
        None if method == axum::http::Method::POST => {
            match http.sessions.admit(token_key(request.headers()), limits) {
                Ok((held, evicted)) => {
                    http.close_sessions(evicted).await;
                    reservation = Some(held);
                }
                Err(full) => {
                    let secs = inner.config.retry_after.as_secs();
                    let agent = request
                        .extensions()
                        .get::<Caller>()
                        .map_or(super::settings::DEFAULT_AGENT, Caller::name);
                    let whose = match full {
                        sessions::Full::Token => format!(
                            "agent {agent:?} holds its share of the bridge's MCP sessions ({} \
                             of {}), each busy",
                            limits.max_sessions_per_token, limits.max_sessions
                        ),
                        sessions::Full::Bridge => format!(
                            "the bridge holds its most MCP sessions ({}), none of them one \
                             agent {agent:?} may close",
                            limits.max_sessions
                        ),
                    };
                    return retry_after(
                        secs,
                        Form::JsonRpc.refuse(
                            StatusCode::SERVICE_UNAVAILABLE,
                            &format!(
                                "too many sessions: {whose} (idle ones close after {} s); retry \
                                 in {} s",
                                limits.session_idle.as_secs(),
                                secs.max(1)
                            ),
                        ),
                    );
                }
            }
        }
        None => {}
    }
    // The 2025-11-25 form of tasks, which rmcp does not speak.
    let (request, seen) = match tasks25::inspect(inner, endpoint, session.as_deref(), request).await
    {
        tasks25::Inspected::Passed(request, seen) => (request, seen),
        tasks25::Inspected::Answered(answer) => return answer,
    };
    let response = match &service.service {
        Handler::Bot(s) => s.handle(request).await.map(Body::new),
        Handler::Directory(s) => s.handle(request).await.map(Body::new),
    };
    let (response, tasks) = tasks25::finish(inner, endpoint, seen, response).await;
    if let Some(held) = reservation
        && let Some(id) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        busy = Some(http.sessions.register(held, endpoint, id));
        if let Some(tasks) = tasks {
            http.sessions.set_tasks(id, tasks);
        }
    }
    if method == axum::http::Method::DELETE {
        if let Some(id) = &session {
            drop(busy.take());
            http.sessions.forget(id);
        }
        if response.status() == StatusCode::ACCEPTED {
            return StatusCode::NO_CONTENT.into_response();
        }
    }
    match busy {
        // The session stays busy until its response (an event stream, say) ends.
        Some(busy) => response.map(|body| {
            Body::from_stream(body.into_data_stream().map(move |chunk| {
                let _ = &busy;
                chunk
            }))
        }),
        None => response,
    }
}

/// The MCP session header.
const SESSION_HEADER: &str = "mcp-session-id";

/// The endpoints as a router.
pub(crate) fn app(inner: Arc<Inner>) -> axum::Router {
    axum::Router::new().fallback(endpoint).with_state(inner)
}

/// Marks the listener as owned and starts it if the settings enable it.
pub(crate) async fn start(inner: &Arc<Inner>) -> Result<(), BridgeError> {
    let mut state = inner.http.state.lock().await;
    state.owned = true;
    if inner.settings().enabled && state.listener.is_none() {
        state.listener = Some(bind(inner).await?);
    }
    Ok(())
}

/// Stops the listener, severing its streams.
pub(crate) async fn stop(inner: &Arc<Inner>) {
    let mut state = inner.http.state.lock().await;
    state.owned = false;
    let listener = state.listener.take();
    drop(state);
    inner.http.sever_all().await;
    if let Some(listener) = listener {
        shutdown(inner, listener).await;
    }
}

/// Brings the listener in line with changed settings.
pub(crate) async fn reconcile(
    inner: &Arc<Inner>,
    old: &Settings,
    new: &Settings,
) -> Result<(), BridgeError> {
    // A removed agent (or a changed token) loses its streams; adding one severs none.
    let agent_gone = old
        .agents
        .iter()
        .any(|a| !new.agents.iter().any(|b| b.token_sha256 == a.token_sha256));
    let token_changed = old.token != new.token || old.enabled != new.enabled || agent_gone;
    if token_changed {
        inner.http.sever_all().await;
    }
    let mut state = inner.http.state.lock().await;
    if !state.owned {
        return Ok(());
    }
    // Every request is checked against the settings of its moment, so a new token needs
    // no new listener: the one running keeps the connections it has queued. Only a
    // remote address left without a token must stop.
    if (!new.enabled || !may_listen(&inner.config, new))
        && let Some(listener) = state.listener.take()
    {
        shutdown(inner, listener).await;
    }
    if new.enabled && state.listener.is_none() {
        state.listener = Some(bind(inner).await?);
    }
    Ok(())
}

/// Whether the configured address may be listened on under `settings`: a loopback one
/// always, a remote one only when allowed and guarded by a token.
fn may_listen(config: &super::Config, settings: &Settings) -> bool {
    config.listen.ip().is_loopback() || (config.allow_remote && !settings.token.is_empty())
}

async fn bind(inner: &Arc<Inner>) -> Result<Listener, BridgeError> {
    let config = &inner.config;
    let addr = config.listen;
    if !may_listen(config, &inner.settings()) {
        return Err(BridgeError::RemoteRefused(addr));
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrInUse
                && config.listen_fallback
                && addr.ip().is_loopback() =>
        {
            let ephemeral = SocketAddr::new(addr.ip(), 0);
            tracing::info!(%addr, "listen address taken; binding an ephemeral port");
            tokio::net::TcpListener::bind(ephemeral).await
        }
        bound => bound,
    }
    .map_err(|source| BridgeError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| BridgeError::Bind { addr, source })?;
    let stop = CancellationToken::new();
    let answering = inner.clone();
    let classifying = Arc::downgrade(inner);
    let task = tokio::spawn(listener::run(
        listener,
        move |local, peer, request| gate(answering.clone(), local, peer, request),
        move |parts: &Parts| {
            classifying
                .upgrade()
                .is_some_and(|inner| credentialed(&inner, parts))
        },
        config.http_limits,
        stop.clone(),
    ));
    tokio::spawn(sweep(Arc::downgrade(inner), stop.clone()));
    *lock(&inner.http.addr) = Some(bound);
    if let Some(owner) = lock(&inner.http.owner).as_ref() {
        publish(owner, bound);
    }
    tracing::info!(addr = %bound, "bridge listening");
    Ok(Listener {
        addr: bound,
        stop,
        task,
    })
}

/// Closes idle sessions while the listener runs, even when no new session comes.
async fn sweep(inner: Weak<Inner>, stop: CancellationToken) {
    loop {
        let Some(every) = inner
            .upgrade()
            .map(|i| (i.config.http_limits.session_idle / 4).max(Duration::from_millis(50)))
        else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        let Some(inner) = inner.upgrade() else { return };
        let gone = inner.http.sessions.expire(&inner.config.http_limits);
        inner.http.close_sessions(gone).await;
    }
}

async fn shutdown(inner: &Arc<Inner>, listener: Listener) {
    let Listener {
        addr,
        stop,
        mut task,
    } = listener;
    stop.cancel();
    if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
        .await
        .is_err()
    {
        task.abort();
    }
    if let Some(owner) = lock(&inner.http.owner).as_ref() {
        owner.withdraw(addr);
    }
    let mut current = lock(&inner.http.addr);
    if *current == Some(addr) {
        *current = None;
    }
}

/// Records `addr` for the data directory's other commands; a failure only costs
/// them finding this bridge, so it is logged, not fatal.
fn publish(owner: &Ownership, addr: SocketAddr) {
    if let Err(e) = owner.publish(addr) {
        tracing::warn!(error = %e, "bridge endpoint not recorded");
    }
}
