//! The local pages against a local attacker, over plain HTTP and raw TCP with the real
//! binary: what another server on another loopback port could hold (cookies, the old
//! CSRF header, what a browser sent it) opens nothing; a login code logs in once and
//! the standing secret never; a rotated or replaced secret ends its sessions; logout
//! takes the session's token; a session is checked before a body is awaited, and a
//! body has a deadline; the Host header is read strictly on every path.
//!
//! [`Attacker`] is the other local server of the browser variant (see `web_pages`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::processes::brmcp;

/// The header the pages' script sends its session token in.
pub(super) const SESSION: &str = "x-brmcp-session";

/// The body deadline of the pages (`UI_BODY_DEADLINE`), and how much longer a
/// loaded machine may take to answer past it.
const BODY_DEADLINE: Duration = Duration::from_secs(10);
const SLACK: Duration = Duration::from_secs(20);

/// The single line a `ui` command prints.
pub(super) fn login_url(args: &[&str]) -> String {
    let out = brmcp(args).output().expect("ui command");
    assert!(out.status.success(), "{args:?}: {out:?}");
    let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(url.contains("/ui/login#"), "{url}");
    url
}

/// The login code of a login URL.
pub(super) fn code_of(url: &str) -> String {
    url.rsplit_once('#').expect("fragment").1.to_owned()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Posts `code` to the login of `base`: the status and the body.
async fn post_login(base: &str, code: &str) -> (u16, String, bool) {
    let r = client()
        .post(format!("http://{base}/ui/login"))
        .json(&json!({ "code": code }))
        .send()
        .await
        .expect("login");
    let cookie = r.headers().contains_key("set-cookie");
    (r.status().as_u16(), r.text().await.expect("text"), cookie)
}

/// Logs in to `base` with `code`: the session token.
pub(super) async fn login(base: &str, code: &str) -> String {
    let (status, body, cookie) = post_login(base, code).await;
    assert_eq!(status, 200, "{body}");
    assert!(!cookie, "no cookie is set");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["token"].as_str().expect("token").to_owned()
}

/// Every API route of the bridge's page, reads and changes, each with a body.
const BRIDGE_ROUTES: [(&str, &str); 6] = [
    ("GET", "/ui/api/state"),
    ("GET", "/ui/api/session"),
    ("POST", "/ui/api/settings"),
    ("POST", "/ui/api/payments/1/approve"),
    ("POST", "/ui/api/payments/1/deny"),
    ("POST", "/ui/logout"),
];

/// The statuses of every route of `routes` at `base` with `headers`.
async fn statuses(base: &str, routes: &[(&str, &str)], headers: &[(String, String)]) -> Vec<u16> {
    let http = client();
    let mut out = Vec::new();
    for (method, path) in routes {
        let mut r = match *method {
            "GET" => http.get(format!("http://{base}{path}")),
            _ => http
                .post(format!("http://{base}{path}"))
                .json(&json!({"mode": "autopay", "per_call_cap_atoms": 1})),
        };
        for (k, v) in headers {
            r = r.header(k.as_str(), v.as_str());
        }
        out.push(r.send().await.expect("send").status().as_u16());
    }
    out
}

/// Asserts that `headers` (what a request of another origin could carry) open no
/// route of the bridge's page.
pub(super) async fn assert_opens_nothing(bridge: &str, headers: &[(String, String)]) {
    let got = statuses(bridge, &BRIDGE_ROUTES, headers).await;
    assert!(got.iter().all(|s| *s == 401), "{headers:?}: {got:?}");
}

/// The session token's state at `base`: the status of `GET /ui/api/state`.
async fn state_status(base: &str, token: &str) -> u16 {
    client()
        .get(format!("http://{base}/ui/api/state"))
        .header(SESSION, token)
        .send()
        .await
        .expect("state")
        .status()
        .as_u16()
}

/// The mode the bridge's page shows to a session.
async fn mode(bridge: &str, token: &str) -> String {
    let v: serde_json::Value = client()
        .get(format!("http://{bridge}/ui/api/state"))
        .header(SESSION, token)
        .send()
        .await
        .expect("state")
        .json()
        .await
        .expect("json");
    v["settings"]["mode"].as_str().expect("mode").to_owned()
}

/// Plain HTTP against the pages of `bridge` (data directory `bridge_dir`) and
/// `serve` (`serve_dir`): who gets in, and what a local attacker can replay.
pub(super) async fn refusals(
    bridge: &str,
    serve: &str,
    bridge_dir: &str,
    serve_dir: &str,
    agent_token: &str,
) {
    let http = client();
    for base in [bridge, serve] {
        for path in ["/ui/", "/ui/api/state", "/ui/page.js"] {
            let r = http
                .get(format!("http://{base}{path}"))
                .bearer_auth(agent_token)
                .send()
                .await
                .expect("get");
            assert_eq!(r.status(), 403, "{base}{path} with an agent token");
        }
        // The assets hold no data; the data needs a session.
        for (path, status) in [("/ui/", 200), ("/ui/page.js", 200), ("/ui/api/state", 401)] {
            let r = http
                .get(format!("http://{base}{path}"))
                .send()
                .await
                .expect("get");
            assert_eq!(r.status(), status, "{base}{path} without a login");
        }
        let (status, _, _) = post_login(base, agent_token).await;
        assert_eq!(status, 401, "an agent token does not log in at {base}");
    }

    // The standing secrets log in nowhere; a code logs in once, at its own page.
    let code = code_of(&login_url(&["bridge", "--datadir", bridge_dir, "ui"]));
    let serve_code = code_of(&login_url(&["serve", "--datadir", serve_dir, "ui"]));
    let dir = std::path::Path::new(bridge_dir);
    let secret = std::fs::read_to_string(dir.join("approval.secret")).expect("approval secret");
    let (status, _, _) = post_login(bridge, secret.trim()).await;
    assert_eq!(status, 401, "the approval secret is no login");
    let (status, _, _) = post_login(serve, &code).await;
    assert_eq!(status, 401, "the bridge's code at the operator page");
    let (status, _, _) = post_login(bridge, &serve_code).await;
    assert_eq!(status, 401, "the operator's code at the bridge's page");
    let token = login(bridge, &code).await;
    let (status, why, _) = post_login(bridge, &code).await;
    assert_eq!(status, 401, "a code twice");
    assert!(why.contains("used already"), "{why}");
    let serve_token = login(serve, &serve_code).await;
    assert_eq!(state_status(serve, &serve_token).await, 200);
    assert_eq!(state_status(serve, &token).await, 401, "a bridge session");
    assert_eq!(
        state_status(bridge, &serve_token).await,
        401,
        "an operator session"
    );
    let r = http
        .get(format!("http://{bridge}/ui/api/state"))
        .header(SESSION, &token)
        .send()
        .await
        .expect("state");
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["cache-control"], "no-store");

    // What a server on another port of 127.0.0.1 gets from the browser is sent by
    // host, not port: cookies (even one holding the token), and the old CSRF header.
    // None of it opens a read or a change.
    let cookie = |v: &str| vec![("cookie".to_owned(), v.to_owned())];
    for headers in [
        Vec::new(),
        cookie(&format!("brmcp_ui={token}")),
        cookie(&format!("brmcp_bridge={token}; brmcp_serve={serve_token}")),
        vec![("x-brmcp-csrf".to_owned(), token.clone())],
        vec![("authorization".to_owned(), format!("Bearer {token}"))],
        vec![(SESSION.to_owned(), serve_token.clone())],
        vec![(SESSION.to_owned(), "0".repeat(64))],
    ] {
        assert_opens_nothing(bridge, &headers).await;
    }
    let got = statuses(
        serve,
        &[("GET", "/ui/api/state"), ("GET", "/ui/api/session")],
        &cookie(&format!("brmcp_ui={serve_token}")),
    )
    .await;
    assert_eq!(got, [401, 401], "the operator page by cookie");

    // A change from a foreign origin, even with the session; bad settings named.
    let settings = |body: serde_json::Value| {
        http.post(format!("http://{bridge}/ui/api/settings"))
            .header(SESSION, &token)
            .json(&body)
    };
    let r = settings(json!({"mode": "autopay"}))
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 403, "a foreign origin");
    let r = settings(json!({"per_call_cap_atoms": -5}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400);
    let why = r.text().await.expect("text");
    assert!(why.contains("per_call_cap_atoms"), "{why}");
    let r = settings(json!({"token": "x".repeat(40)}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400, "the token is not the page's to change");
    assert_eq!(
        mode(bridge, &token).await,
        "approval",
        "nothing above changed it"
    );

    // Logging out takes the session's own token.
    let cookie_only = cookie(&format!("brmcp_ui={token}"));
    assert_eq!(
        statuses(bridge, &[("POST", "/ui/logout")], &cookie_only).await,
        [401]
    );
    assert_eq!(state_status(bridge, &token).await, 200, "still logged in");
    let with = vec![(SESSION.to_owned(), token.clone())];
    assert_eq!(
        statuses(bridge, &[("POST", "/ui/logout")], &with).await,
        [200]
    );
    assert_eq!(state_status(bridge, &token).await, 401, "logged out");

    slow_bodies(bridge, bridge_dir).await;
    slow_login(serve).await;
    strict_hosts(bridge, serve).await;
    secret_changes(bridge, bridge_dir).await;
}

/// A session is checked before the body is awaited; a session's body has a deadline.
async fn slow_bodies(bridge: &str, bridge_dir: &str) {
    let head = |path: &str, extra: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: {bridge}\r\nContent-Type: application/json\r\n\
             Content-Length: 100\r\n{extra}\r\n"
        )
    };
    let started = Instant::now();
    let (status, _) = raw(bridge, &head("/ui/api/settings", "")).await;
    assert_eq!(status, 401, "no session: refused before the body");
    assert!(started.elapsed() < BODY_DEADLINE, "{:?}", started.elapsed());
    let token = login(
        bridge,
        &code_of(&login_url(&["bridge", "--datadir", bridge_dir, "ui"])),
    )
    .await;
    for (path, extra) in [
        ("/ui/api/settings", format!("{SESSION}: {token}\r\n")),
        ("/ui/login", String::new()),
    ] {
        let started = Instant::now();
        let (status, _) = raw(bridge, &head(path, &extra)).await;
        let took = started.elapsed();
        assert_eq!(status, 408, "{path}: a body never sent");
        assert!(
            took >= BODY_DEADLINE - Duration::from_secs(1),
            "{path}: {took:?}"
        );
    }
    assert_eq!(state_status(bridge, &token).await, 200);
}

