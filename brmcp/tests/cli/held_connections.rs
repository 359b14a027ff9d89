//! A local process holding connections without any credential cannot freeze the
//! bridge or the operator's page: while hundreds of connections send request headers
//! and never their bodies (reconnecting as soon as they are dropped) and a slowloris
//! keeps reopening half-sent headers, a new agent, a `bridge stdio` agent,
//! `brmcp bridge approvals` and the logged-in page are each served within a second,
//! and so is the operator's logged-in page under the same flood.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::processes::{brmcp, free_port, spawn, start_bridge, start_devnet, wait_for};

/// How long each served request may take under the flood: generous for a loaded
/// machine, far below the freeze (which lasts as long as the flood).
const SERVED_WITHIN: Duration = Duration::from_secs(1);

/// How long a `bridge stdio` process may take to start and attach: it spawns, reads
/// the data directory and probes the bridge before its first request.
const STDIO_START_WITHIN: Duration = Duration::from_secs(10);

/// A flood against `addr`: `bodies` connections sending `POST /ui/login` headers
/// with a `Content-Length` and never the body, and `lorises` sending half their
/// headers, each reopened as soon as the server drops it. Runs on its own threads
/// until the returned [`Flood`] is dropped; the counter counts connections opened.
fn flood(addr: SocketAddr, bodies: usize, lorises: usize) -> (Flood, Arc<AtomicUsize>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("flood runtime");
    let opened = Arc::new(AtomicUsize::new(0));
    let body_owed = format!(
        "POST /ui/login HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: 1000\r\n\r\n{{\"code\":\""
    );
    let half_headers = format!("GET /ui/api/state HTTP/1.1\r\nHost: {addr}\r\nX-Brmcp-Session: ");
    for n in 0..bodies + lorises {
        let head = if n < bodies {
            body_owed.clone()
        } else {
            half_headers.clone()
        };
        let opened = opened.clone();
        runtime.spawn(async move {
            loop {
                let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                };
                opened.fetch_add(1, Ordering::Relaxed);
                if stream.write_all(head.as_bytes()).await.is_ok() {
                    // Held until the server drops it.
                    let mut buf = [0u8; 512];
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                }
            }
        });
    }
    (Flood(Some(runtime)), opened)
}

/// A flood's runtime, shut down (its connections closed) on drop.
struct Flood(Option<tokio::runtime::Runtime>);

