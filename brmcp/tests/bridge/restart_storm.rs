//! A bridge restarted over and over (each run leaves its session open on the bot: there
//! is no close frame on the wire) is never locked out: every run's call succeeds, long
//! before any idle expiry, and the bot's sessions for it stay bounded by its cap. Each
//! run here has lost the session the last one saved (see `session_resume` for the runs
//! that go on with it), so each opens a new one.

use crate::common::{PayMode, PayerState, TestPayer, autopay, base_config, serve_test_bot};
use crate::common::{call, connect, text};
use brmcp::adapters::DEFAULT_MAX_SESSIONS_PER_PEER;
use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::bridge::Bridge;
use serde_json::json;

/// Restarts of the bridge: well past the bot's per-peer session cap.
const RESTARTS: usize = 50;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_restarts_every_call_succeeds() {
    let fabric = Fabric::new(31);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let (bot_router, bot) = serve_test_bot(&fabric, bot_id);
    // One data directory, as one installation restarted.
    let dir = tempfile::tempdir().expect("tempdir");

    for run in 0..RESTARTS {
        let _ = std::fs::remove_dir_all(dir.path().join("sessions"));
        let router = fabric.router(bridge_id, RouterConfig::client());
        let payer = PayerState::new(bot.clone(), bridge_id, PayMode::Credit);
        let bridge =
            Bridge::new(base_config(dir.path()), router, TestPayer(payer)).expect("bridge");
        bridge
            .apply_settings(autopay(bot_id))
            .await
            .expect("settings");
        let agent = connect(&bridge, bot_id, ()).await;
        let said = format!("run {run}");
        let result = agent
            .call_tool(call("echo", json!({ "text": said })))
            .await
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        assert_eq!(text(&result), said, "run {run}");
        // The process exits: nothing reaches the bot.
        let _ = agent.cancel().await;
        bridge.close().await;
    }

    let stats = bot_router.stats();
    assert!(
        stats.sessions_accepted >= RESTARTS as u64,
        "a session per run: {stats:?}"
    );
    assert_eq!(stats.dropped_session_cap, 0, "{stats:?}");
    assert_eq!(
        stats.sessions_expired, 0,
        "no idle expiry helped: {stats:?}"
    );
    assert!(
        stats.sessions_open <= DEFAULT_MAX_SESSIONS_PER_PEER as u64,
        "still bounded: {stats:?}"
    );
    assert_eq!(bot.executions("echo"), RESTARTS);
}