/// The operator page, the same: no session refused before the body, and a login's
/// body under the deadline.
async fn slow_login(serve: &str) {
    let head = |path: &str| {
        format!("POST {path} HTTP/1.1\r\nHost: {serve}\r\nContent-Length: 100\r\n\r\n")
    };
    let started = Instant::now();
    let (status, _) = raw(serve, &head("/ui/api/state")).await;
    assert_eq!(status, 401, "no session: refused before the body");
    assert!(started.elapsed() < BODY_DEADLINE, "{:?}", started.elapsed());
    let (status, _) = raw(serve, &head("/ui/login")).await;
    assert_eq!(status, 408, "a login's body never sent");
    assert!(started.elapsed() >= BODY_DEADLINE - Duration::from_secs(1));
}

/// Sends `request` on a new connection and reads the answer's status line: the status
/// and the whole answer read within the deadline and slack.
async fn raw(addr: &str, request: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = tokio::time::timeout(BODY_DEADLINE + SLACK, async {
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.expect("read");
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert!(read.is_ok(), "no answer to {request:?}");
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?} to {request:?}"));
    (status, text)
}

/// Hosts no browser sends are refused on every path, the `/mcp` and `/payments`
/// endpoints too.
async fn strict_hosts(bridge: &str, serve: &str) {
    let port = bridge.rsplit_once(':').expect("port").1;
    for base in [bridge, serve] {
        for path in ["/ui/", "/ui/api/state", "/mcp/alice", "/payments"] {
            let (good, _) = raw(
                base,
                &format!(
                    "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                ),
            )
            .await;
            assert_ne!(good, 403, "{base}{path}: a plain host");
            for hosts in [
                format!("Host: 127.0.0.1:{port}@evil.example\r\n"),
                format!("Host: 127.0.0.1:{port}\r\nHost: 127.0.0.1:{port}\r\n"),
                format!("Host: 127.0.0.1:{port}\r\nHost: evil.example\r\n"),
                "Host: 127.0.0.1:http\r\n".to_owned(),
                "Host: 127.0.0.1:\r\n".to_owned(),
                "Host: 127.0.0.1:99999\r\n".to_owned(),
            ] {
                let request = format!("GET {path} HTTP/1.1\r\n{hosts}Connection: close\r\n\r\n");
                let (status, _) = raw(base, &request).await;
                assert!(
                    status == 403 || status == 400,
                    "{base}{path} {hosts:?}: {status}"
                );
            }
        }
    }
}

/// Replacing the approval secret by hand, or `ui --rotate`, ends the sessions the
/// old one opened; `/payments` takes the new secret only.
async fn secret_changes(bridge: &str, bridge_dir: &str) {
    let dir = std::path::Path::new(bridge_dir);
    let path = dir.join("approval.secret");
    let payments = |secret: String| async move {
        client()
            .get(format!("http://{bridge}/payments"))
            .bearer_auth(secret.trim())
            .send()
            .await
            .expect("payments")
            .status()
            .as_u16()
    };
    let ui = || code_of(&login_url(&["bridge", "--datadir", bridge_dir, "ui"]));
    let token = login(bridge, &ui()).await;
    let waiting = ui();
    let old = std::fs::read_to_string(&path).expect("secret");
    assert_eq!(payments(old.clone()).await, 200);
    brmcp::secure_fs::write_atomic(&path, format!("{}\n", "ab".repeat(32)).as_bytes())
        .expect("replace");
    assert_eq!(state_status(bridge, &token).await, 401, "a replaced secret");
    assert_eq!(payments(old).await, 401);
    let (status, _, _) = post_login(bridge, &waiting).await;
    assert_eq!(status, 401, "a code of the replaced secret");

    let token = login(bridge, &ui()).await;
    let old = std::fs::read_to_string(&path).expect("secret");
    let out = brmcp(&["bridge", "--datadir", bridge_dir, "ui", "--rotate"])
        .output()
        .expect("ui --rotate");
    assert!(out.status.success(), "{out:?}");
    let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert_eq!(state_status(bridge, &token).await, 401, "a rotated secret");
    let new = std::fs::read_to_string(&path).expect("secret");
    assert_ne!(old, new);
    assert_eq!(payments(old).await, 401, "the old secret at /payments");
    assert_eq!(payments(new).await, 200, "the new one");
    let token = login(bridge, &code_of(&url)).await;
    assert_eq!(state_status(bridge, &token).await, 200);
}

/// Another local server: a page at `/` that makes the browser request `/ui/pixel.gif`
/// of its own origin (another port of 127.0.0.1), recording every request's head.
pub(super) struct Attacker {
    /// Its address.
    pub(super) addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Attacker {
    pub(super) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let record = record.clone();
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !got.windows(4).any(|w| w == b"\r\n\r\n") && got.len() < 65_536 {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&got).into_owned();
                    let page = head.starts_with("GET / ");
                    record.lock().expect("lock").push(head);
                    let (kind, body) = if page {
                        (
                            "text/html",
                            "<html><body><img src=\"/ui/pixel.gif\"></body></html>",
                        )
                    } else {
                        ("image/gif", "")
                    };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                         Connection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                });
            }
        });
        Self { addr, seen }
    }

    /// The heads of the requests seen, once one for `path` came.
    pub(super) async fn wait_for(&self, path: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(45);
        loop {
            let seen = self.seen.lock().expect("lock").clone();
            if seen.iter().any(|h| h.starts_with(&format!("GET {path} "))) {
                return seen;
            }
            assert!(
                Instant::now() < deadline,
                "the browser never asked for {path}: {seen:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The headers of a recorded request head that a replay can send (not those that
/// frame the request).
pub(super) fn replayable(head: &str) -> Vec<(String, String)> {
    head.lines()
        .skip(1)
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .filter(|(k, _)| {
            !["host", "connection", "content-length", "accept-encoding"].contains(&k.as_str())
        })
        .collect()
}
