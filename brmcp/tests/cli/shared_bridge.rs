//! One Bison Relay client, many agents: `brmcp bridge stdio` processes attach to the
//! bridge running on their data directory (the HTTP `brmcp bridge`, or the first
//! `bridge stdio`, which becomes the bridge), so every agent shares one client, one
//! spend log and one set of caps; `approvals` finds whichever bridge runs and decides
//! with the approval secret, which the agents' token cannot.

use brmcp::adapters::protocol::result_text as text_of;
use std::path::Path;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use super::processes::{
    assert_fortune, bridge_settings, brmcp, free_port, http_bridge, serving, spawn, wait_for,
};

type Agent = RunningService<RoleClient, ()>;

/// `brmcp bridge stdio --bot alice` on `bridge_dir`, as an agent host spawns it.
async fn stdio_agent(dir: &Path, bridge_dir: &str) -> (Agent, u32) {
    stdio_agent_listening(dir, bridge_dir, None).await
}

/// [`stdio_agent`] with `--listen listen` when given.
async fn stdio_agent_listening(dir: &Path, bridge_dir: &str, listen: Option<&str>) -> (Agent, u32) {
    let rpc = dir.join("bob").join("brmcp-serve.conf");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_brmcp"));
    cmd.args(["bridge", "--datadir", bridge_dir]);
    if let Some(listen) = listen {
        cmd.args(["--listen", listen]);
    }
    cmd.args([
        "--rpc-config",
        rpc.to_str().expect("utf-8"),
        "stdio",
        "--bot",
        "alice",
    ]);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn bridge stdio");
    let pid = transport.id().expect("pid");
    let agent = ().serve(transport).await.expect("MCP over bridge stdio");
    (agent, pid)
}

fn fortune() -> CallToolRequestParams {
    CallToolRequestParams::new("fortune")
}

