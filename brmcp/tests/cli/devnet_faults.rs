//! `brmcp devnet`'s fault dial, as a user runs it: a paid call through `brmcp serve`
//! and `brmcp bridge` completes at 500 ms latency and 20% drops set by flags; a node
//! taken offline with `brmcp devnet offline` gets its call when `online` brings it
//! back; a call whose request the relay holds when the devnet is SIGKILLed completes
//! after the restart; bad uses of the commands and flags are refused with the reason.

use std::path::Path;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::Value;

use crate::processes::{
    Procs, assert_devnet_bot_free_call, assert_fortune, brmcp, devnet_up, serve_alice,
    start_bridge, uid_in,
};

/// How long a faulty call may take: many PMs, each with its latency and re-sends.
const CALL: Duration = Duration::from_secs(120);

/// How long to watch a call that must not complete.
const QUIET: Duration = Duration::from_secs(3);

/// `brmcp devnet` with `flags` and `brmcp serve` on alice: the processes, alice's
/// uid, and what the devnet printed.
fn serving_with(dir: &Path, flags: &[&str]) -> (Procs, String, Vec<String>) {
    let mut procs = Procs(Vec::new());
    let mut args = vec!["--nodes", "2"];
    args.extend_from_slice(flags);
    let out = devnet_up(&mut procs, dir, &args);
    let alice = uid_in(&out, "alice");
    serve_alice(&mut procs, dir);
    (procs, alice, out)
}

/// An MCP session through bob's bridge to alice's bot.
async fn client(procs: &mut Procs, dir: &Path, alice: &str) -> RunningService<RoleClient, ()> {
    let (_bridge_dir, listen, token) = start_bridge(procs, dir, alice, "autopay");
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/{alice}"))
            .auth_header(token),
    );
    ().serve(transport).await.expect("MCP session")
}

/// A `fortune` call on `client` (closed once answered), run in the background: still
/// unanswered after [`QUIET`], for the reason `why`.
async fn unanswered_fortune(
    client: RunningService<RoleClient, ()>,
    why: &str,
) -> tokio::task::JoinHandle<CallToolResult> {
    let call = tokio::spawn(async move {
        let fortune = client
            .call_tool(CallToolRequestParams::new("fortune"))
            .await
            .expect("fortune");
        let _ = client.cancel().await;
        fortune
    });
    tokio::time::sleep(QUIET).await;
    assert!(!call.is_finished(), "{why}");
    call
}

fn faults_file(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("faults.json")).expect("faults.json");
    serde_json::from_str(&text).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_completes_at_500ms_latency_and_20_percent_drops() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let flags = [
        "--latency-ms",
        "500",
        "--jitter-ms",
        "100",
        "--pm-drop-rate",
        "0.2",
        "--fault-seed",
        "7",
    ];
    let (mut procs, alice, out) = serving_with(dir, &flags);
    assert!(
        out.iter().any(|l| l.starts_with("Fault dial on")),
        "{}",
        out.join("\n")
    );
    let dial = faults_file(dir);
    assert_eq!(
        (&dial["latency_ms"], &dial["pm_drop_rate"], &dial["seed"]),
        (&Value::from(500), &Value::from(0.2), &Value::from(7))
    );
    let client = client(&mut procs, dir, &alice).await;
    let started = std::time::Instant::now();
    tokio::time::timeout(CALL, assert_devnet_bot_free_call(&client))
        .await
        .expect("free call in time");
    let fortune = tokio::time::timeout(
        CALL,
        client.call_tool(CallToolRequestParams::new("fortune")),
    )
    .await
    .expect("fortune in time")
    .expect("fortune");
    assert_fortune(&fortune);
    // Three calls, each at least a request and a reply, each at least 500 ms.
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "the latency applied"
    );
    let _ = client.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_bot_gets_its_call_when_back_online() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let (mut procs, alice, out) = serving_with(dir, &[]);
    assert!(
        out.iter().any(|l| l.starts_with("Fault dial off")),
        "{}",
        out.join("\n")
    );
    let client = client(&mut procs, dir, &alice).await;
    assert_devnet_bot_free_call(&client).await;

    let dir_arg = dir.to_str().expect("utf-8");
    let offline = brmcp(&["devnet", "offline", "alice", "--dir", dir_arg])
        .output()
        .expect("devnet offline");
    assert!(offline.status.success(), "{offline:?}");
    assert_eq!(faults_file(dir)["offline"], serde_json::json!(["alice"]));
    // The devnet applies the file within a second.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let call = unanswered_fortune(client, "no answer while the bot is offline").await;

    let online = brmcp(&["devnet", "online", "alice", "--dir", dir_arg])
        .output()
        .expect("devnet online");
    assert!(online.status.success(), "{online:?}");
    let fortune = tokio::time::timeout(CALL, call)
        .await
        .expect("the call completes once the bot is back")
        .expect("task");
    assert_fortune(&fortune);
}

