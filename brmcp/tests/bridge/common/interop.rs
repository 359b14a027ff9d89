//! The interop runtimes `scripts/test-deps` installs under `target/interop` (the Python
//! `mcp` SDK's venv, Node with the TypeScript SDK and the conformance suite), and
//! running a client script that reports its steps as JSON lines.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::Value;

/// How long one client script may run: every scenario finishes in a few seconds.
pub const SCRIPT_LIMIT: Duration = Duration::from_secs(60);

/// Where `scripts/test-deps` installs the runtimes.
pub fn interop_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("target/interop")
}

/// `path`, which must exist: otherwise a panic naming `what` and how to install it.
pub fn required(path: PathBuf, what: &str) -> PathBuf {
    assert!(
        path.exists(),
        "{what} is not installed at {}: run scripts/test-deps",
        path.display()
    );
    path
}

/// The venv's Python, with the `mcp` SDK.
pub fn python() -> PathBuf {
    required(interop_dir().join("venv/bin/python"), "the Python mcp SDK")
}

/// Node's `node_modules`.
pub fn node_modules() -> PathBuf {
    interop_dir().join("node/node_modules")
}

/// Node, which must be installed: a test that needs it fails without it, never passes.
pub fn node() -> PathBuf {
    required(node_modules().join(".bin/node"), "Node")
}

/// Runs `command` to its end within `limit`, capturing its output; `what` names it in
/// the panics.
pub async fn output_within(
    mut command: tokio::process::Command,
    limit: Duration,
    what: &str,
) -> Output {
    let child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
    tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("{what} took over {} s", limit.as_secs()))
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// Runs a client script that prints one JSON object per step and `{"step": "done"}`
/// last; it must exit 0 within [`SCRIPT_LIMIT`]. Returns the steps.
pub async fn run_steps(command: tokio::process::Command, what: &str) -> Vec<Value> {
    let output = output_within(command, SCRIPT_LIMIT, what).await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    let steps: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        steps.iter().any(|s| s["step"] == "done"),
        "incomplete run of {what}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    steps
}

/// The step called `name`.
pub fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {steps:?}"))
}
