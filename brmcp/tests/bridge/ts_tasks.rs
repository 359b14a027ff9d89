//! The TypeScript MCP SDK (`@modelcontextprotocol/sdk`, installed by `scripts/test-deps`)
//! as an agent using the experimental tasks of protocol 2025-11-25
//! (`client.experimental.tasks`) over streamable HTTP: a paid call made as a task is
//! created, polled and listed; the bridge stops with the call in flight and starts
//! again; the task's result is fetched from the new bridge (paid and run once);
//! another agent's token finds nothing of it; a task cancelled while the bot runs it
//! is cancelled at the bot.
//!
//! Without Node (no `scripts/test-deps` run) the test fails, saying how to install it.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use crate::common::interop::{node, node_modules, required, run_steps};
use crate::common::{
    FORTUNE_PRICE, PayMode, PayerState, TestPayer, autopay, base_config, eventually, serve_test_bot,
};
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{PeerId, RouterConfig};
use brmcp::bridge::{AgentEntry, Bridge, Settings};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const ONE_TOKEN: &str = "e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5";
const TWO_TOKEN: &str = "f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6f6";

/// How long a step may take on this (noisy) machine.
const BOUND: Duration = Duration::from_secs(30);

fn settings(bot: PeerId) -> Settings {
    let mut s = autopay(bot);
    s.enabled = true;
    s.agents = vec![
        AgentEntry::new("one", ONE_TOKEN, 10_000, 100_000, Vec::new()),
        AgentEntry::new("two", TWO_TOKEN, 10_000, 100_000, Vec::new()),
    ];
    s
}

fn script() -> std::path::PathBuf {
    required(
        node_modules().join("@modelcontextprotocol/sdk"),
        "the TypeScript MCP SDK",
    );
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bridge/ts_tasks.mjs")
}

fn command(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(node());
    command
        .arg(script())
        .args(args)
        .env("NODE_MODULES", node_modules());
    command
}

/// Runs the script's `kind` against `bridge`'s endpoint of `bot`; its steps by name.
async fn run(bridge: &Bridge, bot: PeerId, kind: &str, token: &str, arg: &str) -> Vec<Value> {
    let url = url(bridge, bot);
    run_steps(command(&[kind, &url, token, arg]), "the TypeScript client").await
}

fn url(bridge: &Bridge, bot: PeerId) -> String {
    let addr = bridge.listen_addr().expect("listening");
    format!("http://{addr}/mcp/{bot}")
}

/// The step `name` of `steps`.
fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
}

