//! The pages' front against a hostile local client: which requests a session opens,
//! what ends one, and how bodies are read.

use std::path::Path;

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};

use super::codes::{LOGIN_CODE_TTL_SECS, mint};
use super::session::{SESSION_HEADER, UiSessions};
use super::web::{Front, MAX_UI_BODY, PageAssets, PageGate, UI_BODY_DEADLINE, front, login_code};

const PAGE: PageAssets = PageAssets {
    name: "test",
    html: "<p>page</p>",
    script: "page();",
    login_command: "brmcp x ui",
    secret_file: "test.secret",
    codes_dir: "test.login",
};
const T: i64 = 1_800_000_000;

fn parts(method: &str, path: &str, headers: &[(&str, &str)]) -> Parts {
    let mut request = axum::http::Request::builder().method(method).uri(path);
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.body(()).unwrap().into_parts().0
}

async fn ask(
    gate: &PageGate<'_>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> StatusCode {
    ask_with(gate, method, path, headers, Body::from("{}")).await
}

async fn ask_with(
    gate: &PageGate<'_>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> StatusCode {
    let p = parts(method, path, headers);
    match front(gate, false, &p, body, T).await {
        Front::Answered(r) => {
            assert_eq!(r.headers()[header::CACHE_CONTROL], "no-store");
            assert!(r.headers().get(header::SET_COOKIE).is_none(), "no cookie");
            r.status()
        }
        Front::Api(..) => StatusCode::IM_USED,
    }
}

/// Logs in with a fresh code: the session token.
async fn login(gate: &PageGate<'_>) -> String {
    let code = login_code(gate.assets, gate.data_dir, false, T).unwrap();
    let (status, body) = post_login(gate, &code).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["page"], "test");
    v["token"].as_str().unwrap().to_owned()
}

async fn post_login(gate: &PageGate<'_>, code: &str) -> (StatusCode, String) {
    let p = parts("POST", "/ui/login", &[]);
    let body = serde_json::json!({ "code": code }).to_string();
    let Front::Answered(r) = front(gate, false, &p, Body::from(body), T).await else {
        panic!("login is answered");
    };
    let status = r.status();
    let bytes = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

fn gate<'a>(sessions: &'a UiSessions, dir: &'a Path) -> PageGate<'a> {
    PageGate {
        assets: &PAGE,
        sessions,
        data_dir: dir,
    }
}

#[tokio::test]
async fn the_session_header_opens_the_api_and_nothing_else_does() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = UiSessions::default();
    let gate = gate(&sessions, dir.path());
    let token = login(&gate).await;
    let other = login(&gate).await;
    let with = [(SESSION_HEADER, token.as_str())];
    let bearer = format!("Bearer {token}");
    for (method, path) in [("GET", "/ui/api/state"), ("POST", "/ui/api/settings")] {
        assert_eq!(ask(&gate, method, path, &with).await, StatusCode::IM_USED);
        assert_eq!(
            ask(&gate, method, path, &[(SESSION_HEADER, &other)]).await,
            StatusCode::IM_USED
        );
        // What another port's server could replay: cookies, the old CSRF header.
        for headers in [
            &[][..],
            &[("cookie", "brmcp_ui=abc; brmcp_bridge=def")][..],
            &[("x-brmcp-csrf", token.as_str())][..],
            &[(SESSION_HEADER, &token[1..])][..],
            &[(SESSION_HEADER, "")][..],
            &[("authorization", bearer.as_str())][..],
        ] {
            assert_eq!(
                ask(&gate, method, path, headers).await,
                StatusCode::UNAUTHORIZED,
                "{method} {path} {headers:?}"
            );
        }
    }
    let p = parts("GET", "/ui/api/session", &with);
    let Front::Answered(r) = front(&gate, false, &p, Body::empty(), T).await else {
        panic!("answered");
    };
    assert_eq!(r.status(), StatusCode::OK);
    let body = axum::body::to_bytes(r.into_body(), 1024).await.unwrap();
    assert!(
        !String::from_utf8_lossy(&body).contains(&token),
        "no token handed out"
    );
    // The assets carry no data and need no session.
    for path in [
        "/ui/",
        "/ui/page.js",
        "/ui/login",
        "/ui/ui.js",
        "/ui/ui.css",
    ] {
        assert_eq!(ask(&gate, "GET", path, &[]).await, StatusCode::OK, "{path}");
    }
    assert_eq!(
        ask(&gate, "GET", "/ui/api", &with).await,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test]
async fn an_agent_token_opens_no_route_not_even_the_login() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = UiSessions::default();
    let gate = gate(&sessions, dir.path());
    let token = login(&gate).await;
    for (method, path) in [
        ("GET", "/ui/"),
        ("GET", "/ui/login"),
        ("POST", "/ui/login"),
        ("GET", "/ui/api/state"),
        ("POST", "/ui/api/settings"),
        ("POST", "/ui/logout"),
    ] {
        // Even with the user's session beside it.
        let p = parts(method, path, &[(SESSION_HEADER, &token)]);
        let Front::Answered(r) = front(&gate, true, &p, Body::empty(), T).await else {
            panic!("answered");
        };
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{method} {path}");
    }
}

