//! The official MCP conformance suite (`@modelcontextprotocol/conformance`, installed by
//! `scripts/test-deps` with Node 22) against the bridge fronting, across the Bison
//! Relay link, a bot that implements the suite's fixture tools, resources and prompts.
//! The bearer check is waived (the suite cannot send headers) on the loopback bind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::conformance::ConformanceBot;
use crate::common::interop::{interop_dir, output_within, required};
use crate::common::{PayMode, PayerState, TestPayer, autopay, base_config};
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{PeerId, RouterConfig};
use brmcp::bridge::Bridge;
use std::sync::Arc;

fn node_dir() -> PathBuf {
    let dir = interop_dir().join("node");
    required(dir.join("node_modules/.bin/node"), "Node");
    required(
        dir.join("node_modules/.bin/conformance"),
        "the conformance suite",
    );
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_through_the_bridge() {
    let node = node_dir();
    let fabric = Fabric::new(11);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    bot_router.serve(|_: &PeerId| ConformanceBot);
    let dir = tempfile::tempdir().unwrap();
    let mut config = base_config(dir.path());
    config.require_token = false;
    let payer = PayerState::new(Arc::default(), bridge_id, PayMode::Credit);
    let bridge = Bridge::new(
        config,
        fabric.router(bridge_id, RouterConfig::client()),
        TestPayer(payer),
    )
    .unwrap();
    let mut settings = autopay(bot_id);
    settings.enabled = true;
    bridge.apply_settings(settings).await.unwrap();
    bridge.start().await.unwrap();
    let addr = bridge.listen_addr().unwrap();
    let url = format!("http://127.0.0.1:{}/mcp/{bot_id}", addr.port());

    // The spec version the suite infers per scenario (2025-11-25 lifecycle), then the
    // stateless 2026-07-28 lifecycle.
    for (spec, expected) in [
        (None, EXPECTED_DEFAULT),
        (Some("2026-07-28"), EXPECTED_2026),
    ] {
        let (passed, failed, output) = run_suite(&node, &url, spec).await;
        assert_eq!(failed, 0, "{output}");
        assert_eq!(passed, expected, "{output}");
    }
    drop(bot_router);
    bridge.close().await;
}

/// Checks passed by the active suite of the pinned conformance version, at the
/// versions it infers per scenario (31 scenarios) and at 2026-07-28 (20 scenarios).
const EXPECTED_DEFAULT: u32 = 73;
const EXPECTED_2026: u32 = 42;

/// How long the whole suite may run: its scenarios take a minute or two.
const SUITE_LIMIT: Duration = Duration::from_secs(300);

/// Runs the suite; returns the checks passed and failed, and its output.
async fn run_suite(node: &Path, url: &str, spec: Option<&str>) -> (u32, u32, String) {
    let results = tempfile::tempdir().unwrap();
    let bin = node.join("node_modules/.bin");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut command = tokio::process::Command::new(bin.join("conformance"));
    command.args(["server", "--url", url]);
    if let Some(spec) = spec {
        command.args(["--spec-version", spec]);
    }
    command.env("PATH", path).current_dir(results.path());
    let output = output_within(command, SUITE_LIMIT, "the conformance suite").await;
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let total = text
        .lines()
        .find_map(|l| l.strip_prefix("Total: "))
        .unwrap_or_else(|| panic!("no summary in the suite's output:\n{text}"));
    let mut numbers = total
        .split(|c: char| !c.is_ascii_digit())
        .filter(|n| !n.is_empty())
        .map(|n| n.parse::<u32>().unwrap());
    let (passed, failed) = (numbers.next().unwrap(), numbers.next().unwrap());
    (passed, failed, text)
}
