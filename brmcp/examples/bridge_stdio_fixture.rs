//! One process with an in-memory Bison Relay fabric, a bot on the serving harness (a
//! free tool, a paid tool, progress, cancellation, logging) and a bridge serving that
//! bot over stdio, in autopay mode: what an agent host spawns in the bridge's stdio
//! interop tests.
//!
//! ```text
//! cargo run -p brmcp --example bridge_stdio_fixture [REPORT.json]
//! ```
//!
//! Only MCP goes to stdout. When the agent closes stdin, the bot's counters are written
//! to `REPORT.json` (if given), so a test can check what happened on the far side.

#[path = "../tests/bridge/common/mod.rs"]
mod bridge_common;

use std::sync::atomic::Ordering;

use bridge_common::autopay;
use bridge_common::harness_bot::harness_env;
use brmcp::bridge::serve_stdio;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let report = std::env::args().nth(1);
    let env = harness_env(autopay).await;
    serve_stdio(&env.bridge, &env.bot_id).await?;
    if let Some(path) = report {
        let (entries, today) = env.bridge.spend_log()?;
        let summary = serde_json::json!({
            "fortune_executions": env.bot.probe.fortunes.load(Ordering::SeqCst),
            "payments": env.payments.load(Ordering::SeqCst),
            "balance_matoms": env.bot.harness.balance_matoms(env.bridge_id).await?,
            "spend_entries": entries.len(),
            "spent_today": today,
            "cancelled": env.bot.probe.cancelled.load(Ordering::SeqCst),
        });
        std::fs::write(path, summary.to_string())?;
    }
    env.bridge.close().await;
    Ok(())
}