/// The relay holds bob's request to alice (a minute of latency, set live in
/// `faults.json`) when the devnet is killed; restarted on its directory (every fault
/// off again), the relay sends it and the call completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_held_at_the_relay_survives_a_sigkill_of_the_devnet() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let mut devnet_procs = Procs(Vec::new());
    let out = devnet_up(&mut devnet_procs, dir, &["--nodes", "2"]);
    let alice = uid_in(&out, "alice");
    let mut procs = Procs(Vec::new());
    serve_alice(&mut procs, dir);
    let client = client(&mut procs, dir, &alice).await;
    assert_devnet_bot_free_call(&client).await;

    std::fs::write(dir.join("faults.json"), r#"{"latency_ms": 60000}"#).expect("dial");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let call = unanswered_fortune(client, "held at the relay").await;
    // SIGKILL.
    drop(devnet_procs);

    let mut devnet_procs = Procs(Vec::new());
    devnet_up(&mut devnet_procs, dir, &["--nodes", "2"]);
    let fortune = tokio::time::timeout(CALL, call)
        .await
        .expect("the call completes after the restart")
        .expect("task");
    assert_fortune(&fortune);
    drop(devnet_procs);
}

#[test]
fn offline_and_online_refuse_an_unknown_node_or_directory() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let dir_arg = dir.to_str().expect("utf-8");
    let none = brmcp(&["devnet", "offline", "alice", "--dir", dir_arg])
        .output()
        .expect("devnet offline");
    assert!(!none.status.success());
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(err.contains("no fault dial in"), "{err}");

    std::fs::write(dir.join("faults.json"), "{}").expect("write");
    let unknown = brmcp(&["devnet", "online", "zed", "--dir", dir_arg])
        .output()
        .expect("devnet online");
    assert!(!unknown.status.success());
    let err = String::from_utf8_lossy(&unknown.stderr);
    assert!(err.contains("no node \"zed\""), "{err}");

    std::fs::write(dir.join("faults.json"), r#"{"latency": 5}"#).expect("write");
    std::fs::create_dir(dir.join("alice")).expect("mkdir");
    let bad = brmcp(&["devnet", "offline", "alice", "--dir", dir_arg])
        .output()
        .expect("devnet offline");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("faults.json: latency: unknown key"), "{err}");

    // Flags out of range, or naming no node, stop the devnet before it starts.
    for (flag, value, says) in [
        ("--offline", "zed", "--offline zed: no such node"),
        ("--pm-drop-rate", "1", "expected a number from 0 to 0.9"),
        ("--latency-ms", "60001", "--latency-ms"),
    ] {
        let out = brmcp(&["devnet", "--dir", dir_arg, flag, value])
            .output()
            .expect("devnet");
        assert!(!out.status.success(), "{flag} {value}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{flag} {value}: {err}");
    }
}
