//! The TypeScript MCP SDK (`@modelcontextprotocol/sdk`, installed by `scripts/test-deps`)
//! as the agent of a bridge in approval mode, over streamable HTTP: its
//! `ElicitRequestSchema` handler approves (the payment is made and the call returns the
//! tool's result), declines or cancels (no payment, a clear refusal), and a slow
//! approval outlives the call's own timeout because the bridge's progress
//! notifications reset it (`resetTimeoutOnProgress`).
//!
//! Without Node (no `scripts/test-deps` run) each test fails, saying how to install it.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::SeqCst;

use crate::common::FORTUNE_PRICE;
use crate::common::harness_bot::HarnessEnv;
use crate::common::interop::{node, node_modules, required, run_steps};
use crate::interop_python::elicited_by;
use serde_json::{Value, json};

/// The callback's wait before a prompt answer: longer than the bridge's progress
/// interval (5 s), so progress is seen while the payment waits, as with the Python SDK.
const ANSWER_AFTER_MS: u64 = 6_000;

/// The slow approval: past two of the bridge's progress notifications.
const SLOW_ANSWER_AFTER_MS: u64 = 11_000;

/// The slow call's own timeout: longer than the progress interval, so each progress
/// resets it in time, and shorter than the slow approval, which without the resets
/// would fail the call (the SDK's 60 s default is too slow for a test).
const SLOW_TIMEOUT_MS: u64 = 7_000;

/// Runs the client script; returns its JSON lines.
async fn run(node: &Path, args: &[String]) -> Vec<Value> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bridge/ts_client.mjs");
    required(
        node_modules().join("@modelcontextprotocol/sdk"),
        "the TypeScript MCP SDK",
    );
    let mut command = tokio::process::Command::new(node);
    command
        .arg(script)
        .args(args)
        .env("NODE_MODULES", node_modules());
    run_steps(command, "the TypeScript client").await
}

/// The paid call with the SDK answering `answer` after `after_ms`, the call waiting at
/// most `timeout_ms` (0: the SDK's default) between progress notifications.
async fn elicited(
    node: PathBuf,
    answer: &str,
    after_ms: u64,
    timeout_ms: u64,
) -> (Value, HarnessEnv) {
    let answer = answer.to_owned();
    let (fortune, env) = elicited_by(false, |url, token| async move {
        let args = [
            "elicit".to_owned(),
            url,
            token,
            answer,
            after_ms.to_string(),
            timeout_ms.to_string(),
        ];
        run(&node, &args).await
    })
    .await;
    (fortune, env)
}

/// The call returned the tool's result, paid once.
fn paid(fortune: &Value, env: &HarnessEnv) {
    assert!(fortune.get("error").is_none(), "{fortune}");
    assert_eq!(fortune["texts"], json!(["fortune #1"]), "{fortune}");
    assert_eq!(fortune["is_error"], json!(false), "{fortune}");
    assert_eq!(env.payments.load(SeqCst), 1);
    assert_eq!(env.bot.probe.fortunes.load(SeqCst), 1);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (1, FORTUNE_PRICE));
}

/// The call was refused with `why`, nothing paid or run.
fn refused(fortune: &Value, env: &HarnessEnv, why: &str) {
    let texts = fortune["texts"].to_string();
    assert!(texts.contains(why), "{why:?} not in {fortune}");
    assert_eq!(fortune["is_error"], json!(true), "{fortune}");
    assert_eq!(env.payments.load(SeqCst), 0);
    assert_eq!(env.bot.probe.fortunes.load(SeqCst), 0);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_approves_through_elicitation() {
    let node = node();
    let (fortune, env) = elicited(node, "accept", ANSWER_AFTER_MS, 0).await;
    paid(&fortune, &env);
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_declines_through_elicitation() {
    let node = node();
    let (fortune, env) = elicited(node, "decline", ANSWER_AFTER_MS, 0).await;
    refused(
        &fortune,
        &env,
        "payment not made: payment declined by the user",
    );
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_cancels_through_elicitation() {
    let node = node();
    let (fortune, env) = elicited(node, "cancel", ANSWER_AFTER_MS, 0).await;
    refused(
        &fortune,
        &env,
        "payment not made: payment approval cancelled by the user",
    );
    env.bridge.close().await;
}

/// An approval slower than the call's timeout: the bridge's progress keeps resetting
/// it, and the call succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_slow_approval_is_kept_alive_by_progress() {
    let node = node();
    let (fortune, env) = elicited(node, "accept", SLOW_ANSWER_AFTER_MS, SLOW_TIMEOUT_MS).await;
    paid(&fortune, &env);
    let waited = fortune["elapsed_ms"].as_u64().expect("elapsed_ms");
    assert!(
        waited > SLOW_TIMEOUT_MS,
        "the call outlived its own timeout ({waited} ms): {fortune}"
    );
    let progress = fortune["seen"].as_array().expect("seen").len();
    assert!(progress >= 2, "reset by each progress: {fortune}");
    env.bridge.close().await;
}
