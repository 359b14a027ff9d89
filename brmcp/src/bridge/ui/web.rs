//! What both local pages (the bridge's and `serve`'s operator page) do alike in front
//! of their data: the embedded assets, the login that trades a single-use login code
//! (see [`super::codes`]) for a session token, and the session check of the JSON API
//! (see [`super::session`]). Every answer is marked `Cache-Control: no-store`: the
//! pages show money and the login carries a code.
//!
//! Order: an API request's session is checked from its headers before its body is
//! read, and every body is read under [`UI_BODY_DEADLINE`] (408 past it) and within
//! [`MAX_UI_BODY`] (413), so a client without a session can hold a connection only
//! as long as the listener lets it send headers.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;

#[cfg(feature = "cli")]
pub(crate) use crate::bridge::http::access::{LOOPBACK_HOSTS, host_allowed, origin_allowed};
/// The bridge's bounded accept loop, which `serve`'s operator page runs on too.
#[cfg(feature = "cli")]
pub(crate) use crate::bridge::http::listener::run as run_listener;

use super::codes::{self, Taken};
use super::session::{Generation, SESSION_HEADER, UiSessions, generation};
use crate::bridge::approval::{
    ApprovalSecretError, existing_secret_in, rotate_secret_in, secret_in,
};

/// Where the pages live on their listener.
pub(crate) const UI_PATH: &str = "/ui";

/// Largest request body a page takes: 16 KiB, far above a settings form, so a client
/// cannot make the listener buffer without bound.
pub(crate) const MAX_UI_BODY: usize = 16 * 1024;

/// Time a request has to send its whole body once its headers are in: 10 s, as the
/// listener's header timeout; the page's bodies are a few hundred bytes, sent at once.
pub(crate) const UI_BODY_DEADLINE: Duration = Duration::from_secs(10);

/// The login page: reads the code from the URL's fragment (never sent to a server
/// or kept in a log), posts it once, and forgets it.
const LOGIN_HTML: &str = include_str!("assets/login.html");
/// The pages' shared style.
const UI_CSS: &str = include_str!("assets/ui.css");
/// The pages' shared script: the API client, tables and the chart.
const UI_JS: &str = include_str!("assets/ui.js");

/// One page: its HTML and script, its secret's and codes' files, and the command
/// that prints its login URL.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageAssets {
    /// The page's name, its HTML's `data-page`: the script keeps the session under
    /// `brmcp.<name>.session` of the origin's `sessionStorage`.
    pub(crate) name: &'static str,
    /// The page, `GET /ui/`.
    pub(crate) html: &'static str,
    /// Its own script, `GET /ui/page.js`.
    pub(crate) script: &'static str,
    /// The command that prints the login URL, for the refusal of a request without a
    /// session.
    pub(crate) login_command: &'static str,
    /// The secret's file in the data directory: the login codes are made under it.
    pub(crate) secret_file: &'static str,
    /// The login codes' directory in the data directory.
    pub(crate) codes_dir: &'static str,
}

/// One page's listener: what it serves, its sessions, and its data directory.
#[derive(Clone, Copy)]
pub(crate) struct PageGate<'a> {
    /// The page.
    pub(crate) assets: &'a PageAssets,
    /// Its listener's sessions.
    pub(crate) sessions: &'a UiSessions,
    /// The directory of its secret and codes.
    pub(crate) data_dir: &'a Path,
}

/// What the front of a page made of a request.
pub(crate) enum Front<'a> {
    /// Answered here (an asset, the login, a refusal).
    Answered(Response),
    /// An API request of a live session: the path after `/ui/api`, and the body.
    Api(&'a str, Bytes),
}

impl PageGate<'_> {
    /// The generation of the secret now in the page's file; `None` when there is
    /// none (or it cannot be read), so no session is live.
    fn current(&self) -> Option<Generation> {
        match existing_secret_in(self.data_dir, self.assets.secret_file) {
            Ok(secret) => secret.as_deref().map(generation),
            Err(e) => {
                tracing::warn!(error = %e, "page secret not read");
                None
            }
        }
    }

    /// Whether the request carries a live session of this page, changing nothing.
    pub(crate) fn credentialed(&self, parts: &Parts) -> bool {
        let Some(token) = session_token(parts) else {
            return false;
        };
        let current = self.current();
        self.sessions
            .holds(Some(token), current.as_ref(), Instant::now())
    }

    /// Whether the request carries a live session, which counts as used now.
    fn live(&self, parts: &Parts) -> bool {
        let Some(token) = session_token(parts) else {
            return false;
        };
        let current = self.current();
        self.sessions
            .check(Some(token), current.as_ref(), Instant::now())
    }

    fn not_logged_in(&self) -> Response {
        text(
            StatusCode::UNAUTHORIZED,
            &format!(
                "not logged in: run `{}` and open the URL it prints",
                self.assets.login_command
            ),
        )
    }
}

