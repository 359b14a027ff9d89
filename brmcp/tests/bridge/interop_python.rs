//! The Python `mcp` SDK (installed by `scripts/test-deps`) as a real agent of the
//! bridge, through bridge → fabric → serving harness: over streamable HTTP with a
//! bearer token in both of the SDK's lifecycles, and over stdio with the bridge spawned
//! as a process.
//! Lists tools, calls a free tool, calls a paid tool in autopay mode end to end, gets
//! progress relayed, cancels a call, and is refused with 401 for a wrong token.
//! In approval mode, approves and declines a payment through its elicitation callback,
//! asked by a request (legacy lifecycle) or by `input_required` (2026-07-28), and on
//! 2026-07-28 answers a bot's own elicitation relayed as `input_required`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::harness_bot::{HarnessEnv, harness_env};
use crate::common::interop::{python, run_steps, step};
use crate::common::{FORTUNE_PRICE, autopay, eventually};
use brmcp::bridge::Mode;
use serde_json::{Value, json};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bridge/py_client.py")
}

/// Runs the client script; returns its JSON lines by step.
async fn run(args: &[String]) -> Vec<Value> {
    let mut command = tokio::process::Command::new(python());
    command.arg(script()).args(args);
    run_steps(command, "the Python client").await
}

/// What every transport and lifecycle must show.
async fn check_scenario(steps: &[Value], env: &HarnessEnv) {
    let tools = step(steps, "tools");
    let names: Vec<&str> = tools["names"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in ["echo", "fortune", "quote", "progress", "wait"] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
    assert_eq!(
        tools["meta"]["fortune"]["brmcp/priceAtoms"],
        json!(FORTUNE_PRICE)
    );
    assert_eq!(tools["meta"]["quote"]["brmcp/pricing"], json!("dynamic"));
    assert_eq!(
        tools["echo_schema"]["properties"]["text"]["description"],
        json!("the text to echo back")
    );

    let echo = step(steps, "echo");
    assert_eq!(echo["texts"], json!(["hi"]));
    assert_eq!(echo["structured"], json!({"echo": "hi"}));
    assert_eq!(echo["is_error"], json!(false));

    let fortune = step(steps, "fortune");
    assert_eq!(fortune["texts"], json!(["fortune #1"]), "{fortune}");
    assert_eq!(fortune["is_error"], json!(false));
    let probe = &env.bot.probe;
    assert_eq!(probe.fortunes.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(env.payments.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        env.bot.harness.balance_matoms(env.bridge_id).await.unwrap(),
        0,
        "charged once"
    );
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (1, FORTUNE_PRICE));

    let progress = step(steps, "progress");
    assert_eq!(progress["texts"], json!(["done 3"]));
    assert_eq!(
        progress["seen"],
        json!([
            [1.0, 3.0, "step 1"],
            [2.0, 3.0, "step 2"],
            [3.0, 3.0, "step 3"]
        ])
    );

    let log = step(steps, "log");
    assert_eq!(log["texts"], json!(["logged"]));
    assert_eq!(
        log["logs"],
        json!([{"level": "warning", "logger": "testbot", "data": "disk almost full"}]),
        "{log}"
    );

    assert_eq!(step(steps, "cancel")["cancelled"], json!(true));
    let probe = env.bot.probe.clone();
    assert!(
        eventually(Duration::from_secs(5), || probe
            .cancelled
            .load(std::sync::atomic::Ordering::SeqCst)
            == 1)
        .await,
        "the bot never saw the cancellation"
    );
}

async fn over_http(mode: &str) {
    let env = harness_env(|bot| {
        let mut s = autopay(bot);
        s.enabled = true;
        s.token = "py-s3cret-py-s3cret-py-s3cret-py-s3cret".into();
        s
    })
    .await;
    env.bridge.start().await.unwrap();
    let addr = env.bridge.listen_addr().unwrap();
    let url = format!("http://127.0.0.1:{}/mcp/{}", addr.port(), env.bot_id);
    let steps = run(&[
        "http".into(),
        url,
        "py-s3cret-py-s3cret-py-s3cret-py-s3cret".into(),
        mode.into(),
    ])
    .await;
    check_scenario(&steps, &env).await;
    let wrong = step(&steps, "wrong_token");
    assert_eq!(wrong["sdk_refused"], json!(true), "{wrong}");
    assert_eq!(wrong["status"], json!(401), "{wrong}");
    assert_eq!(wrong["www_authenticate"], json!("Bearer"), "{wrong}");
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_over_http_stateless() {
    over_http("auto").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_over_http_legacy() {
    over_http("legacy").await;
}

/// The stdio fixture example, built by `cargo test` next to this test binary.
fn stdio_fixture() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let dir = exe.parent().and_then(Path::parent).expect("target dir");
    let fixture = dir.join("examples").join("bridge_stdio_fixture");
    assert!(
        fixture.exists(),
        "{} is missing: cargo test builds it (cargo build -p brmcp --examples)",
        fixture.display()
    );
    fixture
}

async fn over_stdio(mode: &str) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let steps = run(&[
        "stdio".into(),
        mode.into(),
        stdio_fixture().display().to_string(),
        report.path().display().to_string(),
    ])
    .await;
    assert_eq!(step(&steps, "echo")["texts"], json!(["hi"]));
    assert_eq!(step(&steps, "fortune")["texts"], json!(["fortune #1"]));
    assert_eq!(
        step(&steps, "progress")["seen"],
        json!([
            [1.0, 3.0, "step 1"],
            [2.0, 3.0, "step 2"],
            [3.0, 3.0, "step 3"]
        ])
    );
    assert_eq!(step(&steps, "cancel")["cancelled"], json!(true));
    assert_eq!(
        step(&steps, "tools")["meta"]["fortune"]["brmcp/priceAtoms"],
        json!(FORTUNE_PRICE)
    );
    // The fixture writes its report once the agent has closed stdin.
    let mut summary = Value::Null;
    for _ in 0..100 {
        if let Ok(text) = std::fs::read_to_string(report.path())
            && let Ok(v) = serde_json::from_str::<Value>(&text)
        {
            summary = v;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        summary,
        json!({
            "fortune_executions": 1,
            "payments": 1,
            "balance_matoms": 0,
            "spend_entries": 1,
            "spent_today": FORTUNE_PRICE,
            "cancelled": 1,
        })
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_over_stdio_stateless() {
    over_stdio("auto").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_over_stdio_legacy() {
    over_stdio("legacy").await;
}

/// Approval mode over HTTP (legacy lifecycle, where the bridge may ask the client):
/// the SDK's elicitation callback answers `answer` after longer than the progress
/// interval; with `approvals`, the approvals command approves first, a second after the
/// payment is held. Returns the call's step and the environment.
async fn elicited(answer: &str, approvals: bool) -> (Value, HarnessEnv) {
    let answer = answer.to_owned();
    elicited_by(approvals, |url, token| async move {
        run(&["elicit".into(), url, token, answer]).await
    })
    .await
}

/// [`elicited`] with another client: `client(url, token)` runs it and returns its
/// steps, among them a `fortune` step with the call's `texts`, `is_error`, what it was
/// `asked` and the progress it has `seen`.
pub(crate) async fn elicited_by<F, Fut>(approvals: bool, client: F) -> (Value, HarnessEnv)
where
    F: FnOnce(String, String) -> Fut,
    Fut: Future<Output = Vec<Value>>,
{
    elicited_with(approvals, true, client).await
}

/// [`elicited_by`]; `waits` tells whether the call waits at the bridge while the
/// callback answers (a request, with progress meanwhile) or not (`input_required`,
/// answered between the rounds of the call).
async fn elicited_with<F, Fut>(approvals: bool, waits: bool, client: F) -> (Value, HarnessEnv)
where
    F: FnOnce(String, String) -> Fut,
    Fut: Future<Output = Vec<Value>>,
{
    let token = "py-el1cit-py-el1cit-py-el1cit-py-el1cit";
    let env = harness_env(|bot| {
        let mut s = autopay(bot);
        s.mode = Mode::Approval;
        // Longer than the callback takes, short enough to fail fast without it.
        s.approval_timeout_secs = 20;
        s.enabled = true;
        s.token = token.into();
        s
    })
    .await;
    env.bridge.start().await.unwrap();
    let addr = env.bridge.listen_addr().unwrap();
    let url = format!("http://127.0.0.1:{}/mcp/{}", addr.port(), env.bot_id);
    let approver = approvals.then(|| {
        let bridge = env.bridge.clone();
        tokio::spawn(async move {
            while bridge.pending_payments().is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            let id = bridge.pending_payments()[0].id.clone();
            assert!(bridge.resolve_payment(&id, true), "not held");
        })
    });
    let steps = client(url, token.into()).await;
    if let Some(approver) = approver {
        approver.await.unwrap();
    }
    let fortune = step(&steps, "fortune").clone();
    let asked = fortune["asked"].as_array().expect("asked");
    assert_eq!(asked.len(), 1, "asked once: {fortune}");
    let message = asked[0]["message"].as_str().unwrap();
    for part in [
        env.bot_id.to_string(),
        "\"fortune\"".to_owned(),
        format!("{FORTUNE_PRICE} atoms"),
    ] {
        assert!(message.contains(&part), "{part} not in {message:?}");
    }
    assert_eq!(asked[0]["schema"]["type"], json!("object"), "{fortune}");
    // The callback took 6 s: at least one progress while the payment waited.
    let seen = fortune["seen"].as_array().expect("seen");
    assert!(
        approvals
            || !waits
            || seen.iter().any(|p| p[2]
                .as_str()
                .is_some_and(|m| m.contains("waiting for the payment"))),
        "no progress while waiting: {fortune}"
    );
    assert!(env.bridge.pending_payments().is_empty(), "still parked");
    (fortune, env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_approves_through_elicitation() {
    let (fortune, env) = elicited("accept", false).await;
    assert_eq!(fortune["texts"], json!(["fortune #1"]), "{fortune}");
    assert_eq!(fortune["is_error"], json!(false));
    assert_eq!(env.payments.load(std::sync::atomic::Ordering::SeqCst), 1);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (1, FORTUNE_PRICE));
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_declines_through_elicitation() {
    let (fortune, env) = elicited("decline", false).await;
    let texts = fortune["texts"].to_string();
    assert!(
        texts.contains("payment not made: payment declined by the user"),
        "{fortune}"
    );
    assert_eq!(env.payments.load(std::sync::atomic::Ordering::SeqCst), 0);
    let probe = &env.bot.probe;
    assert_eq!(probe.fortunes.load(std::sync::atomic::Ordering::SeqCst), 0);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (0, 0));
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_cancels_through_elicitation() {
    let (fortune, env) = elicited("cancel", false).await;
    let texts = fortune["texts"].to_string();
    assert!(
        texts.contains("payment not made: payment approval cancelled by the user"),
        "{fortune}"
    );
    assert_eq!(env.payments.load(std::sync::atomic::Ordering::SeqCst), 0);
    env.bridge.close().await;
}

/// The approvals command decides while the elicitation is still unanswered: its
/// approval pays, and the client's later decline changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_command_decides_before_elicitation() {
    let (fortune, env) = elicited("decline", true).await;
    assert_eq!(fortune["texts"], json!(["fortune #1"]), "{fortune}");
    assert_eq!(env.payments.load(std::sync::atomic::Ordering::SeqCst), 1);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (1, FORTUNE_PRICE));
    env.bridge.close().await;
}

/// The SDK on 2026-07-28 (`auto`), which cannot be sent requests: it is asked by
/// `input_required`, answers through its elicitation callback and retries.
async fn elicited_by_input_required(answer: &str) -> (Value, HarnessEnv) {
    let answer = answer.to_owned();
    elicited_with(false, false, |url, token| async move {
        run(&["elicit".into(), url, token, answer, "auto".into()]).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_approves_through_input_required() {
    let (fortune, env) = elicited_by_input_required("accept").await;
    assert_eq!(fortune["texts"], json!(["fortune #1"]), "{fortune}");
    assert_eq!(fortune["is_error"], json!(false));
    let message = fortune["asked"][0]["message"].as_str().unwrap();
    assert!(
        message.contains("DCR"),
        "not the input_required form: {message}"
    );
    assert_eq!(env.payments.load(std::sync::atomic::Ordering::SeqCst), 1);
    let probe = &env.bot.probe;
    assert_eq!(probe.fortunes.load(std::sync::atomic::Ordering::SeqCst), 1);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (1, FORTUNE_PRICE));
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_declines_through_input_required() {
    let (fortune, env) = elicited_by_input_required("decline").await;
    let texts = fortune["texts"].to_string();
    assert!(
        texts.contains("payment not made: payment declined by the user"),
        "{fortune}"
    );
    assert_eq!(env.payments.load(std::sync::atomic::Ordering::SeqCst), 0);
    let probe = &env.bot.probe;
    assert_eq!(probe.fortunes.load(std::sync::atomic::Ordering::SeqCst), 0);
    env.bridge.close().await;
}

/// A bot's own elicitation (two questions in one call, one in a prompt's and one in a
/// resource's read) reaches the SDK on 2026-07-28 as `input_required`; its answers reach
/// the bot's one request each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_answers_a_bots_elicitation_through_input_required() {
    let token = "py-b0t-el1cit-py-b0t-el1cit-py-b0t-el1cit";
    let env = crate::common::env(|bot| {
        let mut s = autopay(bot);
        s.enabled = true;
        s.token = token.into();
        s
    })
    .await;
    env.bridge.start().await.unwrap();
    let addr = env.bridge.listen_addr().unwrap();
    let url = format!("http://127.0.0.1:{}/mcp/{}", addr.port(), env.bot_id);
    let steps = run(&["bot-elicit".into(), url, token.into()]).await;
    let elicit = step(&steps, "elicit");
    assert_eq!(
        elicit["texts"],
        json!([r#"user said: "accept" {"name":"py"}; "accept" {"name":"py"}"#]),
        "{elicit}"
    );
    assert_eq!(
        elicit["asked"],
        json!(["your name? (1 of 2)", "your name? (2 of 2)"])
    );
    assert_eq!(env.bot.calls_of("elicit").len(), 1, "one call to the bot");
    // A prompt and a resource whose reads ask: each question reaches the SDK, each
    // answer the bot's one request.
    let said = r#"user said: "accept" {"name":"py"}"#;
    let prompt = step(&steps, "prompt");
    assert_eq!(prompt["text"], json!(said), "{prompt}");
    assert_eq!(prompt["asked"], json!(["whom to greet?"]), "{prompt}");
    let resource = step(&steps, "resource");
    assert_eq!(resource["text"], json!(said), "{resource}");
    assert_eq!(resource["asked"], json!(["whose resource?"]), "{resource}");
    assert_eq!(env.bot.reads_of("prompt:ask"), 1, "one request to the bot");
    assert_eq!(env.bot.reads_of("resource:test://ask"), 1);
    env.bridge.close().await;
}
