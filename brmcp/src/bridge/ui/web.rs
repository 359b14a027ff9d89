//! What both local pages (the bridge's and `serve`'s operator page) do alike in front
//! of their data: the embedded assets, the login that trades the secret for a session
//! cookie, and the session and CSRF checks of the JSON API. Every answer is marked
//! `Cache-Control: no-store`: the pages show money and the login carries a secret.

use std::time::Instant;

use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

#[cfg(feature = "cli")]
pub(crate) use crate::bridge::http::access::{LOOPBACK_HOSTS, host_allowed, origin_allowed};
/// The bridge's bounded accept loop, which `serve`'s operator page runs on too.
#[cfg(feature = "cli")]
pub(crate) use crate::bridge::http::listener::run as run_listener;

use super::session::{
    CSRF_HEADER, UiSessions, clear_cookie, csrf_matches, secret_matches, set_cookie,
};

/// Where the pages live on their listener.
pub(crate) const UI_PATH: &str = "/ui";

/// Largest request body a page takes: 16 KiB, far above a settings form, so a client
/// cannot make the listener buffer without bound.
pub(crate) const MAX_UI_BODY: usize = 16 * 1024;

/// The login page: reads the secret from the URL's fragment (never sent to a server
/// or kept in a log), posts it once, and forgets it.
const LOGIN_HTML: &str = include_str!("assets/login.html");
/// The pages' shared style.
const UI_CSS: &str = include_str!("assets/ui.css");
/// The pages' shared script: the API client, tables and the chart.
const UI_JS: &str = include_str!("assets/ui.js");

/// One page: its HTML and script, and the command that prints its login URL.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PageAssets {
    /// The page, `GET /ui/`.
    pub(crate) html: &'static str,
    /// Its own script, `GET /ui/page.js`.
    pub(crate) script: &'static str,
    /// The command that prints the login URL, for the refusal of a visit without a
    /// session.
    pub(crate) login_command: &'static str,
}

/// What the front of a page made of a request.
pub(crate) enum Front<'a> {
    /// Answered here (an asset, the login, a refusal).
    Answered(Response),
    /// An API request of a logged-in session, its CSRF token checked if it changes
    /// anything: the path after `/ui/api`.
    Api(&'a str),
}

/// The front of a page for the request `parts` (a path under [`UI_PATH`]) with
/// `body`: `secret` is the credential that logs in (`None`: none made yet, so no
/// one), `agent` whether the request carries an agent's bearer token, which opens
/// nothing here.
pub(crate) fn front<'a>(
    assets: &PageAssets,
    sessions: &UiSessions,
    secret: Option<&str>,
    agent: bool,
    parts: &'a Parts,
    body: &[u8],
) -> Front<'a> {
    let (method, headers) = (&parts.method, &parts.headers);
    let Some(rest) = parts.uri.path().strip_prefix(UI_PATH) else {
        return Front::Answered(text(StatusCode::NOT_FOUND, "not found"));
    };
    if agent {
        return Front::Answered(text(
            StatusCode::FORBIDDEN,
            "forbidden: the page takes the user's login, not an agent's token",
        ));
    }
    let now = Instant::now();
    let cookie = headers.get(header::COOKIE).and_then(|v| v.to_str().ok());
    match (method.as_str(), rest) {
        ("GET", "/login") => return Front::Answered(asset(LOGIN_HTML, "text/html")),
        ("GET", "/ui.css") => return Front::Answered(asset(UI_CSS, "text/css")),
        ("GET", "/ui.js") => return Front::Answered(asset(UI_JS, "text/javascript")),
        ("POST", "/login") => return Front::Answered(login(sessions, secret, body, now)),
        ("POST", "/logout") => {
            sessions.end(cookie);
            let mut answer = text(StatusCode::OK, "logged out");
            set(&mut answer, header::SET_COOKIE, &clear_cookie());
            return Front::Answered(answer);
        }
        _ => {}
    }
    let Some(csrf) = sessions.check(cookie, now) else {
        return Front::Answered(text(
            StatusCode::UNAUTHORIZED,
            &format!(
                "not logged in: open the URL `{}` prints",
                assets.login_command
            ),
        ));
    };
    match (method.as_str(), rest) {
        ("GET", "" | "/") => Front::Answered(asset(assets.html, "text/html")),
        ("GET", "/page.js") => Front::Answered(asset(assets.script, "text/javascript")),
        ("GET", "/api/session") => {
            Front::Answered(json(StatusCode::OK, &serde_json::json!({ "csrf": csrf })))
        }
        (_, api) if api.starts_with("/api/") => {
            let reads = matches!(*method, Method::GET | Method::HEAD);
            let presented = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
            if !reads && !csrf_matches(&csrf, presented) {
                return Front::Answered(text(
                    StatusCode::FORBIDDEN,
                    "forbidden: the request lacks the page's CSRF token",
                ));
            }
            Front::Api(&api[4..])
        }
        _ => Front::Answered(text(StatusCode::NOT_FOUND, "not found")),
    }
}

