//! A call lives as long as its agent waits, with devnet, `brmcp serve` and `brmcp
//! bridge` as separate processes and a slow paid tool (server-everything's
//! long-running operation, installed by `scripts/test-deps`, sold by serve):
//!
//! - serve killed (SIGKILL, then SIGTERM) in the middle of a paid call and started
//!   again: the agent, still waiting, gets the call's outcome within seconds of the
//!   restart (the bridge's silence probe finds the session gone and replays the call
//!   under its key), not at the 600 s request timeout;
//! - an agent that stopped waiting (its request timed out) before serve was killed:
//!   nothing is re-sent or paid for its call after the restart;
//! - serve stopped with SIGTERM: the call is refunded and its caller told at the stop,
//!   and the bridge's retry runs within seconds of the restart;
//! - a caller removed from the bot's allowlist: the bot tells it so at once (the agent
//!   gets the bot's `NOT_ALLOWED` error within two seconds); a bot whose operator set
//!   `"tell_refused": false` stays silent and the call fails within the answer bound
//!   with an error naming the bot and the reason.
//!
//! Each ends with the bridge's spend log and serve's ledger in agreement.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequest, CallToolRequestParams, ClientRequest, ServerResult};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{RoleClient, ServiceError};
use serde_json::{Value, json};

use crate::processes::{
    Procs, brmcp, brmcp_json, kill_with, spawn, start_bridge, start_devnet, tool_result, wait_for,
};

/// The slow paid tool, as server-everything names it.
pub(super) const SLOW: &str = "trigger-long-running-operation";

/// Its price: 2,000 atoms.
pub(super) const PRICE_ATOMS: u64 = 2_000;

/// How long the slow call runs, in seconds.
const RUN_SECS: u64 = 8;

/// After a graceful stop (SIGTERM), the bound within which the bridge's retry reaches
/// the restarted serve: it was sent at once on the stop's CALL_INTERRUPTED answer.
const RETRIED_WITHIN: Duration = Duration::from_secs(10);

/// The bound the agent must hear the outcome within after serve is back: the silence
/// probe (10 s), a re-initialize, the call again (8 s), with room for a loaded
/// machine. Far under the 600 s request timeout an agent waited before the probe.
const AFTER_RESTART: Duration = Duration::from_secs(60);

fn installed(relative: &str) -> PathBuf {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("target/interop")
        .join(relative);
    assert!(
        path.exists(),
        "{} is missing: run scripts/test-deps",
        path.display()
    );
    path
}

/// A devnet, and alice's brmcp.json selling server-everything's slow tool.
pub(super) struct Stack {
    pub(super) procs: Procs,
    pub(super) dir: tempfile::TempDir,
    pub(super) alice: String,
    bob: String,
}

impl Stack {
    pub(super) fn new() -> Self {
        let node = installed("node/node_modules/.bin/node");
        let everything =
            installed("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
        let dir = tempfile::tempdir().expect("temp dir");
        let (procs, alice, bob) = start_devnet(dir.path());
        let path = dir.path().join("alice").join("brmcp.json");
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("brmcp.json"))
                .expect("json");
        config["upstreams"] = json!([{
            "name": "everything",
            "command": node,
            "args": [everything, "stdio"],
            "tools": {SLOW: PRICE_ATOMS}
        }]);
        std::fs::write(&path, config.to_string()).expect("write brmcp.json");
        Self {
            procs,
            dir,
            alice,
            bob,
        }
    }

    fn alice_dir(&self) -> PathBuf {
        self.dir.path().join("alice")
    }

