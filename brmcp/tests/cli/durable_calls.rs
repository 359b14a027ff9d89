//! Paid calls that outlive the bridge's process, with devnet, `brmcp serve` and
//! `brmcp bridge` as separate processes:
//!
//! - the bridge killed (SIGKILL, then SIGTERM) while a slow paid call runs at the bot,
//!   then started again: the agent's retry of the same tool with the same arguments
//!   gets the call's result, and the call was paid and charged once;
//! - an agent's own `brmcp/callKey`: its retry gets the exact outcome, also after a
//!   SIGKILL, paid once; the same key from another agent is another call; a malformed
//!   key, or a key reused for other arguments, is refused with a clear error;
//! - a call journal that is garbage stops the bridge with an error naming the file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, RequestMetaObject, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RunningService};
use rmcp::{RoleClient, ServiceError};
use serde_json::{Value, json};

use crate::call_lifetimes::{PRICE_ATOMS, Stack, agent, slow_call, slow_call_sent, until_running};
use crate::processes::{
    Procs, bridge_settings, brmcp, brmcp_json, free_port, http_bridge, kill_with, serving, spawn,
    tool_result, wait_for,
};

/// How long the slow call runs at the bot, in seconds.
const RUN_SECS: u64 = 8;

/// The bound on the retry's answer after the restart: the bot's link, the resumed
/// call's replay (or the rest of its run), with room for a loaded machine.
const AFTER_RESTART: Duration = Duration::from_secs(90);

/// The example `fortune`'s price (`brmcp serve`'s built-in tools).
const FORTUNE_ATOMS: u64 = 10_000;

/// The call journal's file in a bridge's data directory.
const CALLS_FILE: &str = "mcpcalls.sqlite";

/// A `brmcp bridge` process of `bridge_dir`, serving on a fresh port: it and its
/// listen address.
fn start_bridge(bridge_dir: &str, rpc: &Path) -> (Procs, String) {
    let mut procs = Procs(Vec::new());
    let listen = format!("127.0.0.1:{}", free_port());
    let lines = spawn(&mut procs, http_bridge(bridge_dir, rpc, &listen));
    wait_for(&lines, "Ctrl-C stops the bridge.");
    (procs, listen)
}

/// Stops the bridge with `signal` and waits for it to end.
fn stop(bridge: &mut Procs, signal: &str) {
    kill_with(&mut bridge.0[0], signal);
}