/// `POST /ui/login` with `{"secret": "..."}`: a session cookie for the right secret.
fn login(sessions: &UiSessions, secret: Option<&str>, body: &[u8], now: Instant) -> Response {
    let presented = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("secret").and_then(|s| s.as_str()).map(str::to_owned));
    let (Some(secret), Some(presented)) = (secret, presented) else {
        return text(StatusCode::UNAUTHORIZED, "login refused: no secret given");
    };
    if !secret_matches(secret, &presented) {
        return text(StatusCode::UNAUTHORIZED, "login refused: wrong secret");
    }
    match sessions.begin(now) {
        Ok(login) => {
            let mut answer = json(StatusCode::OK, &serde_json::json!({ "csrf": login.csrf }));
            set(&mut answer, header::SET_COOKIE, &set_cookie(&login.id));
            answer
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: PageAssets = PageAssets {
        html: "<p>page</p>",
        script: "page();",
        login_command: "brmcp x ui",
    };
    const SECRET: &str = "s3cret-of-the-user";

    fn parts(method: &str, path: &str, headers: &[(&str, &str)]) -> Parts {
        let mut request = axum::http::Request::builder().method(method).uri(path);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        request.body(()).unwrap().into_parts().0
    }

    fn status(front: Front<'_>) -> StatusCode {
        match front {
            Front::Answered(r) => r.status(),
            Front::Api(_) => StatusCode::IM_USED,
        }
    }

    /// Logs in and returns the cookie header and the CSRF token.
    fn login(sessions: &UiSessions) -> (String, String) {
        let p = parts("POST", "/ui/login", &[]);
        let body = serde_json::json!({ "secret": SECRET }).to_string();
        let Front::Answered(r) = front(&PAGE, sessions, Some(SECRET), false, &p, body.as_bytes())
        else {
            panic!("login is answered");
        };
        assert_eq!(r.status(), StatusCode::OK);
        let cookie = r.headers()[header::SET_COOKIE].to_str().unwrap();
        let pair = cookie.split(';').next().unwrap().to_owned();
        let id = pair.split_once('=').unwrap().1;
        let csrf = sessions.check(Some(&pair), Instant::now()).unwrap();
        assert!(!id.is_empty());
        (pair, csrf)
    }

    #[test]
    fn an_agent_token_opens_no_route_not_even_the_login() {
        let sessions = UiSessions::default();
        let (cookie, csrf) = login(&sessions);
        for (method, path) in [
            ("GET", "/ui/"),
            ("GET", "/ui/login"),
            ("POST", "/ui/login"),
            ("GET", "/ui/api/state"),
            ("POST", "/ui/api/settings"),
        ] {
            // Even with the user's cookie beside it.
            let p = parts(method, path, &[("cookie", &cookie), (CSRF_HEADER, &csrf)]);
            let body = serde_json::json!({ "secret": SECRET }).to_string();
            let answered = front(&PAGE, &sessions, Some(SECRET), true, &p, body.as_bytes());
            assert_eq!(status(answered), StatusCode::FORBIDDEN, "{method} {path}");
        }
    }

    #[test]
    fn changes_need_the_session_and_its_csrf_token_reads_the_session_only() {
        let sessions = UiSessions::default();
        let (cookie, csrf) = login(&sessions);
        let (_, other_csrf) = login(&sessions);
        let ask = |method: &str, headers: &[(&str, &str)]| {
            let p = parts(method, "/ui/api/settings", headers);
            status(front(&PAGE, &sessions, Some(SECRET), false, &p, b"{}"))
        };
        assert_eq!(ask("POST", &[]), StatusCode::UNAUTHORIZED);
        assert_eq!(
            ask("POST", &[(CSRF_HEADER, &csrf)]),
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(ask("POST", &[("cookie", &cookie)]), StatusCode::FORBIDDEN);
        assert_eq!(
            ask("POST", &[("cookie", &cookie), (CSRF_HEADER, &other_csrf)]),
            StatusCode::FORBIDDEN,
            "another session's token"
        );
        assert_eq!(
            ask("POST", &[("cookie", &cookie), (CSRF_HEADER, &csrf)]),
            StatusCode::IM_USED
        );
        assert_eq!(ask("GET", &[("cookie", &cookie)]), StatusCode::IM_USED);
        assert_eq!(ask("GET", &[]), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn no_secret_made_logs_no_one_in_and_every_answer_is_uncached() {
        let sessions = UiSessions::default();
        let p = parts("POST", "/ui/login", &[]);
        for (secret, body) in [
            (None, serde_json::json!({ "secret": "" }).to_string()),
            (None, serde_json::json!({ "secret": SECRET }).to_string()),
            (
                Some(SECRET),
                serde_json::json!({ "secret": "wrong" }).to_string(),
            ),
            (Some(SECRET), "not json".to_owned()),
        ] {
            let Front::Answered(r) = front(&PAGE, &sessions, secret, false, &p, body.as_bytes())
            else {
                panic!("answered");
            };
            assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{body}");
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
            assert!(r.headers().get(header::SET_COOKIE).is_none());
        }
        for path in ["/ui/login", "/ui/ui.js", "/ui/ui.css"] {
            let p = parts("GET", path, &[]);
            let Front::Answered(r) = front(&PAGE, &sessions, Some(SECRET), false, &p, b"") else {
                panic!("answered");
            };
            assert_eq!(r.status(), StatusCode::OK, "{path}");
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
        }
    }

    #[test]
    fn logging_out_ends_the_session() {
        let sessions = UiSessions::default();
        let (cookie, _) = login(&sessions);
        let p = parts("POST", "/ui/logout", &[("cookie", &cookie)]);
        let Front::Answered(r) = front(&PAGE, &sessions, Some(SECRET), false, &p, b"") else {
            panic!("answered");
        };
        assert!(
            r.headers()[header::SET_COOKIE]
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
        let p = parts("GET", "/ui/", &[("cookie", &cookie)]);
        let answered = front(&PAGE, &sessions, Some(SECRET), false, &p, b"");
        assert_eq!(status(answered), StatusCode::UNAUTHORIZED);
    }
}
