//! The upstream supervisor against failing upstreams: a command that exits at once is
//! retried with doubling backoff, its state and error in the hook and the status file,
//! and stops cleanly; a URL upstream sends its configured headers and the bearer token
//! its environment variable holds, and a missing variable is a clear error.

use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use brmcp::server::upstream::{
    STATUS_FILE, StatusHook, UpstreamState, UpstreamStatus, Upstreams, read_status,
};
use brmcp::server::{DynamicTools, ServeConfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub(crate) fn upstreams(value: Value) -> ServeConfig {
    ServeConfig::parse(
        &json!({ "upstreams": value }).to_string(),
        Path::new("brmcp.json"),
    )
    .unwrap()
}

pub(crate) fn hook() -> (StatusHook, mpsc::Receiver<UpstreamStatus>) {
    let (tx, rx) = mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let hook: StatusHook = Arc::new(move |s: &UpstreamStatus| {
        let _ = tx.lock().unwrap().send(s.clone());
    });
    (hook, rx)
}

/// The next status the hook saw in `state`.
pub(crate) fn next_in(rx: &mpsc::Receiver<UpstreamStatus>, state: UpstreamState) -> UpstreamStatus {
    loop {
        let status = rx
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no {state:?} status"));
        if status.state == state {
            return status;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_looping_command_backs_off_and_stops() {
    let config = upstreams(json!([{"name": "dies", "command": "sh", "args": ["-c", "exit 3"]}]));
    let dir = tempfile::tempdir().unwrap();
    let tools = DynamicTools::new();
    let (hook, rx) = hook();
    let started = Upstreams::start(
        &config.upstreams,
        &tools,
        Some(dir.path().join(STATUS_FILE)),
        Some(hook),
    );
    let rx = tokio::task::spawn_blocking(move || {
        let waits: Vec<Option<u64>> = (0..3)
            .map(|_| next_in(&rx, UpstreamState::Down).retry_in_secs)
            .collect();
        (waits, rx)
    });
    let (waits, rx) = rx.await.unwrap();
    assert_eq!(waits, [Some(1), Some(2), Some(4)], "the backoff doubles");
    let status = read_status(dir.path()).unwrap();
    assert_eq!(status.len(), 1);
    assert_eq!(status[0].name, "dies");
    assert!(status[0].restarts >= 2, "{status:?}");
    assert!(status[0].error.is_some(), "{status:?}");
    assert!(tools.names("dies").is_empty(), "nothing served from it");
    assert_eq!(started.status()[0].name, "dies");

    started.shutdown().await;
    let stopped = next_in(&rx, UpstreamState::Stopped);
    assert_eq!(stopped.pid, None);
    assert_eq!(
        read_status(dir.path()).unwrap()[0].state,
        UpstreamState::Stopped
    );
}

/// Accepts one HTTP request and answers 500; returns its head.
async fn one_request(listener: tokio::net::TcpListener) -> String {
    let (mut socket, _) = listener.accept().await.unwrap();
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = socket.read(&mut buf).await.unwrap();
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let _ = socket
        .write_all(
            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        )
        .await;
    String::from_utf8_lossy(&head).to_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_upstream_sends_its_headers_and_bearer_token() {
    // A variable cargo sets for every test process stands in for the operator's.
    let token = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let request = tokio::spawn(one_request(listener));
    let config = upstreams(json!([{
        "name": "web", "url": url, "headers": {"X-Brmcp-Test": "yes"},
        "bearer_env": "CARGO_PKG_NAME"
    }]));
    let (hook, rx) = hook();
    let started = Upstreams::start(&config.upstreams, &DynamicTools::new(), None, Some(hook));
    let head = tokio::time::timeout(Duration::from_secs(20), request)
        .await
        .expect("a request")
        .unwrap();
    assert!(head.starts_with("post /mcp "), "{head}");
    assert!(head.contains("x-brmcp-test: yes\r\n"), "{head}");
    assert!(
        head.contains(&format!(
            "authorization: bearer {}\r\n",
            token.to_lowercase()
        )),
        "{head}"
    );
    let down = tokio::task::spawn_blocking(move || next_in(&rx, UpstreamState::Down))
        .await
        .unwrap();
    assert!(down.error.is_some(), "{down:?}");
    started.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bearer_variable_is_a_clear_error() {
    let config = upstreams(json!([{
        "name": "web", "url": "http://127.0.0.1:9/mcp",
        "bearer_env": "BRMCP_TEST_NO_SUCH_VARIABLE"
    }]));
    let (hook, rx) = hook();
    let started = Upstreams::start(&config.upstreams, &DynamicTools::new(), None, Some(hook));
    let down = tokio::task::spawn_blocking(move || next_in(&rx, UpstreamState::Down))
        .await
        .unwrap();
    assert_eq!(
        down.error.as_deref(),
        Some("the bearer token variable BRMCP_TEST_NO_SUCH_VARIABLE is not set")
    );
    assert_eq!(
        down.to_string(),
        "web (url): down: the bearer token variable BRMCP_TEST_NO_SUCH_VARIABLE is not set; \
         retrying in 1 s"
    );
    started.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_waits_for_each_upstream_to_come_up_or_fail_within_its_bound() {
    let config = upstreams(json!([{"name": "dies", "command": "sh", "args": ["-c", "exit 3"]}]));
    let failing = Upstreams::start(&config.upstreams, &DynamicTools::new(), None, None);
    assert!(
        failing.settled(Duration::from_secs(20)).await,
        "a failed start settles"
    );
    assert_eq!(failing.status()[0].state, UpstreamState::Down);
    failing.shutdown().await;

    // A command that never answers the handshake is still starting when the wait ends.
    let config = upstreams(json!([{"name": "mute", "command": "sleep", "args": ["30"]}]));
    let mute = Upstreams::start(&config.upstreams, &DynamicTools::new(), None, None);
    let started = std::time::Instant::now();
    assert!(!mute.settled(Duration::from_millis(500)).await);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(mute.status()[0].state, UpstreamState::Starting);
    mute.shutdown().await;
}
