//! The Python `mcp` SDK as a user's agent meeting the bridge's refusals: the error it
//! raises carries the bridge's message (a wrong token, an unknown bot named, a bot
//! unavailable named with the reason), not a bare "Server returned an error response".

use std::path::Path;
use std::time::Duration;

use crate::common::interop::{python, run_steps, step};
use crate::common::{autopay, env_with};
use brmcp::adapters::mem::uid;
use serde_json::Value;

const TOKEN: &str = "py-errors-s3cret-py-errors-s3cret-py";

async fn refusals_shown(mode: &str) {
    let offline = uid(8);
    let env = env_with(
        |bot| {
            let mut s = autopay(bot);
            s.enabled = true;
            s.token = TOKEN.into();
            s.bot_names.insert("fortune".into(), bot.to_string());
            // Allowed, but no one hosts it.
            s.allowed_bots.push(offline.to_string());
            s.bot_names.insert("offline".into(), offline.to_string());
            s
        },
        |mut c| {
            c.connect_timeout = Duration::from_millis(400);
            c.retry_after = Duration::from_millis(100);
            c
        },
    )
    .await;
    env.bridge.start().await.unwrap();
    let addr = env.bridge.listen_addr().unwrap();
    let mut command = tokio::process::Command::new(python());
    command
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bridge/py_errors.py"))
        .args([
            format!("http://127.0.0.1:{}", addr.port()),
            TOKEN.into(),
            mode.into(),
        ]);
    let steps = run_steps(command, "the Python client").await;
    let error = |case: &str| -> String {
        let s = step(&steps, case);
        match &s["error"] {
            Value::String(e) => e.clone(),
            other => panic!("{case}: the SDK raised nothing: {other}"),
        }
    };
    let wrong = error("wrong_token");
    assert!(wrong.contains("wrong bearer token"), "{mode}: {wrong}");
    assert!(!wrong.contains(TOKEN), "{wrong}");
    let unknown = error("unknown_bot");
    assert!(
        unknown.contains("unknown bot \"nosuch\""),
        "{mode}: {unknown}"
    );
    let unavailable = error("unavailable");
    assert!(
        unavailable.contains(&format!("bot unavailable: \"offline\" ({offline})")),
        "{mode}: {unavailable}"
    );
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_shows_the_bridges_refusals_legacy() {
    refusals_shown("legacy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_shows_the_bridges_refusals_stateless() {
    refusals_shown("auto").await;
}
