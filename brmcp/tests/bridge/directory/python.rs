//! The Python `mcp` SDK (installed by `scripts/test-deps`) as a real agent of the
//! directory tools over streamable HTTP: it searches, and adds the provider through
//! its elicitation callback (accept adds; decline adds nothing).

use std::path::Path;

use crate::common::interop::{python, run_steps, step};
use brmcp::adapters::mem::uid;
use serde_json::Value;

use super::*;

async fn run(url: &str, token: &str, answer: &str) -> Vec<Value> {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/bridge/directory/py_directory.py");
    let mut command = tokio::process::Command::new(python());
    command
        .arg(script)
        .args([url, token, &uid(PROVIDER).to_string(), answer]);
    run_steps(command, "the Python client").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_agent_searches_and_adds_through_elicitation() {
    let mut s = settings(10_000, 100_000);
    s.enabled = true;
    let w = world(0, s).await;
    w.bridge.start().await.unwrap();
    let url = format!("http://{}/mcp/directory", w.bridge.listen_addr().unwrap());
    let token = w.bridge.settings().token;
    let provider = uid(PROVIDER).to_string();

    let steps = run(&url, &token, "decline").await;
    let tools = step(&steps, "tools")["names"].to_string();
    assert!(tools.contains("directory_search") && tools.contains("directory_add_bot"));
    let search = step(&steps, "search");
    assert_eq!(search["is_error"], false, "{search}");
    let shown = search["texts"][0].as_str().unwrap();
    assert!(
        shown.contains(&format!(
            "\"paid_echo\" of bot {provider}: {PAID_ECHO} atoms"
        )),
        "{search}"
    );
    assert_eq!(search["structured"]["total"], 2, "{search}");
    let add = step(&steps, "add");
    assert_eq!(add["is_error"], true, "{add}");
    assert!(
        add["texts"].to_string().contains("declined by the user"),
        "{add}"
    );
    let asked = add["asked"][0].as_str().unwrap();
    assert!(
        asked.contains(&provider) && asked.contains("\"paid_echo\" (500 atoms)"),
        "{asked}"
    );
    assert!(w.bridge.bots().is_empty());

    let steps = run(&url, &token, "accept").await;
    let add = step(&steps, "add");
    assert_eq!(add["is_error"], false, "{add}");
    let bots = w.bridge.bots();
    assert_eq!(bots.len(), 1);
    assert_eq!(
        (bots[0].uid, bots[0].name.as_deref()),
        (uid(PROVIDER), Some("echoer"))
    );
    w.bridge.close().await;
}