    /// Starts serve and waits for its upstream; returns its index in `procs`.
    pub(super) async fn serve(&mut self) -> usize {
        let alice_dir = self.alice_dir();
        let lines = spawn(
            &mut self.procs,
            brmcp(&["serve", "--datadir", alice_dir.to_str().expect("utf-8")]),
        );
        wait_for(&lines, "serving upstream(s) everything");
        let mut status = String::new();
        for _ in 0..600 {
            let out = brmcp(&[
                "serve",
                "--datadir",
                alice_dir.to_str().expect("utf-8"),
                "status",
            ])
            .output()
            .expect("serve status");
            status = String::from_utf8_lossy(&out.stdout).into_owned();
            if status.contains("everything (command): up") {
                return self.procs.0.len() - 1;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the upstream did not come up:\n{status}");
    }

    /// Stops serve with `signal` and waits for it to end.
    fn stop_serve(&mut self, index: usize, signal: &str) {
        kill_with(&mut self.procs.0[index], signal);
    }

    /// `brmcp serve <command> --json`, parsed.
    fn serve_json(&self, command: &str) -> Value {
        let alice_dir = self.alice_dir();
        let alice_arg = alice_dir.to_str().expect("utf-8");
        brmcp_json(&["serve", "--datadir", alice_arg, command, "--json"])
    }

    /// serve's journal entries of the slow tool.
    pub(super) fn slow_calls(&self) -> Vec<Value> {
        self.serve_json("journal")
            .as_array()
            .expect("an array")
            .iter()
            .filter(|c| c["tool"] == SLOW)
            .cloned()
            .collect()
    }

    /// bob's balance at alice, in atoms.
    fn balance_atoms(&self) -> u64 {
        self.serve_json("balances")
            .as_array()
            .expect("an array")
            .iter()
            .find(|b| b["caller"] == self.bob)
            .and_then(|b| b["balance_atoms"].as_u64())
            .unwrap_or(0)
    }

    /// The bridge's payments marked paid, in atoms.
    pub(super) fn paid(bridge_dir: &str) -> Vec<u64> {
        brmcp_json(&["bridge", "--datadir", bridge_dir, "spend", "--json"])
            .as_array()
            .expect("an array")
            .iter()
            .filter(|r| r["status"] == "paid")
            .filter_map(|r| r["atoms"].as_u64())
            .collect()
    }

    /// What bob paid equals what alice holds for him plus what she charged and kept.
    pub(super) fn assert_books_agree(&self, bridge_dir: &str) {
        let paid: u64 = Self::paid(bridge_dir).iter().sum();
        let charged: u64 = self
            .slow_calls()
            .iter()
            .filter(|c| c["state"] != "refunded")
            .filter_map(|c| c["price_atoms"].as_u64())
            .sum();
        let balance = self.balance_atoms();
        assert_eq!(
            paid,
            balance + charged,
            "spend log {paid} = balance {balance} + charged {charged}"
        );
    }
}

pub(super) async fn agent(
    listen: &str,
    alice: &str,
    token: &str,
) -> RunningService<RoleClient, ()> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/{alice}"))
            .auth_header(token.to_owned()),
    );
    ().serve(transport)
        .await
        .expect("MCP session through the bridge")
}

pub(super) fn slow_call(secs: u64) -> ClientRequest {
    let args = json!({"duration": secs, "steps": 1});
    ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new(SLOW).with_arguments(args.as_object().cloned().unwrap()),
    ))
}

/// `client`'s slow call of `secs` seconds, sent: its answer, awaited in the
/// background.
pub(super) async fn slow_call_sent(
    client: &RunningService<RoleClient, ()>,
    secs: u64,
) -> tokio::task::JoinHandle<Result<ServerResult, ServiceError>> {
    let handle = client
        .peer()
        .send_request_with_option(slow_call(secs), PeerRequestOptions::no_options())
        .await
        .expect("sent");
    tokio::spawn(handle.await_response())
}

