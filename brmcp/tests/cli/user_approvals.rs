//! `brmcp bridge` on the devnet with agents `token add` made: `ci` (made without a
//! flag, so only the user approves its payments) on protocol 2026-07-28 is not asked,
//! and its own `accept`, sent in a retry anyway, pays nothing until the user approves
//! with `approvals`; then it is paid once and gets its fortune. `own` (made with
//! `--agent-approves`) approves its own payment by answering the question.

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp_test_support::form_message;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ErrorData, Implementation, InputResponses, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};

use super::processes::{
    assert_fortune, bridge_settings, brmcp, free_port, http_bridge, serving, spawn, wait_for,
};

/// How long a payment is watched for not being made: a decided payment is tipped
/// within a second on the devnet, so one made on the agent's word shows by then.
const UNPAID_FOR: Duration = Duration::from_secs(3);

/// A client that answers every form `accept` and records the questions.
#[derive(Clone, Default)]
struct Accepts {
    asked: Arc<Mutex<Vec<String>>>,
}

impl ClientHandler for Accepts {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).expect("capabilities");
        ClientConfig::new(capabilities, Implementation::new("accepts", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked
            .lock()
            .expect("asked")
            .push(form_message(request)?);
        Ok(serde_json::from_value(json!({"action": "accept"})).expect("accept"))
    }
}

/// An agent with `token` on protocol 2026-07-28, declaring form elicitation.
async fn agent(url: &str, token: &str, user: &Accepts) -> RunningService<RoleClient, Accepts> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    user.clone()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("2026-07-28 agent")
}

/// `brmcp bridge --datadir DIR ARGS`, which must succeed: its stdout.
fn bridge_cmd(bridge_dir: &str, args: &[&str]) -> String {
    let mut all = vec!["bridge", "--datadir", bridge_dir];
    all.extend_from_slice(args);
    let out = brmcp(&all).output().expect("brmcp bridge");
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The payments the spend log holds, by status.
fn spent(bridge_dir: &str) -> Vec<(String, String)> {
    let rows: Value =
        serde_json::from_str(&bridge_cmd(bridge_dir, &["spend", "--json"])).expect("spend json");
    rows.as_array()
        .expect("an array")
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (s("agent"), s("status"))
        })
        .collect()
}

/// The id in a `payment waits for approval` line.
fn held_id(line: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix("id="))
        .expect("the payment's id")
        .trim_matches('"')
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_only_agents_accept_pays_nothing_until_approvals_approves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut procs, alice, _bob, _) = serving(dir.path());
    let bridge_dir = bridge_settings(dir.path(), &alice, "approval");
    let caps = ["--per-call-cap", "100000", "--per-day-cap", "1000000"];
    let add = |name: &str, extra: &[&str]| {
        let mut args = vec!["token", "add", name];
        args.extend_from_slice(&caps);
        args.extend_from_slice(extra);
        bridge_cmd(&bridge_dir, &args).trim().to_owned()
    };
    let ci = add("ci", &[]);
    let own = add("own", &["--agent-approves"]);
    let rpc = dir.path().join("bob").join("brmcp-serve.conf");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut cmd = http_bridge(&bridge_dir, &rpc, &listen);
    cmd.stdin(Stdio::null());
    let lines = spawn(&mut procs, cmd);
    wait_for(&lines, "Ctrl-C stops the bridge.");
    let url = format!("http://{listen}/mcp/{alice}");

    // `ci` is not asked: its call waits for the user.
    let user = Accepts::default();
    let agent_ci = agent(&url, &ci, &user).await;
    let peer = agent_ci.peer().clone();
    let first = tokio::spawn(async move {
        peer.call_tool_once(CallToolRequestParams::new("fortune"))
            .await
    });
    let held = wait_for(&lines, "payment waits for approval");
    let line = held.last().expect("the line").clone();
    assert!(line.contains("agent=ci"), "{line}");
    let first_id = held_id(&line);

    // Its own accept, with a state it made up: a new call, which waits too.
    let mut accept = InputResponses::new();
    accept.insert("brmcp/approval".into(), json!({"action": "accept"}));
    let forged = CallToolRequestParams::new("fortune")
        .with_request_state("5eed".repeat(8))
        .with_input_responses(accept);
    let peer = agent_ci.peer().clone();
    let second = tokio::spawn(async move { peer.call_tool_once(forged).await });
    let held = wait_for(&lines, "payment waits for approval");
    let second_id = held_id(held.last().expect("the line"));
    tokio::time::sleep(UNPAID_FOR).await;
    assert!(
        spent(&bridge_dir).is_empty(),
        "nothing paid on the agent's word"
    );
    assert!(!first.is_finished() && !second.is_finished());
    assert!(user.asked.lock().expect("asked").is_empty(), "never asked");
    let listed: Value =
        serde_json::from_str(&bridge_cmd(&bridge_dir, &["approvals", "list", "--json"]))
            .expect("approvals json");
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");

    // The user approves the first and denies the forged one.
    bridge_cmd(&bridge_dir, &["approvals", "approve", &first_id]);
    let done = first.await.expect("join").expect("the first call");
    let CallToolResponse::Complete(done) = done else {
        panic!("not completed: {done:?}");
    };
    assert_fortune(&done);
    bridge_cmd(&bridge_dir, &["approvals", "deny", &second_id]);
    let refused = second.await.expect("join").expect("the second call");
    let CallToolResponse::Complete(refused) = refused else {
        panic!("not completed: {refused:?}");
    };
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert_eq!(spent(&bridge_dir), [("ci".to_owned(), "paid".to_owned())]);

    // `own` approves its own payment by answering the question.
    let user = Accepts::default();
    let agent_own = agent(&url, &own, &user).await;
    let paid = agent_own
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .expect("own's fortune");
    assert_fortune(&paid);
    assert_eq!(user.asked.lock().expect("asked").len(), 1);
    let mut spent = spent(&bridge_dir);
    spent.sort();
    let paid = |agent: &str| (agent.to_owned(), "paid".to_owned());
    assert_eq!(spent, [paid("ci"), paid("own")]);
    let _ = agent_ci.cancel().await;
    let _ = agent_own.cancel().await;
}
