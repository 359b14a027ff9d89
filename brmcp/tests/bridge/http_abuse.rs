//! The HTTP endpoint under abuse and per the MCP specification: Origin (a foreign page
//! holding the token is refused), DELETE (204), `allow_remote` (the address the agent
//! reached and the configured names are allowed hosts), sessions bounded per token and
//! in total with idle ones expired, and a flood of half-sent headers held to the
//! connection limit and the header-read timeout.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{INITIALIZE, autopay, env_with, http};
use brmcp::bridge::{BridgeError, Config, HttpLimits};

const TOKEN: &str = "0123456789abcdef0123456789abcdef";
const AUTH: (&str, &str) = ("Authorization", "Bearer 0123456789abcdef0123456789abcdef");
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

async fn started(config: impl FnOnce(Config) -> Config) -> (crate::common::Env, SocketAddr) {
    let env = env_with(
        |bot| {
            let mut s = autopay(bot);
            s.enabled = true;
            s.token = TOKEN.into();
            s
        },
        config,
    )
    .await;
    env.bridge.start().await.expect("start");
    let addr = env.bridge.listen_addr().expect("listening");
    (env, addr)
}

async fn post(
    addr: SocketAddr,
    path: &str,
    extra: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        AUTH,
    ];
    headers.extend_from_slice(extra);
    http(addr, "POST", path, &headers, body).await
}

/// Opens a session: its id.
async fn open_session(addr: SocketAddr, path: &str) -> String {
    let (status, headers, body) = post(addr, path, &[], INITIALIZE).await;
    assert_eq!(status, 200, "{body}");
    header(&headers, "mcp-session-id")
        .expect("session id")
        .to_owned()
}

/// Whether the bridge still holds session `id` (rmcp answers 404 for one it does not).
async fn alive(addr: SocketAddr, path: &str, id: &str) -> bool {
    let (status, _, body) = post(addr, path, &[("Mcp-Session-Id", id)], INITIALIZED).await;
    match status {
        202 => true,
        404 => false,
        other => panic!("unexpected {other}: {body}"),
    }
}

fn with_limits(f: impl FnOnce(&mut HttpLimits)) -> impl FnOnce(Config) -> Config {
    move |mut c| {
        f(&mut c.http_limits);
        c
    }
}

#[tokio::test]
async fn origin_is_checked_even_with_a_valid_token() {
    let (env, addr) = started(|mut c| {
        c.allowed_hosts = vec!["agents.example".into()];
        c
    })
    .await;
    let path = format!("/mcp/{}", env.bot_id);
    for origin in [
        "https://evil.example",
        "http://evil.example:8891",
        "null",
        "http://127.0.0.1.evil.example",
        "http://localhost@evil.example",
        "file://",
    ] {
        let (status, _, body) = post(addr, &path, &[("Origin", origin)], INITIALIZE).await;
        assert_eq!(status, 403, "{origin}: {body}");
        assert!(body.contains("origin not allowed"), "{body}");
    }
    for origin in [
        "http://localhost:5173",
        "http://127.0.0.1",
        "http://[::1]:3000",
        "https://agents.example",
    ] {
        let (status, _, body) = post(addr, &path, &[("Origin", origin)], INITIALIZE).await;
        assert_eq!(status, 200, "{origin}: {body}");
    }
    env.bridge.close().await;
}

#[tokio::test]
async fn delete_answers_204_and_ends_the_session() {
    let (env, addr) = started(|c| c).await;
    let path = format!("/mcp/{}", env.bot_id);
    let id = open_session(addr, &path).await;
    assert!(alive(addr, &path, &id).await);
    let (status, _, body) = http(
        addr,
        "DELETE",
        &path,
        &[AUTH, ("Mcp-Session-Id", id.as_str())],
        "",
    )
    .await;
    assert_eq!(status, 204, "{body}");
    assert!(body.is_empty(), "{body}");
    assert!(!alive(addr, &path, &id).await);
    env.bridge.close().await;
}

