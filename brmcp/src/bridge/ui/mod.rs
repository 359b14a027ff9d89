//! The user's local page, served on the bridge's listener under `/ui`: the payments
//! waiting for approval (live, with Approve and Deny), the bots with their tools and
//! prices and each link's state, the mode and caps (editable through the settings
//! file's strict parse), and the spend log with a chart of spending per day, bot and
//! tool, and what each agent spent.
//!
//! `brmcp bridge ui` prints `http://ADDR/ui/login#<login code>`: a code made under the
//! approval secret that lives a few minutes and logs in once (see [`codes`]); the
//! login page trades it (from the URL's fragment, which no request carries) for a
//! session token that the page's script keeps in its origin's `sessionStorage` and
//! sends in a header on every API request (see [`session`]: no cookie, which every
//! port of the host would receive). `ui --rotate` replaces the secret first, which
//! ends every session the old one opened. An agent's bearer token opens nothing here.
//! The listener's Host and Origin checks come first; see [`web`] for the rest.

mod api;
pub(crate) mod codes;
pub(crate) mod session;
pub(crate) mod web;

use std::pin::Pin;
use std::sync::Arc;

use axum::extract::Request;
use axum::http::request::Parts;
use axum::response::Response;

use super::{APPROVAL_SECRET_FILE, Inner};
use session::UiSessions;
pub(crate) use web::UI_PATH;
use web::{Front, PageAssets, PageGate, front};

/// The login codes' directory of the bridge's data directory.
pub(crate) const APPROVAL_LOGIN_CODES: &str = "approval.login";

/// The bridge's page.
pub(crate) const BRIDGE_PAGE: PageAssets = PageAssets {
    name: "bridge",
    html: include_str!("assets/bridge.html"),
    script: include_str!("assets/bridge.js"),
    login_command: "brmcp bridge --datadir DIR ui",
    secret_file: APPROVAL_SECRET_FILE,
    codes_dir: APPROVAL_LOGIN_CODES,
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

fn gate(inner: &Inner) -> PageGate<'_> {
    PageGate {
        assets: &BRIDGE_PAGE,
        sessions: &inner.http.ui.sessions,
        data_dir: &inner.config.data_dir,
    }
}

/// Whether the request `parts` carries a live session of the bridge's page (its
/// session header, of a session the current approval secret opened), changing
/// nothing: the listener gives such requests the slots it keeps for the user.
pub(crate) fn credentialed(inner: &Inner, parts: &Parts) -> bool {
    gate(inner).credentialed(parts)
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
    let now = inner.config.clock.now().secs();
    match front(&gate(inner), agent, &parts, body, now).await {
        Front::Answered(response) => response,
        Front::Api(path, body) => api::answer(inner, &parts.method, path, &body).await,
    }
}

#[cfg(test)]
mod tests;