impl Drop for Flood {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// Waits until the flood has opened `at_least` connections.
async fn flooding(opened: &AtomicUsize, at_least: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while opened.load(Ordering::Relaxed) < at_least {
        assert!(Instant::now() < deadline, "the flood did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Let it settle into holding what it opened.
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The login code of the login URL a `ui` command prints.
fn login_code(args: &[&str]) -> String {
    let out = brmcp(args).output().expect("ui command");
    assert!(out.status.success(), "{args:?}: {out:?}");
    let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    url.rsplit_once('#').expect("fragment").1.to_owned()
}

/// A client that opens a new connection for every request, as a newcomer does.
fn fresh_client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client")
}

/// Logs in to the page at `base` with `code`: the session's token.
async fn log_in(base: SocketAddr, code: &str) -> String {
    let r = fresh_client()
        .post(format!("http://{base}/ui/login"))
        .json(&json!({ "code": code }))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 200, "login at {base}");
    let v: serde_json::Value = r.json().await.expect("login json");
    v["token"].as_str().expect("token").to_owned()
}

/// The logged-in page's state, read on a new connection, within [`SERVED_WITHIN`].
async fn page_served(base: SocketAddr, session: &str) {
    let asked = Instant::now();
    let r = tokio::time::timeout(
        SERVED_WITHIN * 5,
        fresh_client()
            .get(format!("http://{base}/ui/api/state"))
            .header("x-brmcp-session", session)
            .send(),
    )
    .await
    .unwrap_or_else(|_| panic!("the page at {base} was not served"))
    .expect("state");
    assert_eq!(r.status(), 200, "{base}");
    let took = asked.elapsed();
    assert!(took < SERVED_WITHIN, "the page at {base} took {took:?}");
}

/// Runs `f`, asserting it ends within `bound`: what it gave.
async fn within<T>(what: &str, bound: Duration, f: impl Future<Output = T>) -> T {
    let asked = Instant::now();
    let out = tokio::time::timeout(bound * 5, f)
        .await
        .unwrap_or_else(|_| panic!("{what} was not served"));
    let took = asked.elapsed();
    assert!(took < bound, "{what} took {took:?}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_connections_freeze_neither_the_bridge_nor_the_operator_page() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut procs, alice, _bob) = start_devnet(dir.path());
    let alice_arg = dir.path().join("alice").to_str().expect("utf-8").to_owned();
    let ui_listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let serve = spawn(
        &mut procs,
        brmcp(&[
            "serve",
            "--datadir",
            &alice_arg,
            "--ui-listen",
            &ui_listen.to_string(),
        ]),
    );
    wait_for(&serve, "operator page on");
    let (bridge_dir, listen, token) = start_bridge(&mut procs, dir.path(), &alice, "autopay");
    let bridge: SocketAddr = listen.parse().expect("listen address");
    let rpc = dir.path().join("bob").join("brmcp-serve.conf");

    // The user logged in to both pages before the flood.
    let bridge_session = log_in(
        bridge,
        &login_code(&["bridge", "--datadir", &bridge_dir, "ui"]),
    )
    .await;
    let serve_session = log_in(
        ui_listen,
        &login_code(&["serve", "--datadir", &alice_arg, "ui"]),
    )
    .await;
    let agent_transport = |token: &str| {
        StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/{alice}"))
                .auth_header(token.to_owned()),
        )
    };
    // The bot's link is up before the flood: what is timed below is the listener.
    let warm = ().serve(agent_transport(&token)).await.expect("agent");
    warm.list_all_tools().await.expect("tools/list");
    let _ = warm.cancel().await;

    // 256 bodies owed, as many as the bridge has slots, and a slowloris.
    let (bridge_flood, opened) = flood(bridge, 256, 16);
    flooding(&opened, 272).await;

    // A new agent: its session and a call.
    let agent = within("a new agent's initialize", SERVED_WITHIN, async {
        ().serve(agent_transport(&token)).await.expect("agent")
    })
    .await;
    let echo = within("a new agent's call", SERVED_WITHIN, async {
        agent
            .call_tool(
                CallToolRequestParams::new("echo").with_arguments(
                    json!({"text": "hi"})
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                ),
            )
            .await
            .expect("echo")
    })
    .await;
    assert_eq!(echo.structured_content, Some(json!({"echo": "hi"})));
    let _ = agent.cancel().await;

    // `bridge stdio`, attaching to the running bridge.
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_brmcp"));
    cmd.args([
        "bridge",
        "--datadir",
        &bridge_dir,
        "--rpc-config",
        rpc.to_str().expect("utf-8"),
        "stdio",
        "--bot",
        "alice",
    ]);
    let stdio = within("bridge stdio's start", STDIO_START_WITHIN, async {
        let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn stdio");
        ().serve(transport).await.expect("MCP over bridge stdio")
    })
    .await;
    let tools = within("a bridge stdio agent's call", SERVED_WITHIN, async {
        stdio.list_all_tools().await.expect("tools/list")
    })
    .await;
    assert_eq!(tools.len(), 2);
    let _ = stdio.cancel().await;

    // `approvals`, with the approval secret on /payments.
    let listed = within("approvals list", SERVED_WITHIN, async {
        let bridge_dir = bridge_dir.clone();
        let listen = listen.clone();
        tokio::task::spawn_blocking(move || {
            brmcp(&[
                "bridge",
                "--datadir",
                &bridge_dir,
                "--listen",
                &listen,
                "approvals",
                "list",
                "--json",
            ])
            .output()
            .expect("approvals")
        })
        .await
        .expect("join")
    })
    .await;
    assert!(listed.status.success(), "{listed:?}");
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "[]");

    // The page, logged in before the flood, on a new connection.
    page_served(bridge, &bridge_session).await;
    // Every connection the flood opened beyond the listener's bounds was dropped
    // for another: it kept reopening.
    assert!(
        opened.load(Ordering::Relaxed) > 272,
        "the flood was held off"
    );
    drop(bridge_flood);

    // The operator's page: more than its 32 slots in bodies owed, and a slowloris.
    let (serve_flood, opened) = flood(ui_listen, 48, 8);
    flooding(&opened, 56).await;
    page_served(ui_listen, &serve_session).await;
    page_served(ui_listen, &serve_session).await;
    drop(serve_flood);
}