#[tokio::test]
async fn a_login_code_logs_in_once_and_the_secret_never() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = UiSessions::default();
    let gate = gate(&sessions, dir.path());
    let code = login_code(&PAGE, dir.path(), false, T).unwrap();
    let (status, _) = post_login(&gate, &code).await;
    assert_eq!(status, StatusCode::OK);
    let (status, why) = post_login(&gate, &code).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "used already");
    assert!(why.contains("brmcp x ui"), "{why}");
    let secret = std::fs::read_to_string(dir.path().join(PAGE.secret_file)).unwrap();
    let (status, _) = post_login(&gate, secret.trim()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the standing secret");
    // An old code, past its time.
    let old = mint(
        dir.path(),
        PAGE.codes_dir,
        secret.trim(),
        T - LOGIN_CODE_TTL_SECS,
    )
    .unwrap();
    let (status, why) = post_login(&gate, &old).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(why.contains("expired"), "{why}");
    for body in [
        "not json",
        r#"{"secret": "x"}"#,
        r#"{"code": "x", "more": 1}"#,
    ] {
        let status = ask_with(&gate, "POST", "/ui/login", &[], Body::from(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    }
}

#[tokio::test]
async fn a_rotated_or_replaced_secret_ends_its_sessions_and_codes() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = UiSessions::default();
    let gate = gate(&sessions, dir.path());
    let token = login(&gate).await;
    let waiting = login_code(&PAGE, dir.path(), false, T).unwrap();
    let fresh = login_code(&PAGE, dir.path(), true, T).unwrap();
    let state = |t: &str| {
        let t = t.to_owned();
        async move { ask(&gate, "GET", "/ui/api/state", &[(SESSION_HEADER, &t)]).await }
    };
    assert_eq!(state(&token).await, StatusCode::UNAUTHORIZED, "rotated");
    let (status, _) = post_login(&gate, &waiting).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "a code of the old secret");
    let (status, body) = post_login(&gate, &fresh).await;
    assert_eq!(status, StatusCode::OK);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let token = v["token"].as_str().unwrap().to_owned();
    assert_eq!(state(&token).await, StatusCode::IM_USED);
    // Replaced by hand, or removed: the same.
    let path = dir.path().join(PAGE.secret_file);
    std::fs::remove_file(&path).unwrap();
    assert_eq!(state(&token).await, StatusCode::UNAUTHORIZED, "removed");
    let token = login(&gate).await;
    brmcp_fs_write(&path, &"ab".repeat(32));
    assert_eq!(state(&token).await, StatusCode::UNAUTHORIZED, "replaced");
}