/// The session token a request carries.
fn session_token(parts: &Parts) -> Option<&str> {
    parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// The front of `gate`'s page for the request `parts` (a path under [`UI_PATH`]) with
/// `body`, at `now` (Unix seconds, for the login codes): `agent` whether the request
/// carries an agent's bearer token, which opens nothing here. A session is checked
/// before the body is read.
pub(crate) async fn front<'a>(
    gate: &PageGate<'_>,
    agent: bool,
    parts: &'a Parts,
    body: Body,
    now: i64,
) -> Front<'a> {
    let Some(rest) = parts.uri.path().strip_prefix(UI_PATH) else {
        return Front::Answered(text(StatusCode::NOT_FOUND, "not found"));
    };
    if agent {
        return Front::Answered(text(
            StatusCode::FORBIDDEN,
            "forbidden: the page takes the user's login, not an agent's token",
        ));
    }
    let assets = gate.assets;
    match (parts.method.as_str(), rest) {
        // The assets hold no data; the data is the API's.
        ("GET", "/login") => return Front::Answered(asset(LOGIN_HTML, "text/html")),
        ("GET", "/ui.css") => return Front::Answered(asset(UI_CSS, "text/css")),
        ("GET", "/ui.js") => return Front::Answered(asset(UI_JS, "text/javascript")),
        ("GET", "" | "/") => return Front::Answered(asset(assets.html, "text/html")),
        ("GET", "/page.js") => return Front::Answered(asset(assets.script, "text/javascript")),
        ("POST", "/login") => {
            return Front::Answered(match read_body(parts, body).await {
                Ok(body) => login(gate, &body, now),
                Err(refused) => refused,
            });
        }
        ("POST", "/logout") => {
            // The session's own token ends it: a page of another origin cannot.
            if !gate.live(parts) {
                return Front::Answered(gate.not_logged_in());
            }
            if let Some(token) = session_token(parts) {
                gate.sessions.end(token);
            }
            return Front::Answered(text(StatusCode::OK, "logged out"));
        }
        _ => {}
    }
    let Some(api) = rest.strip_prefix("/api").filter(|a| a.starts_with('/')) else {
        return Front::Answered(text(StatusCode::NOT_FOUND, "not found"));
    };
    if !gate.live(parts) {
        return Front::Answered(gate.not_logged_in());
    }
    let body = match read_body(parts, body).await {
        Ok(body) => body,
        Err(refused) => return Front::Answered(refused),
    };
    if (parts.method.as_str(), api) == ("GET", "/session") {
        return Front::Answered(json(
            StatusCode::OK,
            &serde_json::json!({ "page": assets.name }),
        ));
    }
    Front::Api(api, body)
}

/// Reads a request's body within [`MAX_UI_BODY`] and [`UI_BODY_DEADLINE`]; a
/// `Content-Length` past the bound is refused before any byte is awaited.
///
/// # Errors
/// The refusal: 413 too large, 408 too slow, 400 broken off.
pub(crate) async fn read_body(parts: &Parts, body: Body) -> Result<Bytes, Response> {
    let too_large = || text(StatusCode::PAYLOAD_TOO_LARGE, "request body too large");
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_UI_BODY as u64) {
        return Err(too_large());
    }
    let mut stream = body.into_data_stream();
    let mut read = Vec::new();
    let whole = async {
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else {
                return Err(text(StatusCode::BAD_REQUEST, "request body not read"));
            };
            if read.len() + chunk.len() > MAX_UI_BODY {
                return Err(too_large());
            }
            read.extend_from_slice(&chunk);
        }
        Ok(())
    };
    match tokio::time::timeout(UI_BODY_DEADLINE, whole).await {
        Ok(Ok(())) => Ok(Bytes::from(read)),
        Ok(Err(refused)) => Err(refused),
        Err(_) => Err(text(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "request body not sent within {} s",
                UI_BODY_DEADLINE.as_secs()
            ),
        )),
    }
}

