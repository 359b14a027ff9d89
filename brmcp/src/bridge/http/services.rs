//! One rmcp `StreamableHttpService` per endpoint, made on first use and closed with
//! its sessions when its bot goes or the token changes; and each request handed to it
//! under the session bounds of [`Sessions`](super::sessions::Sessions).

use std::sync::{Arc, Weak};

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use brmcp_adapters::PeerId;
use futures_util::StreamExt;
use rmcp::transport::streamable_http_server::session::SessionManager;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::access::token_key;
use super::refusal::{Form, retry_after};
use super::{Endpoint, HttpState, sessions, tasks25};
use crate::bridge::calls::Delivery;
use crate::bridge::directory::DirectoryServer;
use crate::bridge::link::BotLink;
use crate::bridge::proxy::ProxyServer;
use crate::bridge::settings::Caller;
use crate::bridge::{Inner, lock};

enum Handler {
    Bot(StreamableHttpService<ProxyServer, LocalSessionManager>),
    Directory(StreamableHttpService<DirectoryServer, LocalSessionManager>),
}

pub(super) struct BotService {
    service: Handler,
    sessions: Arc<LocalSessionManager>,
    ct: CancellationToken,
}

impl HttpState {
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
    pub(super) async fn sever_all(&self) {
        let old = std::mem::replace(&mut *lock(&self.generation), CancellationToken::new());
        old.cancel();
        let services: Vec<_> = lock(&self.services).drain().map(|(_, s)| s).collect();
        self.sessions.forget_bot(None);
        for service in services {
            close_service(&service).await;
        }
    }

    /// Closes sessions the registry let go of.
    pub(super) async fn close_sessions(&self, gone: Vec<(Endpoint, String)>) {
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
    pub(super) fn bot_service(&self, inner: &Arc<Inner>, link: &Arc<BotLink>) -> Arc<BotService> {
        self.link_service(inner, link, Endpoint::Bot, Handler::Bot, ProxyServer::new)
    }

    /// The service of the directory tools of `link`'s directory.
    pub(super) fn directory_service(
        &self,
        inner: &Arc<Inner>,
        link: &Arc<BotLink>,
    ) -> Arc<BotService> {
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

/// Hands `request` to the bot's service under the session bounds.
pub(super) async fn session_request(
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
                        .map_or(crate::bridge::settings::DEFAULT_AGENT, Caller::name);
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
    // A paid answer counts as delivered once the response carrying it was written.
    let mut request = request;
    // A new request or the session's end (not a stream resumed, which says something
    // was missed) shows the agent took the answers sent on the session before.
    if let Some(session) = &session
        && method != axum::http::Method::GET
    {
        inner.calls.acknowledged(session);
    }
    let delivery =
        (method == axum::http::Method::POST).then(|| Delivery::new(inner, session.clone()));
    if let Some(delivery) = &delivery {
        request.extensions_mut().insert(delivery.clone());
    }
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
    let response = match delivery {
        Some(delivery) => response.map(|body| delivery.carry(body)),
        None => response,
    };
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
