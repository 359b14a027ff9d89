//! The streamable HTTP endpoints: `/mcp/<64-hex bot uid>`, one rmcp
//! `StreamableHttpService` per allowed bot, behind these gates in order:
//!
//! 1. `Host` must be a loopback name or one the config allows (DNS rebinding): 403;
//! 2. the settings must enable the endpoint: 404;
//! 3. `Authorization: Bearer <token>`, scheme case-insensitive, token compared in
//!    constant time; an empty configured token never authorizes; a raw token without
//!    the scheme is refused: 401 with `WWW-Authenticate: Bearer` (waived only by
//!    [`Config::require_token`](super::Config::require_token) on a loopback bind);
//! 4. the path must name an allowed bot: 404;
//! 5. the bot's session must be up, or come up within the connect timeout: 503 with
//!    `Retry-After`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use brmcp_adapters::PeerId;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::link::BotLink;
use super::proxy::ProxyServer;
use super::{BridgeError, Inner, Settings, lock};

/// How long a stopping listener waits for open requests before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Host names always accepted: the loopback names.
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

type Service = StreamableHttpService<ProxyServer, LocalSessionManager>;

struct BotService {
    service: Service,
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
    services: Mutex<HashMap<PeerId, Arc<BotService>>>,
}

impl HttpState {
    pub(crate) fn new() -> Self {
        Self {
            state: tokio::sync::Mutex::default(),
            addr: Mutex::new(None),
            generation: Mutex::new(CancellationToken::new()),
            services: Mutex::default(),
        }
    }

    pub(crate) fn addr(&self) -> Option<SocketAddr> {
        *lock(&self.addr)
    }

    /// Ends every agent session of `bot`.
    pub(crate) async fn drop_bot(&self, bot: &PeerId) {
        let service = lock(&self.services).remove(bot);
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
        for service in services {
            close_service(&service).await;
        }
    }

    fn service(&self, inner: &Arc<Inner>, link: &Arc<BotLink>) -> Service {
        let mut services = lock(&self.services);
        if let Some(s) = services.get(&link.bot) {
            return s.service.clone();
        }
        let ct = lock(&self.generation).child_token();
        let sessions = Arc::new(LocalSessionManager::default());
        let config = StreamableHttpServerConfig::default()
            .with_allowed_hosts(allowed_hosts(&inner.config))
            .with_cancellation_token(ct.clone());
        let weak: Weak<Inner> = Arc::downgrade(inner);
        let factory_link = link.clone();
        let service = StreamableHttpService::new(
            move || {
                let inner = weak
                    .upgrade()
                    .ok_or_else(|| std::io::Error::other("bridge closed"))?;
                Ok(ProxyServer::new(inner, factory_link.clone()))
            },
            sessions.clone(),
            config,
        );
        services.insert(
            link.bot,
            Arc::new(BotService {
                service: service.clone(),
                sessions,
                ct,
            }),
        );
        service
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

fn allowed_hosts(config: &super::Config) -> Vec<String> {
    let mut hosts: Vec<String> = LOOPBACK_HOSTS.iter().map(|h| (*h).to_owned()).collect();
    hosts.extend(config.allowed_hosts.iter().cloned());
    if !config.listen.ip().is_loopback() && !config.listen.ip().is_unspecified() {
        hosts.push(config.listen.ip().to_string());
    }
    hosts
}

/// The host part and port of a `Host` header (`[::1]:80`, `localhost`, `a.b:8891`).
fn split_host(value: &str) -> (&str, Option<&str>) {
    if let Some(rest) = value.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return (value, None);
        };
        return (host, after.strip_prefix(':'));
    }
    match value.rsplit_once(':') {
        Some((host, port)) if !host.contains(':') => (host, Some(port)),
        _ => (value, None),
    }
}

fn host_allowed(config: &super::Config, headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let (host, port) = split_host(value.trim());
    allowed_hosts(config).iter().any(|allowed| {
        let (a_host, a_port) = split_host(allowed);
        a_host.eq_ignore_ascii_case(host) && a_port.is_none_or(|p| Some(p) == port)
    })
}

/// Whether the `Authorization` header carries the configured token.
fn authorized(settings: &Settings, headers: &HeaderMap) -> bool {
    if settings.token.is_empty() {
        return false;
    }
    let Some(value) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, token)) = value.trim().split_once(' ') else {
        return false;
    };
    if !scheme.eq_ignore_ascii_case("bearer") {
        return false;
    }
    // Comparing digests takes the same time whatever the tokens' contents and lengths.
    let a = Sha256::digest(token.trim().as_bytes());
    let b = Sha256::digest(settings.token.as_bytes());
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{text}\n"),
    )
        .into_response()
}

