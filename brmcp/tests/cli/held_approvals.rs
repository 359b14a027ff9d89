//! A bridge run as a service (stdin not a terminal) on `--listen localhost:PORT`: an
//! agent reaches a bot by the name the user gave it, a payment held for approval is
//! logged with how to decide it, and a rename applies to the endpoint at once.

use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use super::processes::{
    assert_fortune, bridge_settings, brmcp, free_port, http_bridge, serving, spawn, wait_for,
};

/// How long a reloaded bot list may take to reach the endpoint: it polls every second;
/// generous for a loaded machine.
const RELOAD_WITHIN: Duration = Duration::from_secs(20);

fn agent_transport(url: String, token: &str) -> StreamableHttpClientTransport<reqwest::Client> {
    StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token.to_owned()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_bridge_logs_held_payments_and_serves_bots_by_name() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut procs, alice, _bob, _) = serving(dir.path());
    let bridge_dir = bridge_settings(dir.path(), &alice, "approval");
    let rpc = dir.path().join("bob").join("brmcp-serve.conf");
    let port = free_port();
    let listen = format!("localhost:{port}");
    let mut cmd = http_bridge(&bridge_dir, &rpc, &listen);
    cmd.stdin(Stdio::null());
    let lines = spawn(&mut procs, cmd);
    let out = wait_for(&lines, "Ctrl-C stops the bridge.");
    let by_name = format!("http://127.0.0.1:{port}/mcp/alice");
    assert!(
        out.iter().any(|l| l.contains(&by_name)),
        "the bridge lists {by_name}:\n{}",
        out.join("\n")
    );
    let token = String::from_utf8_lossy(
        &brmcp(&["bridge", "--datadir", &bridge_dir, "token", "show"])
            .output()
            .expect("token show")
            .stdout,
    )
    .trim()
    .to_owned();

    // By name, through the host name it listens on.
    let agent = ()
        .serve(agent_transport(
            format!("http://{listen}/mcp/alice"),
            &token,
        ))
        .await
        .expect("MCP session by the bot's name");
    let peer = agent.peer().clone();
    let call =
        tokio::spawn(async move { peer.call_tool(CallToolRequestParams::new("fortune")).await });
    let held = wait_for(&lines, "payment waits for approval");
    let line = held.last().expect("the line").clone();
    for part in [
        "bot=alice",
        "tool=fortune",
        "atoms=10000",
        &format!("brmcp bridge --datadir {bridge_dir} approvals approve "),
    ] {
        assert!(line.contains(part), "{part} missing: {line}");
    }
    let id = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("id="))
        .expect("the payment's id")
        .trim_matches('"')
        .to_owned();
    let decided = brmcp(&[
        "bridge",
        "--datadir",
        &bridge_dir,
        "approvals",
        "approve",
        &id,
    ])
    .output()
    .expect("approvals approve");
    assert!(decided.status.success(), "{decided:?}");
    assert_fortune(&call.await.expect("join").expect("fortune"));

    // Renamed: the new name serves at once (the file is reloaded), the old one is
    // refused naming it.
    let renamed = brmcp(&[
        "bridge",
        "--datadir",
        &bridge_dir,
        "bots",
        "add",
        "oracle",
        &alice,
        "--replace",
    ])
    .output()
    .expect("bots add");
    assert!(renamed.status.success(), "{renamed:?}");
    let http = reqwest::Client::new();
    let deadline = tokio::time::Instant::now() + RELOAD_WITHIN;
    loop {
        let old = http
            .post(format!("http://{listen}/mcp/alice"))
            .bearer_auth(&token)
            .header("Accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await
            .expect("the bridge answers");
        let status = old.status().as_u16();
        let body = old.text().await.unwrap_or_default();
        let refused: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let message = refused["error"]["message"].as_str().unwrap_or_default();
        if status == 404 && message.contains("unknown bot \"alice\"") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the old name still serves: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let oracle = ()
        .serve(agent_transport(
            format!("http://{listen}/mcp/oracle"),
            &token,
        ))
        .await
        .expect("MCP session by the new name");
    assert_eq!(oracle.list_all_tools().await.expect("tools/list").len(), 2);
    let _ = oracle.cancel().await;
    let _ = agent.cancel().await;
}
