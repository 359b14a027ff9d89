//! The user's local page, served on the bridge's listener under `/ui`: the payments
//! waiting for approval (live, with Approve and Deny), the bots with their tools and
//! prices and each link's state, the mode and caps (editable through the settings
//! file's strict parse), and the spend log with a chart of spending per day, bot and
//! tool, and what each agent spent.
//!
//! `brmcp bridge ui` prints `http://ADDR/ui/login#<approval secret>`: the login page
//! trades the secret (from the URL's fragment, which no request carries) for a session
//! cookie; an agent's bearer token opens nothing here. The listener's Host and Origin
//! checks come first; see [`web`] for the rest.

mod api;
pub(crate) mod session;
pub(crate) mod web;

use std::pin::Pin;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;

use super::{Inner, existing_approval_secret};
use session::UiSessions;
pub(crate) use web::UI_PATH;
use web::{Front, MAX_UI_BODY, PageAssets, front, text};

/// The bridge's page.
const BRIDGE_PAGE: PageAssets = PageAssets {
    html: include_str!("assets/bridge.html"),
    script: include_str!("assets/bridge.js"),
    login_command: "brmcp bridge --datadir DIR ui",
};

/// The page's state on the bridge: its sessions.
#[derive(Default)]
pub(crate) struct UiState {
    sessions: UiSessions,
}

/// Whether `path` is the page's.
pub(crate) fn is_ui_path(path: &str) -> bool {
    path == UI_PATH || path.starts_with("/ui/")
}

/// Answers a request for the page; `agent`: it carries an agent's bearer token.
///
/// A boxed future, not an `async fn`: a settings edit may rebind the listener whose
/// connections run this, and the compiler cannot prove an opaque future `Send`
/// through that cycle.
pub(crate) fn handle(
    inner: Arc<Inner>,
    request: Request,
    agent: bool,
) -> Pin<Box<dyn Future<Output = Response> + Send>> {
    Box::pin(async move { answer(&inner, request, agent).await })
}

async fn answer(inner: &Arc<Inner>, request: Request, agent: bool) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(body) = axum::body::to_bytes(body, MAX_UI_BODY).await else {
        return text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
    };
    let secret = match existing_approval_secret(&inner.config.data_dir) {
        Ok(secret) => secret,
        Err(e) => {
            tracing::warn!(error = %e, "approval secret not read");
            None
        }
    };
    let answered = front(
        &BRIDGE_PAGE,
        &inner.http.ui.sessions,
        secret.as_deref(),
        agent,
        &parts,
        &body,
    );
    match answered {
        Front::Answered(response) => response,
        Front::Api(path) => api::answer(inner, &parts.method, path, &body).await,
    }
}

/// Whether the request `parts` carries a live session of the page: the listener
/// keeps the connections of such requests (see [`super::http::listener`]).
pub(crate) fn credentialed(inner: &Inner, parts: &axum::http::request::Parts) -> bool {
    let cookie = parts
        .headers
        .get(axum::http::header::COOKIE)
        .and_then(|v| v.to_str().ok());
    inner
        .http
        .ui
        .sessions
        .check(cookie, std::time::Instant::now())
        .is_some()
}
