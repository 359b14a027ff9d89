//! The Python `mcp` SDK (installed by `scripts/test-deps`) as a real agent of the
//! directory tools over streamable HTTP: it searches, and adds the provider through
//! its elicitation callback (accept adds; decline adds nothing).

use std::path::Path;
use std::process::Stdio;

use brmcp::adapters::mem::uid;
use serde_json::Value;

use super::*;

async fn run(url: &str, token: &str, answer: &str) -> Vec<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../target/interop/venv/bin/python");
    assert!(
        python.exists(),
        "the Python mcp SDK is not installed at {}: run scripts/test-deps",
        python.display()
    );
    let child = tokio::process::Command::new(python)
        .arg(root.join("tests/bridge/directory/py_directory.py"))
        .args([url, token, &uid(PROVIDER).to_string(), answer])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn python");
    let output = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the Python client took over 60 s")
        .expect("python");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python failed:\n{stdout}\n{stderr}"
    );
    let steps: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        steps.iter().any(|s| s["step"] == "done"),
        "{stdout}\n{stderr}"
    );
    steps
}

fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {steps:?}"))
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
        asked.contains(&provider) && asked.contains("paid_echo (500 atoms)"),
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