/// Waits until serve's journal has a pending slow call (charged and running), while
/// `call` has no outcome.
pub(super) async fn until_running<T: std::fmt::Debug>(
    stack: &Stack,
    call: &tokio::task::JoinHandle<T>,
) {
    for _ in 0..600 {
        if stack.slow_calls().iter().any(|c| c["state"] == "pending") {
            return;
        }
        assert!(!call.is_finished(), "the call ended before it ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the slow call never ran: {:?}", stack.slow_calls());
}

async fn outlives_a_restart(signal: &str) {
    let mut stack = Stack::new();
    let serve = stack.serve().await;
    let (bridge_dir, listen, token) =
        start_bridge(&mut stack.procs, stack.dir.path(), &stack.alice, "autopay");
    let client = agent(&listen, &stack.alice, &token).await;
    let call = slow_call_sent(&client, RUN_SECS).await;
    if let Err(e) = std::panic::AssertUnwindSafe(until_running(&stack, &call))
        .catch_unwind()
        .await
    {
        let outcome = call.await;
        panic!(
            "{signal}: {:?}; the call: {outcome:?}",
            e.downcast_ref::<String>()
        );
    }
    stack.stop_serve(serve, signal);
    if signal == "TERM" {
        // A graceful stop refunded the call itself and told the bridge, which retries
        // under its key while the agent waits.
        let calls = stack.slow_calls();
        assert!(
            calls
                .iter()
                .all(|c| c["state"] == "refunded" && c["reason"] == "interrupted"),
            "refunded at the stop: {calls:?}"
        );
    }
    stack.serve().await;
    let back = Instant::now();
    if signal == "TERM" {
        // The bridge's retry, sent on CALL_INTERRUPTED, runs as soon as serve is back.
        while stack.slow_calls().len() < 2 {
            assert!(
                back.elapsed() < RETRIED_WITHIN,
                "no retry within {RETRIED_WITHIN:?} of the restart: {:?}",
                stack.slow_calls()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        eprintln!("TERM: the retry ran {:?} after the restart", back.elapsed());
    }
    let outcome = tokio::time::timeout(AFTER_RESTART, call)
        .await
        .unwrap_or_else(|_| panic!("{signal}: no outcome within {AFTER_RESTART:?} of the restart"))
        .expect("joined")
        .unwrap_or_else(|e| panic!("{signal}: {e}"));
    tool_result(signal, outcome);
    eprintln!(
        "{signal}: the outcome came {:?} after the restart",
        back.elapsed()
    );
    // The interrupted run was refunded once; the call ran once more, under its key.
    let calls = stack.slow_calls();
    let count = |state: &str| calls.iter().filter(|c| c["state"] == state).count();
    assert_eq!(
        (count("refunded"), count("completed")),
        (1, 1),
        "{signal}: {calls:?}"
    );
    let keys: Vec<&Value> = calls.iter().map(|c| &c["call_key"]).collect();
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "{signal}: one key: {calls:?}"
    );
    stack.assert_books_agree(&bridge_dir);
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_outlives_serve_killed_mid_call() {
    outlives_a_restart("KILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_outlives_serve_terminated_mid_call() {
    outlives_a_restart("TERM").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_agent_timed_out_is_neither_re_sent_nor_paid_after_a_restart() {
    let mut stack = Stack::new();
    let serve = stack.serve().await;
    let (bridge_dir, listen, token) =
        start_bridge(&mut stack.procs, stack.dir.path(), &stack.alice, "autopay");
    let client = agent(&listen, &stack.alice, &token).await;
    let mut options = PeerRequestOptions::no_options();
    // Time for the payment first; the call itself runs far longer.
    options.timeout = Some(Duration::from_secs(25));
    // A long call: it is still running at the bot when the agent gives up.
    let handle = client
        .peer()
        .send_request_with_option(slow_call(120), options)
        .await
        .expect("sent");
    let call = tokio::spawn(handle.await_response());
    until_running(&stack, &call).await;
    let outcome = call.await.expect("joined");
    assert!(
        matches!(outcome, Err(ServiceError::Timeout { .. })),
        "{outcome:?}"
    );
    let paid_before = Stack::paid(&bridge_dir);
    assert_eq!(
        paid_before,
        vec![PRICE_ATOMS],
        "paid once, while the agent waited"
    );
    stack.stop_serve(serve, "KILL");
    stack.serve().await;
    // Well past the probe and the call's own time: nothing comes.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        Stack::paid(&bridge_dir),
        paid_before,
        "nothing paid afterwards"
    );
    let calls = stack.slow_calls();
    assert_eq!(calls.len(), 1, "nothing re-sent: {calls:?}");
    assert_ne!(calls[0]["state"], "completed", "{calls:?}");
    stack.assert_books_agree(&bridge_dir);
    client.cancel().await.expect("close");
}

/// The bound the bridge's default answer bound (20 s) is checked against: generous for
/// a loaded machine, far under the 600 s request timeout.
const WITHIN_BOUND: Duration = Duration::from_secs(60);

/// An echo through the bridge, its outcome within [`WITHIN_BOUND`].
async fn echo(
    client: &RunningService<RoleClient, ()>,
) -> Result<rmcp::model::CallToolResult, ServiceError> {
    let args = json!({"message": "hi"});
    tokio::time::timeout(
        WITHIN_BOUND,
        client.call_tool(
            CallToolRequestParams::new("echo").with_arguments(args.as_object().cloned().unwrap()),
        ),
    )
    .await
    .expect("an outcome within the bound, not the request timeout")
}

/// The agent's error: a JSON-RPC error whose message names `bot` and says `why`.
fn assert_reason(outcome: Result<rmcp::model::CallToolResult, ServiceError>, bot: &str, why: &str) {
    let error = outcome.expect_err("an error");
    let ServiceError::McpError(error) = error else {
        panic!("a JSON-RPC error the SDK shows, not {error:?}");
    };
    let message = error.message.to_string();
    assert!(message.contains(bot), "names the bot: {message}");
    assert!(message.contains(why), "says why: {message}");
}

/// A refused caller is told within this: one PM round trip on the devnet.
const TOLD_WITHIN: Duration = Duration::from_secs(2);

/// Alice's bot serving a free `echo`, the bridge's agent using it, then bob removed
/// from the allowlist (SIGHUP applies it at once), `tell_refused` as given; returns the
/// stack and the agent, whose next call is refused.
async fn refused_caller(tell_refused: Option<bool>) -> (Stack, RunningService<RoleClient, ()>) {
    let mut stack = Stack::new();
    let path = stack.alice_dir().join("brmcp.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("brmcp.json")).expect("json");
    config["upstreams"][0]["tools"]["echo"] = json!(0);
    if let Some(tell) = tell_refused {
        config["tell_refused"] = json!(tell);
    }
    std::fs::write(&path, config.to_string()).expect("write brmcp.json");
    let serve = stack.serve().await;
    let (_bridge_dir, listen, token) =
        start_bridge(&mut stack.procs, stack.dir.path(), &stack.alice, "autopay");
    let client = agent(&listen, &stack.alice, &token).await;
    echo(&client).await.expect("allowed: the echo runs");
    // The operator removes bob: edit, then SIGHUP applies it at once.
    config["allowed_uids"] = json!(["11".repeat(32)]);
    std::fs::write(&path, config.to_string()).expect("write brmcp.json");
    let pid = stack.procs.0[serve].id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .expect("kill")
            .success()
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    (stack, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_removed_from_the_allowlist_hears_why_at_once() {
    let (_stack, client) = refused_caller(None).await;
    let started = Instant::now();
    let outcome = echo(&client).await;
    let took = started.elapsed();
    let error = match outcome {
        Err(ServiceError::McpError(error)) => error,
        other => panic!("a JSON-RPC error the SDK shows, not {other:?}"),
    };
    assert_eq!(
        error.code,
        brmcp::adapters::protocol::NOT_ALLOWED,
        "{error:?}"
    );
    assert!(error.message.contains("not allowed"), "says why: {error:?}");
    assert!(
        took < TOLD_WITHIN,
        "told after {took:?}, not within {TOLD_WITHIN:?}"
    );
    eprintln!("refused caller: told why after {took:?}");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_refused_by_a_silent_bot_hears_why_within_the_bound() {
    let (stack, client) = refused_caller(Some(false)).await;
    let started = Instant::now();
    assert_reason(echo(&client).await, &stack.alice, "never answered");
    eprintln!(
        "refused caller, silent bot: the reason came after {:?}",
        started.elapsed()
    );
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_devnet_outage_reaches_the_agent_as_a_reason_within_the_bound() {
    let mut stack = Stack::new();
    let path = stack.alice_dir().join("brmcp.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("brmcp.json")).expect("json");
    config["upstreams"][0]["tools"]["echo"] = json!(0);
    std::fs::write(&path, config.to_string()).expect("write brmcp.json");
    stack.serve().await;
    let (_bridge_dir, listen, token) =
        start_bridge(&mut stack.procs, stack.dir.path(), &stack.alice, "autopay");
    let client = agent(&listen, &stack.alice, &token).await;
    echo(&client).await.expect("the echo runs");
    // The devnet (every Bison Relay client and the relay) goes down.
    let devnet = &mut stack.procs.0[0];
    devnet.kill().expect("kill the devnet");
    let _ = devnet.wait();
    let started = Instant::now();
    assert_reason(
        echo(&client).await,
        &stack.alice,
        "Bison Relay client has not sent",
    );
    eprintln!(
        "devnet outage: the reason came after {:?}",
        started.elapsed()
    );
    client.cancel().await.expect("close");
}