/// The login's body: the code from the URL's fragment.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginBody {
    code: String,
}

/// `POST /ui/login` with `{"code": "..."}`: a session token for a live code, which is
/// used up either way.
fn login(gate: &PageGate<'_>, body: &[u8], now: i64) -> Response {
    let Ok(LoginBody { code }) = serde_json::from_slice(body) else {
        return text(
            StatusCode::BAD_REQUEST,
            "login refused: the body must be {\"code\": \"...\"}",
        );
    };
    let secret = match existing_secret_in(gate.data_dir, gate.assets.secret_file) {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return text(
                StatusCode::UNAUTHORIZED,
                "login refused: no secret made yet",
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "page secret not read");
            return text(
                StatusCode::UNAUTHORIZED,
                "login refused: the secret cannot be read",
            );
        }
    };
    let command = gate.assets.login_command;
    match codes::take(gate.data_dir, gate.assets.codes_dir, &secret, &code, now) {
        Taken::Fresh => {}
        Taken::Expired => {
            return text(
                StatusCode::UNAUTHORIZED,
                &format!("login refused: the login code expired; run `{command}` for a new one"),
            );
        }
        Taken::Unknown => {
            return text(
                StatusCode::UNAUTHORIZED,
                &format!(
                    "login refused: not a login code, or used already; run `{command}` for \
                     a new one"
                ),
            );
        }
    }
    match gate.sessions.begin(generation(&secret), Instant::now()) {
        Ok(token) => json(
            StatusCode::OK,
            &serde_json::json!({ "token": token, "page": gate.assets.name }),
        ),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// Why a login code could not be made.
#[cfg_attr(not(feature = "cli"), allow(dead_code, reason = "the `ui` commands'"))]
#[derive(Debug, thiserror::Error)]
pub(crate) enum LinkError {
    /// The page's secret could not be read, made or rotated.
    #[error(transparent)]
    Secret(#[from] ApprovalSecretError),
    /// The code could not be written.
    #[error(transparent)]
    Code(#[from] codes::MintError),
    /// The old codes could not be removed after a rotation.
    #[error("{0}: {1}")]
    Clear(String, std::io::Error),
}

/// A login code of the page of `data_dir` at `now` (Unix seconds), after rotating
/// its secret when `rotate` (which ends every session the old one opened and voids
/// its codes). The `ui` commands print it after `/ui/login#`.
#[cfg_attr(not(feature = "cli"), allow(dead_code, reason = "the `ui` commands'"))]
pub(crate) fn login_code(
    assets: &PageAssets,
    data_dir: &Path,
    rotate: bool,
    now: i64,
) -> Result<String, LinkError> {
    let secret = if rotate {
        let fresh = rotate_secret_in(data_dir, assets.secret_file)?;
        codes::clear(data_dir, assets.codes_dir).map_err(|e| {
            LinkError::Clear(data_dir.join(assets.codes_dir).display().to_string(), e)
        })?;
        fresh
    } else {
        secret_in(data_dir, assets.secret_file)?
    };
    Ok(codes::mint(data_dir, assets.codes_dir, &secret, now)?)
}

/// An embedded asset: never cached, never sniffed, framed by no other page.
fn asset(body: &'static str, kind: &'static str) -> Response {
    let mut answer = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, format!("{kind}; charset=utf-8"))],
        body,
    )
        .into_response();
    harden(&mut answer);
    answer
}

/// A JSON answer of a page.
pub(crate) fn json(status: StatusCode, value: &serde_json::Value) -> Response {
    let mut answer = (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response();
    harden(&mut answer);
    answer
}

/// A plain text answer of a page.
pub(crate) fn text(status: StatusCode, message: &str) -> Response {
    let mut answer = (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        message.to_owned(),
    )
        .into_response();
    harden(&mut answer);
    answer
}

/// No cache keeps an answer; the assets run as they are and only in the page itself.
fn harden(answer: &mut Response) {
    set(answer, header::CACHE_CONTROL, "no-store");
    set(answer, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(answer, header::X_FRAME_OPTIONS, "DENY");
    set(answer, header::REFERRER_POLICY, "no-referrer");
    set(
        answer,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
         connect-src 'self'; frame-ancestors 'none'; form-action 'self'",
    );
}

fn set(answer: &mut Response, name: header::HeaderName, value: &str) {
    if let Ok(value) = HeaderValue::from_str(value) {
        answer.headers_mut().insert(name, value);
    }
}