fn echo() -> CallToolRequestParams {
    CallToolRequestParams::new("echo").with_arguments(
        json!({"text": "hi"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    )
}

fn set(bridge_dir: &str, key: &str, value: serde_json::Value) {
    let path = Path::new(bridge_dir).join("mcpclient.json");
    let mut settings: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("mcpclient.json"))
            .expect("json");
    settings[key] = value;
    std::fs::write(&path, settings.to_string()).expect("write settings");
}

fn bridge(bridge_dir: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["bridge", "--datadir", bridge_dir];
    all.extend_from_slice(args);
    brmcp(&all).output().expect("brmcp bridge")
}

fn record(bridge_dir: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(Path::new(bridge_dir).join("bridge.endpoint"))
        .expect("endpoint record");
    serde_json::from_str(&text).expect("record json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_and_stdio_agents_share_one_client_and_its_caps() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut procs, alice, _bob, _) = serving(dir.path());
    let bridge_dir = bridge_settings(dir.path(), &alice, "autopay");
    // Three fortunes (10000 each) reach the daily cap together.
    set(&bridge_dir, "per_day_cap_atoms", json!(30_000));
    let rpc = dir.path().join("bob").join("brmcp-serve.conf");
    let listen = format!("127.0.0.1:{}", free_port());
    let lines = spawn(&mut procs, http_bridge(&bridge_dir, &rpc, &listen));
    wait_for(&lines, "Ctrl-C stops the bridge.");
    let bridge_pid = procs.0.last().expect("bridge").id();
    assert_eq!(record(&bridge_dir)["pid"], json!(bridge_pid));
    assert_eq!(record(&bridge_dir)["addr"], json!(listen));

    // A second HTTP bridge on the directory is refused, naming the running one.
    let second = http_bridge(&bridge_dir, &rpc, &format!("127.0.0.1:{}", free_port()))
        .output()
        .expect("second bridge");
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(
        !second.status.success()
            && said.contains("a bridge already runs")
            && said.contains(&listen),
        "{second:?}"
    );

    let token = String::from_utf8_lossy(&bridge(&bridge_dir, &["token", "show"]).stdout)
        .trim()
        .to_owned();
    let http_agent = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/{alice}"))
                .auth_header(token),
        ))
        .await
        .expect("HTTP agent");
    let ((one, _), (two, _)) = tokio::join!(
        stdio_agent(dir.path(), &bridge_dir),
        stdio_agent(dir.path(), &bridge_dir)
    );
    // Attached, not owners: the record is still the HTTP bridge's.
    assert_eq!(record(&bridge_dir)["pid"], json!(bridge_pid));

    for agent in [&http_agent, &one, &two] {
        let paid = agent.call_tool(fortune()).await.expect("fortune");
        assert_fortune(&paid);
    }
    let refused = one.call_tool(fortune()).await.expect("fortune");
    let said = text_of(&refused);
    assert_eq!(refused.is_error, Some(true), "{said}");
    assert!(
        said.contains("payment not made") && said.contains("cap"),
        "{said}"
    );
    let refused = two.call_tool(fortune()).await.expect("fortune");
    assert_eq!(refused.is_error, Some(true), "{}", text_of(&refused));

    let spend = bridge(&bridge_dir, &["spend", "--json"]);
    let entries: Vec<serde_json::Value> =
        serde_json::from_slice(&spend.stdout).unwrap_or_else(|e| panic!("{e}: {spend:?}"));
    let paid: Vec<_> = entries
        .iter()
        .filter(|e| e["tool"] == json!("fortune") && e["status"] == json!("paid"))
        .collect();
    assert_eq!(paid.len(), 3, "{entries:?}");
    assert_eq!(
        entries.len(),
        3,
        "one log holds every agent's payments: {entries:?}"
    );

    for agent in [http_agent, one, two] {
        let _ = agent.cancel().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_agents_started_together_share_the_first_ones_bridge() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_procs, alice, _bob, _) = serving(dir.path());
    let bridge_dir = bridge_settings(dir.path(), &alice, "approval");
    assert!(
        !bridge(&bridge_dir, &["approvals", "list"]).status.success(),
        "no bridge runs yet"
    );
    // No bridge runs: both race for the data directory; one becomes the bridge.
    let ((one, one_pid), (two, two_pid)) = tokio::join!(
        stdio_agent(dir.path(), &bridge_dir),
        stdio_agent(dir.path(), &bridge_dir)
    );
    let owner = record(&bridge_dir)["pid"].as_u64().expect("pid") as u32;
    assert!(owner == one_pid || owner == two_pid, "{owner}");
    for agent in [&one, &two] {
        assert_eq!(agent.list_all_tools().await.expect("tools/list").len(), 2);
    }

    // A paid call waits; `approvals` finds the stdio agent's bridge and decides it.
    let peer = two.peer().clone();
    let call = tokio::spawn(async move { peer.call_tool(fortune()).await });
    let mut waiting = None;
    for _ in 0..400 {
        let listed = bridge(&bridge_dir, &["approvals", "list", "--json"]);
        assert!(listed.status.success(), "{listed:?}");
        let list: Vec<serde_json::Value> =
            serde_json::from_slice(&listed.stdout).unwrap_or_else(|e| panic!("{e}: {listed:?}"));
        if let Some(p) = list.iter().find(|p| p["atoms"] == json!(10000)) {
            assert_eq!(p["bot_name"], json!("alice"), "{p}");
            waiting = p["id"].as_str().map(str::to_owned);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = waiting.expect("a payment waits for approval");
    // The agents' token cannot decide it.
    let addr = record(&bridge_dir)["addr"]
        .as_str()
        .expect("addr")
        .to_owned();
    let token = String::from_utf8_lossy(&bridge(&bridge_dir, &["token", "show"]).stdout)
        .trim()
        .to_owned();
    let forged = reqwest::Client::new()
        .post(format!("http://{addr}/payments/{id}/approve"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("the bridge answers");
    assert_eq!(forged.status().as_u16(), 403);
    let decided = bridge(&bridge_dir, &["approvals", "approve", &id]);
    assert!(decided.status.success(), "{decided:?}");
    assert_fortune(&call.await.expect("join").expect("fortune"));

    // The new files are the owner's only.
    for name in ["bridge.endpoint", "bridge.lock", "approval.secret"] {
        let meta = std::fs::symlink_metadata(Path::new(&bridge_dir).join(name)).expect(name);
        let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
        assert_eq!(mode, 0o600, "{name}");
    }

    // The bridge's own agent leaves, and with it the bridge: the other agent's
    // session goes on (a request caught in the move is answered so, and retried).
    let (leaving, staying) = if owner == one_pid {
        (one, two)
    } else {
        (two, one)
    };
    let _ = leaving.cancel().await;
    let mut answered = None;
    for _ in 0..3 {
        let result = staying.call_tool(echo()).await;
        match result {
            Ok(r) => {
                answered = Some(r);
                break;
            }
            Err(e) => assert!(e.to_string().contains("bridge went away"), "{e}"),
        }
    }
    let echoed = answered.expect("the session went on");
    assert_eq!(echoed.structured_content, Some(json!({"echo": "hi"})));
    let now = record(&bridge_dir)["pid"].as_u64().expect("pid") as u32;
    assert_ne!(now, owner, "the staying agent's process is the bridge now");
    let _ = staying.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_bridge_serves_http_agents_on_the_configured_address_when_free() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_procs, alice, _bob, _) = serving(dir.path());
    let bridge_dir = bridge_settings(dir.path(), &alice, "autopay");
    let listen = format!("127.0.0.1:{}", free_port());
    let (stdio, _) = stdio_agent_listening(dir.path(), &bridge_dir, Some(&listen)).await;
    assert_eq!(stdio.list_all_tools().await.expect("tools/list").len(), 2);
    assert_eq!(record(&bridge_dir)["addr"], json!(listen));
    // An agent configured with the HTTP endpoint reaches the stdio agent's bridge.
    let token = String::from_utf8_lossy(&bridge(&bridge_dir, &["token", "show"]).stdout)
        .trim()
        .to_owned();
    let http = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/alice"))
                .auth_header(token),
        ))
        .await
        .expect("HTTP agent");
    assert_eq!(http.list_all_tools().await.expect("tools/list").len(), 2);
    let _ = http.cancel().await;
    let _ = stdio.cancel().await;

    // Taken by another program: the next stdio bridge binds an ephemeral port.
    let _squatter = std::net::TcpListener::bind(&listen).expect("take the port");
    let (stdio, _) = stdio_agent_listening(dir.path(), &bridge_dir, Some(&listen)).await;
    assert_eq!(stdio.list_all_tools().await.expect("tools/list").len(), 2);
    let addr = record(&bridge_dir)["addr"]
        .as_str()
        .expect("addr")
        .to_owned();
    assert_ne!(addr, listen);
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let _ = stdio.cancel().await;
}