#[tokio::test]
async fn allow_remote_accepts_the_reached_address_and_configured_names() {
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let (env, addr) = started(move |mut c| {
        c = c.with_listen(any);
        c.allow_remote = true;
        c.allowed_hosts = vec!["agents.example:8891".into()];
        c
    })
    .await;
    // Reach the wildcard listener at another address, as a remote agent reaches the
    // machine's interface address.
    let reached: SocketAddr = format!("127.0.0.2:{}", addr.port()).parse().unwrap();
    let path = format!("/mcp/{}", env.bot_id);
    let host = reached.to_string();
    for host in [host.as_str(), "agents.example:8891", "localhost"] {
        let (status, _, body) = post(reached, &path, &[("Host", host)], INITIALIZE).await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    for host in ["evil.example", "agents.example:1", "127.0.0.3"] {
        let (status, _, _) = post(reached, &path, &[("Host", host)], INITIALIZE).await;
        assert_eq!(status, 403, "{host}");
    }
    env.bridge.close().await;

    // Not asked for: the refusal names the flag that exists.
    let (env, _) = (
        env_with(
            |bot| {
                let mut s = autopay(bot);
                s.enabled = true;
                s
            },
            move |c| c.with_listen(any),
        )
        .await,
        (),
    );
    let err = env.bridge.start().await.unwrap_err();
    assert!(matches!(err, BridgeError::RemoteRefused(_)));
    assert!(err.to_string().contains("--allow-remote"), "{err}");
}

#[tokio::test]
async fn sessions_are_bounded_per_token_least_recently_used_go_first() {
    let (env, addr) = started(with_limits(|l| {
        l.max_sessions_per_token = 3;
        l.max_sessions = 100;
    }))
    .await;
    let path = format!("/mcp/{}", env.bot_id);
    let mut ids = Vec::new();
    for _ in 0..10 {
        ids.push(open_session(addr, &path).await);
    }
    let mut live = Vec::new();
    for id in &ids {
        live.push(alive(addr, &path, id).await);
    }
    let expected: Vec<bool> = (0..10).map(|i| i >= 7).collect();
    assert_eq!(live, expected);
    env.bridge.close().await;
}

#[tokio::test]
async fn sessions_are_bounded_in_total() {
    let (env, addr) = started(with_limits(|l| {
        l.max_sessions_per_token = 100;
        l.max_sessions = 2;
    }))
    .await;
    let path = format!("/mcp/{}", env.bot_id);
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(open_session(addr, &path).await);
    }
    let mut live = Vec::new();
    for id in &ids {
        live.push(alive(addr, &path, id).await);
    }
    assert_eq!(live, [false, false, false, false, true, true]);
    env.bridge.close().await;
}

#[tokio::test]
async fn busy_sessions_are_kept_and_a_new_one_is_refused_with_retry_after() {
    use tokio::io::AsyncWriteExt;
    let (env, addr) = started(with_limits(|l| {
        l.max_sessions_per_token = 1;
    }))
    .await;
    let path = format!("/mcp/{}", env.bot_id);
    let id = open_session(addr, &path).await;
    // An open event stream keeps the session busy.
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let get = format!(
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\nAuthorization: Bearer {TOKEN}\r\nMcp-Session-Id: {id}\r\n\r\n"
    );
    assert!(alive(addr, &path, &id).await);
    stream.write_all(get.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, headers, body) = post(addr, &path, &[], INITIALIZE).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("too many sessions"), "{body}");
    assert!(
        body.contains(r#"agent \"default\" holds its share"#),
        "{body}"
    );
    assert!(header(&headers, "retry-after").is_some());
    drop(stream);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The stream ended: the session is idle and makes room.
    let fresh = open_session(addr, &path).await;
    assert!(alive(addr, &path, &fresh).await);
    assert!(!alive(addr, &path, &id).await);
    env.bridge.close().await;
}

#[tokio::test]
async fn idle_sessions_expire() {
    let (env, addr) = started(with_limits(|l| {
        l.session_idle = Duration::from_millis(300);
    }))
    .await;
    let path = format!("/mcp/{}", env.bot_id);
    let id = open_session(addr, &path).await;
    assert!(alive(addr, &path, &id).await);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(!alive(addr, &path, &id).await);
    env.bridge.close().await;
}

/// Connects and sends `head` (a request's start), holding the connection: a task
/// that ends with the time the server closed it.
async fn held(addr: SocketAddr, head: String, start: Instant) -> tokio::task::JoinHandle<Duration> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 256];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return start.elapsed(),
                Ok(_) => {}
            }
        }
    })
}