async fn endpoint(State(inner): State<Arc<Inner>>, request: Request) -> Response {
    if !host_allowed(&inner.config, request.headers()) {
        return plain(StatusCode::FORBIDDEN, "forbidden: host not allowed");
    }
    let settings = inner.settings();
    if !settings.enabled {
        return plain(StatusCode::NOT_FOUND, "not found");
    }
    let token_waived = !inner.config.require_token && inner.config.listen.ip().is_loopback();
    if !token_waived && !authorized(&settings, request.headers()) {
        let mut response = plain(StatusCode::UNAUTHORIZED, "unauthorized");
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    if let Some(rest) = request.uri().path().strip_prefix(PAYMENTS_PATH) {
        return payments(&inner, request.method(), rest);
    }
    let bot = request
        .uri()
        .path()
        .strip_prefix("/mcp/")
        .and_then(|uid| uid.parse::<PeerId>().ok());
    let Some(link) = bot.and_then(|bot| inner.link(&bot)) else {
        return plain(StatusCode::NOT_FOUND, "unknown bot");
    };
    if let Err(e) = link.ensure().await {
        tracing::debug!(bot = %link.bot, error = %e, "503");
        let mut response = plain(StatusCode::SERVICE_UNAVAILABLE, "bot unavailable");
        let secs = inner.config.retry_after.as_secs().max(1);
        if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return response;
    }
    let service = inner.http.service(&inner, &link);
    service.handle(request).await.map(Body::new)
}

/// Where the payments waiting for approval are listed and decided, behind the same
/// token as the MCP endpoints: `GET /payments`, `POST /payments/<id>/approve|deny`.
pub(crate) const PAYMENTS_PATH: &str = "/payments";

fn payments(inner: &Inner, method: &axum::http::Method, rest: &str) -> Response {
    let json = |status: StatusCode, value: serde_json::Value| {
        (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            value.to_string(),
        )
            .into_response()
    };
    match (method.as_str(), rest.trim_end_matches('/')) {
        ("GET", "") => {
            let list: Vec<serde_json::Value> = inner
                .policy
                .pending()
                .into_iter()
                .map(|p| {
                    serde_json::json!({
                        "id": p.id,
                        "bot": p.bot.to_string(),
                        "tool": p.tool,
                        "atoms": p.atoms,
                        "created": p.created.secs(),
                    })
                })
                .collect();
            json(StatusCode::OK, serde_json::Value::Array(list))
        }
        ("POST", path) => {
            let Some((id, verb)) = path.strip_prefix('/').and_then(|p| p.rsplit_once('/')) else {
                return plain(StatusCode::NOT_FOUND, "not found");
            };
            let approve = match verb {
                "approve" => true,
                "deny" => false,
                _ => return plain(StatusCode::NOT_FOUND, "not found"),
            };
            if inner.policy.decide(id, approve) {
                json(
                    StatusCode::OK,
                    serde_json::json!({"id": id, "approved": approve}),
                )
            } else {
                plain(StatusCode::NOT_FOUND, "no such payment waiting")
            }
        }
        _ => plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}

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
    let token_changed = old.token != new.token || old.enabled != new.enabled;
    if token_changed {
        inner.http.sever_all().await;
    }
    let mut state = inner.http.state.lock().await;
    if !state.owned {
        return Ok(());
    }
    let restart = new.enabled && state.listener.is_some() && old.token != new.token;
    if (!new.enabled || restart)
        && let Some(listener) = state.listener.take()
    {
        shutdown(inner, listener).await;
    }
    if new.enabled && state.listener.is_none() {
        state.listener = Some(bind(inner).await?);
    }
    Ok(())
}

async fn bind(inner: &Arc<Inner>) -> Result<Listener, BridgeError> {
    let config = &inner.config;
    let addr = config.listen;
    if !addr.ip().is_loopback() && (!config.allow_remote || inner.settings().token.is_empty()) {
        return Err(BridgeError::RemoteRefused(addr));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| BridgeError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| BridgeError::Bind { addr, source })?;
    let stop = CancellationToken::new();
    let app = app(inner.clone());
    let signal = stop.clone().cancelled_owned();
    let task = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(signal)
            .await
        {
            tracing::warn!(error = %e, "bridge listener failed");
        }
    });
    *lock(&inner.http.addr) = Some(bound);
    tracing::info!(addr = %bound, "bridge listening");
    Ok(Listener {
        addr: bound,
        stop,
        task,
    })
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
    let mut current = lock(&inner.http.addr);
    if *current == Some(addr) {
        *current = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_header_forms() {
        assert_eq!(split_host("localhost:8891"), ("localhost", Some("8891")));
        assert_eq!(split_host("[::1]:80"), ("::1", Some("80")));
        assert_eq!(split_host("::1"), ("::1", None));
        assert_eq!(split_host("example.com"), ("example.com", None));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive_and_required() {
        let settings = Settings {
            token: "s3cret".into(),
            ..Settings::default()
        };
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
            authorized(&settings, &h)
        };
        assert!(with("Bearer s3cret"));
        assert!(with("bearer s3cret"));
        assert!(with("BEARER s3cret"));
        assert!(!with("s3cret"), "a raw token is refused");
        assert!(!with("Bearer s3cre"));
        assert!(!with("Bearer s3crett"));
        assert!(!with("Basic s3cret"));
        assert!(!authorized(&settings, &HeaderMap::new()));
        let empty = Settings::default();
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert!(!authorized(&empty, &h), "an empty token never authorizes");
    }
}