fn brmcp_fs_write(path: &Path, secret: &str) {
    crate::secure_fs::write_atomic(path, format!("{secret}\n").as_bytes()).unwrap();
}

#[tokio::test]
async fn logging_out_takes_the_sessions_own_token() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = UiSessions::default();
    let gate = gate(&sessions, dir.path());
    let token = login(&gate).await;
    let with = [(SESSION_HEADER, token.as_str())];
    let cookie = format!("brmcp_ui={token}");
    for headers in [&[][..], &[("cookie", cookie.as_str())][..]] {
        assert_eq!(
            ask(&gate, "POST", "/ui/logout", headers).await,
            StatusCode::UNAUTHORIZED
        );
    }
    assert_eq!(
        ask(&gate, "GET", "/ui/api/state", &with).await,
        StatusCode::IM_USED
    );
    assert_eq!(
        ask(&gate, "POST", "/ui/logout", &with).await,
        StatusCode::OK
    );
    assert_eq!(
        ask(&gate, "GET", "/ui/api/state", &with).await,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test(start_paused = true)]
async fn a_session_is_checked_before_the_body_and_the_body_has_a_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = UiSessions::default();
    let gate = gate(&sessions, dir.path());
    let token = login(&gate).await;
    let never =
        || Body::from_stream(futures_util::stream::pending::<Result<Bytes, std::io::Error>>());
    let long = [("content-length", "100")];
    // No session: refused at once, the body never awaited.
    let started = tokio::time::Instant::now();
    let status = ask_with(&gate, "POST", "/ui/api/settings", &long, never()).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(started.elapsed() < UI_BODY_DEADLINE);
    // A session whose body never comes, and a login's: 408 at the deadline.
    let with = [(SESSION_HEADER, token.as_str()), ("content-length", "100")];
    let status = ask_with(&gate, "POST", "/ui/api/settings", &with, never()).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    assert!(started.elapsed() >= UI_BODY_DEADLINE);
    let status = ask_with(&gate, "POST", "/ui/login", &long, never()).await;
    assert_eq!(status, StatusCode::REQUEST_TIMEOUT);
    // Too large, declared or sent: 413.
    let big = (MAX_UI_BODY + 1).to_string();
    let declared = [
        (SESSION_HEADER, token.as_str()),
        ("content-length", big.as_str()),
    ];
    let status = ask_with(&gate, "POST", "/ui/api/settings", &declared, never()).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let sent = Body::from(vec![b' '; MAX_UI_BODY + 1]);
    let status = ask_with(&gate, "POST", "/ui/login", &[], sent).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

#[test]
fn each_page_names_its_own_storage_key() {
    assert!(super::BRIDGE_PAGE.html.contains(r#"data-page="bridge""#));
    assert_eq!(super::BRIDGE_PAGE.name, "bridge");
}

#[tokio::test]
async fn credentialed_is_the_live_session_header_only() {
    let dir = tempfile::tempdir().unwrap();
    let sessions = UiSessions::default();
    let gate = gate(&sessions, dir.path());
    let token = login(&gate).await;
    let cookie = format!("brmcp_ui={token}");
    let bearer = format!("Bearer {token}");
    assert!(gate.credentialed(&parts("GET", "/ui/api/state", &[(SESSION_HEADER, &token)])));
    assert!(gate.credentialed(&parts("POST", "/mcp/x", &[(SESSION_HEADER, &token)])));
    for headers in [
        &[][..],
        &[("cookie", cookie.as_str())][..],
        &[("authorization", bearer.as_str())][..],
        &[(SESSION_HEADER, &token[..63])][..],
    ] {
        assert!(
            !gate.credentialed(&parts("GET", "/ui/api/state", headers)),
            "{headers:?}"
        );
    }
    login_code(&PAGE, dir.path(), true, T).unwrap();
    let with = [(SESSION_HEADER, token.as_str())];
    assert!(
        !gate.credentialed(&parts("GET", "/ui/api/state", &with)),
        "rotated"
    );
}