/// The head of a `POST` whose body of `len` bytes never comes.
fn body_owed(path: &str, extra: &str, len: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n{extra}Content-Length: {len}\r\n\r\n{{"
    )
}

#[tokio::test]
async fn half_header_flood_is_timed_out() {
    const FLOOD: usize = 24;
    let timeout = Duration::from_secs(1);
    let (env, addr) = started(with_limits(|l| {
        l.header_read_timeout = timeout;
    }))
    .await;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..FLOOD {
        let head = "POST /mcp/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty".to_owned();
        tasks.push(held(addr, head, start).await);
    }
    for task in tasks {
        let at = tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every half-header connection is closed by the timeout")
            .unwrap();
        assert!(at >= timeout, "{at:?}");
    }
    let path = format!("/mcp/{}", env.bot_id);
    let (status, _, body) = post(addr, &path, &[], INITIALIZE).await;
    assert_eq!(status, 200, "{body}");
    env.bridge.close().await;
}

/// A body that does not arrive within the body deadline is answered 408 and the
/// connection closed, on the MCP endpoint (an agent's) and on the page's login
/// (anyone's) alike; a body that trickles in is held to one deadline.
#[tokio::test]
async fn a_body_owed_past_the_deadline_is_answered_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let deadline = Duration::from_millis(600);
    let (env, addr) = started(with_limits(|l| l.body_read_timeout = deadline)).await;
    let mcp = format!("/mcp/{}", env.bot_id);
    let bearer = format!("Authorization: Bearer {TOKEN}\r\n");
    for (path, extra) in [(mcp.as_str(), bearer.as_str()), ("/ui/login", "")] {
        for trickle in [false, true] {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            let start = Instant::now();
            stream
                .write_all(body_owed(path, extra, 400).as_bytes())
                .await
                .unwrap();
            if trickle {
                // A byte every 100 ms: each read is quick, the body never whole.
                for _ in 0..20 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if stream.write_all(b" ").await.is_err() {
                        break;
                    }
                }
            }
            let mut raw = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
                .await
                .expect("the server answers and closes")
                .ok();
            let raw = String::from_utf8_lossy(&raw);
            assert!(raw.starts_with("HTTP/1.1 408"), "{path} {trickle}: {raw}");
            assert!(raw.contains("did not arrive"), "{raw}");
            let took = start.elapsed();
            assert!(took >= deadline, "{path}: {took:?}");
            assert!(took < deadline * 8, "{path} {trickle}: {took:?}");
        }
    }
    // A body that comes in time is served.
    let (status, _, body) = post(addr, &mcp, &[], INITIALIZE).await;
    assert_eq!(status, 200, "{body}");
    env.bridge.close().await;
}

/// Connections held without a credential (bodies owed to the page's login, headers
/// never finished) cannot keep an agent out: each new connection drops the oldest of
/// them, and a connection that carried an agent's token keeps its slot mid-request.
#[tokio::test]
async fn held_connections_without_a_credential_cannot_starve_an_agent() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const LIMIT: usize = 16;
    const UNPROVEN: usize = 8;
    const FLOOD: usize = 5 * LIMIT;
    let (env, addr) = started(with_limits(|l| {
        l.max_connections = LIMIT;
        l.max_unproven_connections = UNPROVEN;
        l.header_read_timeout = Duration::from_secs(60);
        l.body_read_timeout = Duration::from_secs(60);
    }))
    .await;
    let mcp = format!("/mcp/{}", env.bot_id);
    // An agent's request whose body is still on its way when the flood comes.
    let mut agent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {mcp} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
        INITIALIZE.len()
    );
    agent.write_all(head.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = Instant::now();
    let mut flood = Vec::new();
    for i in 0..FLOOD {
        let head = if i % 2 == 0 {
            body_owed("/ui/login", "", 100)
        } else {
            "GET /ui/ HTTP/1.1\r\nHost: 127.0.0.1\r\nCook".to_owned()
        };
        flood.push(held(addr, head, start).await);
    }
    // A new agent is served at once.
    let asked = Instant::now();
    let (status, _, body) = post(addr, &mcp, &[], INITIALIZE).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    // The agent that proved itself before the flood still has its connection.
    agent.write_all(INITIALIZE.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), agent.read_to_end(&mut raw))
        .await
        .expect("answered")
        .unwrap();
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    // The flood holds at most its share: the rest was dropped long before a timeout.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dropped = flood.iter().filter(|t| t.is_finished()).count();
    assert!(dropped >= FLOOD - UNPROVEN, "{dropped} of {FLOOD} dropped");
    for task in flood {
        task.abort();
    }
    env.bridge.close().await;
}