fn bridge_out(bridge_dir: &str, args: &[&str]) -> String {
    let mut all = vec!["bridge", "--datadir", bridge_dir];
    all.extend_from_slice(args);
    let out = brmcp(&all).output().expect("brmcp bridge");
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The bridge's payments marked paid, in atoms.
fn paid(bridge_dir: &str) -> Vec<u64> {
    Stack::paid(bridge_dir)
}

async fn cut_and_retried(signal: &str) {
    let mut stack = Stack::new();
    stack.serve().await;
    let bridge_dir = bridge_settings(stack.dir.path(), &stack.alice, "autopay");
    let token = bridge_out(&bridge_dir, &["token", "show"]);
    let rpc = stack.dir.path().join("bob").join("brmcp-serve.conf");
    let (mut bridge, listen) = start_bridge(&bridge_dir, &rpc);
    let client = agent(&listen, &stack.alice, &token).await;
    let call = slow_call_sent(&client, RUN_SECS).await;
    until_running(&stack, &call).await;
    assert_eq!(
        paid(&bridge_dir),
        [PRICE_ATOMS],
        "{signal}: paid before it ran"
    );
    stop(&mut bridge, signal);
    // The agent's request died with the bridge; its SDK gives up in its own time.
    call.abort();
    drop(client);

    let (_bridge, listen) = start_bridge(&bridge_dir, &rpc);
    let client = agent(&listen, &stack.alice, &token).await;
    let started = Instant::now();
    let retry = tokio::time::timeout(
        AFTER_RESTART,
        client
            .peer()
            .send_request_with_option(slow_call(RUN_SECS), PeerRequestOptions::no_options())
            .await
            .expect("sent")
            .await_response(),
    )
    .await
    .unwrap_or_else(|_| panic!("{signal}: no answer within {AFTER_RESTART:?}"))
    .unwrap_or_else(|e| panic!("{signal}: {e}"));
    tool_result(signal, retry);
    eprintln!(
        "{signal}: the retry's answer came after {:?}",
        started.elapsed()
    );
    // Paid once, charged once: the retry got the call the bridge paid for.
    assert_eq!(paid(&bridge_dir), [PRICE_ATOMS], "{signal}: paid once");
    let calls = stack.slow_calls();
    let charged: Vec<&Value> = calls.iter().filter(|c| c["state"] != "refunded").collect();
    assert_eq!(charged.len(), 1, "{signal}: charged once: {calls:?}");
    assert_eq!(charged[0]["state"], "completed", "{signal}: {calls:?}");
    stack.assert_books_agree(&bridge_dir);
    // A deliberate repeat of a delivered call is a call of its own: it is paid again.
    let again = client
        .peer()
        .send_request_with_option(slow_call(1), PeerRequestOptions::no_options())
        .await
        .expect("sent")
        .await_response()
        .await
        .expect("another call");
    assert!(
        matches!(again, ServerResult::CallToolResult(_)),
        "{again:?}"
    );
    assert_eq!(paid(&bridge_dir).len(), 2, "{signal}: a new call, paid");
    client.cancel().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_cut_by_a_killed_bridge_reaches_the_agents_retry_paid_once() {
    cut_and_retried("KILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_cut_by_a_stopped_bridge_reaches_the_agents_retry_paid_once() {
    cut_and_retried("TERM").await;
}

/// A `fortune` call with `_meta["brmcp/callKey"] = key` and `args`.
async fn keyed_fortune(
    client: &RunningService<RoleClient, ()>,
    key: Value,
    args: Value,
) -> Result<Value, ServiceError> {
    let mut meta = RequestMetaObject::new();
    meta.insert("brmcp/callKey".into(), key);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(
        CallToolRequestParams::new("fortune").with_arguments(args.as_object().cloned().unwrap()),
    ));
    let answer = client
        .peer()
        .send_request_with_option(request, PeerRequestOptions::no_options().with_meta(meta))
        .await?
        .await_response()
        .await?;
    let result = tool_result("the call", answer);
    Ok(serde_json::to_value(&result).expect("json"))
}

/// The JSON-RPC error's message.
fn refusal(outcome: Result<Value, ServiceError>) -> String {
    match outcome {
        Err(ServiceError::McpError(e)) => e.message.to_string(),
        other => panic!("a JSON-RPC error, not {other:?}"),
    }
}

/// serve's journal entries of `fortune`.
fn fortunes(alice_dir: &Path) -> Vec<Value> {
    let alice_arg = alice_dir.to_str().expect("utf-8");
    brmcp_json(&["serve", "--datadir", alice_arg, "journal", "--json"])
        .as_array()
        .expect("an array")
        .iter()
        .filter(|c| c["tool"] == "fortune")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_own_call_key_is_exact_and_its_own() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_procs, alice, _bob, _) = serving(dir.path());
    let alice_dir: PathBuf = dir.path().join("alice");
    let bridge_dir = bridge_settings(dir.path(), &alice, "autopay");
    let default_token = bridge_out(&bridge_dir, &["token", "show"]);
    let ci_token = bridge_out(
        &bridge_dir,
        &[
            "token",
            "add",
            "ci",
            "--per-call-cap",
            "100000",
            "--per-day-cap",
            "1000000",
        ],
    );
    let rpc = dir.path().join("bob").join("brmcp-serve.conf");
    let (mut bridge, listen) = start_bridge(&bridge_dir, &rpc);
    let mine = agent(&listen, &alice, &default_token).await;
    let theirs = agent(&listen, &alice, &ci_token).await;
    let key = json!("order-42-2026-12-05");

    let first = keyed_fortune(&mine, key.clone(), json!({}))
        .await
        .expect("paid call");
    assert_eq!(paid(&bridge_dir), [FORTUNE_ATOMS]);
    let again = keyed_fortune(&mine, key.clone(), json!({}))
        .await
        .expect("retry");
    assert_eq!(again, first, "the exact outcome");
    assert_eq!(paid(&bridge_dir), [FORTUNE_ATOMS], "paid once");
    assert_eq!(fortunes(&alice_dir).len(), 1, "run once");

    // Another agent's same key is another call.
    keyed_fortune(&theirs, key.clone(), json!({}))
        .await
        .expect("their call");
    assert_eq!(
        paid(&bridge_dir),
        [FORTUNE_ATOMS, FORTUNE_ATOMS],
        "theirs paid"
    );
    let runs = fortunes(&alice_dir);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_ne!(runs[0]["call_key"], runs[1]["call_key"], "{runs:?}");

    // Refused before anything is sent or paid.
    let short = refusal(keyed_fortune(&mine, json!("short"), json!({})).await);
    assert!(
        short.contains("brmcp/callKey") && short.contains("5 bytes"),
        "{short}"
    );
    let number = refusal(keyed_fortune(&mine, json!(12_345_678), json!({})).await);
    assert!(
        number.contains("brmcp/callKey must be a string"),
        "{number}"
    );
    let other = refusal(keyed_fortune(&mine, key.clone(), json!({"n": 1})).await);
    assert!(other.contains("used for another call"), "{other}");
    assert_eq!(paid(&bridge_dir).len(), 2, "nothing paid for refusals");

    // Killed and started again: the key still answers with the exact outcome.
    stop(&mut bridge, "KILL");
    drop((mine, theirs));
    let (mut bridge, listen) = start_bridge(&bridge_dir, &rpc);
    let mine = agent(&listen, &alice, &default_token).await;
    let after = keyed_fortune(&mine, key, json!({}))
        .await
        .expect("retry after restart");
    assert_eq!(after, first, "the exact outcome after a restart");
    assert_eq!(paid(&bridge_dir).len(), 2, "paid once");
    assert_eq!(fortunes(&alice_dir).len(), 2, "run once");
    drop(mine);
    stop(&mut bridge, "KILL");

    // A torn journal: the bridge refuses to start, naming the file.
    let journal = Path::new(&bridge_dir).join(CALLS_FILE);
    for side in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{side}", journal.display()));
    }
    std::fs::write(&journal, b"SQLite format 3\0torn".repeat(256)).expect("garbage");
    let listen = format!("127.0.0.1:{}", free_port());
    let mut child = http_bridge(&bridge_dir, &rpc, &listen)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the bridge started on a torn journal");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err)
        .expect("stderr");
    assert!(!status.success(), "{err}");
    assert!(
        err.contains(&journal.display().to_string()),
        "names the file: {err}"
    );
}
