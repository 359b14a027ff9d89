//! The gates of the module docs, in their order, before a request reaches its
//! endpoint's service; and which requests carry a credential, the connections the
//! listener keeps.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;

use super::access::{
    allowed_hosts, authorize_user, authorized, caller_of, host_allowed, not_the_agents_bot,
    origin_allowed,
};
use super::payments::{PAYMENTS_PATH, payments};
use super::refusal::{self, Form, echoed, plain, retry_after};
use super::remote::peer_allowed;
use super::services::session_request;
use super::{DIRECTORY_PATH, Endpoint};
use crate::bridge::link::BotLink;
use crate::bridge::settings::Caller;
use crate::bridge::{Inner, Settings, lock};

/// The endpoints as a router.
pub(crate) fn app(inner: Arc<Inner>) -> axum::Router {
    axum::Router::new().fallback(endpoint).with_state(inner)
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
/// that does makes its connection one the listener keeps (see [`listener`](super::listener)).
pub(super) fn credentialed(inner: &Inner, parts: &Parts) -> bool {
    let path = parts.uri.path();
    if crate::bridge::ui::is_ui_path(path) {
        return crate::bridge::ui::credentialed(inner, parts);
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
pub(super) async fn gate(
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
    if crate::bridge::ui::is_ui_path(request.uri().path()) {
        // The user's page: its own login; an agent's token opens nothing there.
        let agent = authorized(&settings, request.headers());
        return crate::bridge::ui::handle(inner, request, agent).await;
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