/// The step connected on 2025-11-25, the bridge advertising its tasks.
fn connected(steps: &[Value]) {
    let connected = step(steps, "connected");
    assert_eq!(connected["protocol"], json!("2025-11-25"), "{connected}");
    assert_eq!(
        connected["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{connected}"
    );
}

/// The step failed with "task not found", as an unknown task id does.
fn not_found(steps: &[Value], name: &str) {
    let s = step(steps, name);
    assert_eq!(s["code"], json!(-32602), "{s}");
    assert!(
        s["error"]
            .as_str()
            .is_some_and(|e| e.contains("task not found")),
        "{s}"
    );
}

async fn bridge_on(fabric: &Fabric, dir: &Path, payer: &std::sync::Arc<PayerState>) -> Bridge {
    let mut config = base_config(dir);
    config.poll_attempts = 10_000;
    let bridge = Bridge::new(
        config,
        fabric.router(uid(2), RouterConfig::client()),
        TestPayer(payer.clone()),
    )
    .expect("bridge");
    bridge.start().await.expect("start");
    bridge
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_tasks_survive_a_bridge_restart_for_their_agent_only() {
    let fabric = Fabric::new(13);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let (_bot_router, bot) = serve_test_bot(&fabric, bot_id);
    let dir = tempfile::tempdir().expect("tempdir");
    // The tip "succeeds" but its credit never reaches the bot: the task waits on it.
    let payer = PayerState::new(bot.clone(), bridge_id, PayMode::NeverCredit);
    let first = bridge_on(&fabric, dir.path(), &payer).await;
    first
        .apply_settings(settings(bot_id))
        .await
        .expect("settings");

    let steps = run(&first, bot_id, "create", ONE_TOKEN, "fortune").await;
    connected(&steps);
    let task = &step(&steps, "create")["task"];
    assert_eq!(task["status"], json!("working"), "{steps:?}");
    let id = task["taskId"].as_str().expect("a task id").to_owned();
    let got = &step(&steps, "get")["task"];
    assert_eq!(got["taskId"], json!(id), "{steps:?}");
    assert!(
        got["status"] == "working" || got["status"] == "input_required",
        "{steps:?}"
    );
    assert_eq!(step(&steps, "list")["ids"], json!([id]), "{steps:?}");
    assert!(eventually(BOUND, || payer.count() == 1).await, "paid");

    first.close().await;
    drop(first);
    // The tip's credit reaches the bot after the bridge stopped.
    bot.credit(bridge_id, FORTUNE_PRICE);
    let second = bridge_on(&fabric, dir.path(), &payer).await;

    let steps = run(&second, bot_id, "result", ONE_TOKEN, &id).await;
    connected(&steps);
    let result = step(&steps, "result");
    assert!(result.get("error").is_none(), "{steps:?}");
    assert_eq!(result["is_error"], json!(false), "{steps:?}");
    assert!(
        result["texts"][0]
            .as_str()
            .is_some_and(|t| t.contains("fortune")),
        "{steps:?}"
    );
    assert_eq!(result["related"], json!(id), "{steps:?}");
    assert_eq!(step(&steps, "get")["task"]["status"], json!("completed"));
    assert_eq!(step(&steps, "list")["ids"], json!([id]), "{steps:?}");
    assert_eq!(payer.count(), 1, "paid once");
    assert_eq!(bot.executions("fortune"), 1, "run once");

    // Another agent: its token finds nothing of the task.
    let steps = run(&second, bot_id, "foreign", TWO_TOKEN, &id).await;
    connected(&steps);
    for name in ["get", "result", "cancel"] {
        not_found(&steps, name);
    }
    assert_eq!(step(&steps, "list")["ids"], json!([]), "{steps:?}");
    // Nor changed it.
    let steps = run(&second, bot_id, "result", ONE_TOKEN, &id).await;
    assert_eq!(step(&steps, "get")["task"]["status"], json!("completed"));
    assert_eq!(payer.count(), 1);
    assert_eq!(bot.executions("fortune"), 1);

    // A task cancelled while the bot runs it is cancelled at the bot.
    let started = bot.wait_started.notified();
    let mut child = command(&["cancel", &url(&second, bot_id), ONE_TOKEN, "wait"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node");
    tokio::time::timeout(BOUND, started)
        .await
        .expect("the bot runs the task");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"cancel\n").await.expect("write");
    drop(stdin);
    let output = tokio::time::timeout(BOUND * 2, child.wait_with_output())
        .await
        .expect("the client ends")
        .expect("its output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let steps: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(
        step(&steps, "cancel")["task"]["status"],
        json!("cancelled"),
        "{steps:?}"
    );
    assert_eq!(
        step(&steps, "get")["task"]["status"],
        json!("cancelled"),
        "{steps:?}"
    );
    assert!(
        step(&steps, "result")["error"]
            .as_str()
            .is_some_and(|e| e.contains("cancelled")),
        "{steps:?}"
    );
    let seen = bot.clone();
    assert!(
        eventually(BOUND, || seen.cancelled.load(SeqCst) == 1).await,
        "the bot saw the cancellation"
    );
    assert_eq!(payer.count(), 1, "nothing more paid");
    second.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typescript_tasks_payment_is_input_required_until_approved_on_the_page() {
    let env = crate::common::env(|bot| {
        let mut s = settings(bot);
        s.mode = brmcp::bridge::Mode::Approval;
        s.approval_timeout_secs = 60;
        s
    })
    .await;
    env.bridge.start().await.expect("start");
    let url = url(&env.bridge, env.bot_id);
    // The client declares elicitation too: a task's run asks it nothing (its question
    // would have no stream to go on), the page decides.
    let client = tokio::spawn(run_steps(
        command(&["approve", &url, ONE_TOKEN, "fortune"]),
        "the TypeScript client",
    ));
    let bridge = env.bridge.clone();
    assert!(
        eventually(BOUND, || bridge.pending_payments().len() == 1).await,
        "the payment waits for its approval"
    );
    // Long enough for the client to poll the task waiting (its poll interval is 1 s).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(env.payer.count(), 0, "nothing paid before the approval");
    let pending = env.bridge.pending_payments();
    assert!(env.bridge.resolve_payment(&pending[0].id, true));
    let steps = client.await.expect("the client");
    connected(&steps);
    let approved = step(&steps, "approve");
    assert!(approved.get("error").is_none(), "{steps:?}");
    assert!(
        approved["texts"][0]
            .as_str()
            .is_some_and(|t| t.contains("fortune")),
        "{steps:?}"
    );
    assert_eq!(approved["asked"], json!([]), "{steps:?}");
    let statuses = approved["statuses"].as_array().expect("statuses");
    assert!(statuses.contains(&json!("input_required")), "{steps:?}");
    assert_eq!(env.payer.count(), 1, "paid once");
    assert_eq!(env.bot.executions("fortune"), 1, "run once");
    env.bridge.close().await;
}
