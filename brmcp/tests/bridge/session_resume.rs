//! The bridge goes on with its session to a bot across restarts (WIRE.md §8): it saves
//! the session per bot in its data directory and, run after run, uses it again instead
//! of opening another one, so the bot's session count for it does not grow. A bot that
//! lost the session (a Go bot restarted) gets the session initialized again on the same
//! sid, and every call succeeds. An answer the previous run left on its way is never
//! taken for one of this run's calls.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{PayMode, autopay_bridge, serve_test_bot};
use crate::common::{call, connect, text};
use crate::go_bot_sessions::go_router::{GoProbe, GoRouter};
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{PeerId, Router, RouterConfig};
use brmcp::bridge::Bridge;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// Restarts of the bridge: well past the bot's per-peer session cap (8).
const RESTARTS: usize = 20;

/// One run of the bridge process on `dir`: a fresh router (nothing of the last run's
/// state but its data directory) and bridge.
async fn run(fabric: &Fabric, bridge_id: PeerId, bot: PeerId, dir: &std::path::Path) -> Bridge {
    let router = fabric.router(bridge_id, RouterConfig::client());
    start(router, bridge_id, bot, dir).await
}

async fn start(router: Router, bridge_id: PeerId, bot: PeerId, dir: &std::path::Path) -> Bridge {
    autopay_bridge(router, dir, bridge_id, bot, PayMode::Credit).await
}

/// The sid the bridge saved for `bot`.
fn saved_sid(dir: &std::path::Path, bot: PeerId) -> String {
    let path = dir.join("sessions").join(format!("{bot}.json"));
    let saved: Value = serde_json::from_slice(&std::fs::read(&path).expect("saved session"))
        .expect("saved session is JSON");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "saved session file mode");
    }
    saved["sid"].as_str().expect("sid").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_go_on_with_one_session() {
    let fabric = Fabric::new(41);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let (bot_router, bot) = serve_test_bot(&fabric, bot_id);
    let dir = tempfile::tempdir().expect("tempdir");

    let mut sid = None;
    for run_no in 0..RESTARTS {
        let bridge = run(&fabric, bridge_id, bot_id, dir.path()).await;
        let agent = connect(&bridge, bot_id, ()).await;
        let said = format!("run {run_no}");
        let result = agent
            .call_tool(call("echo", json!({ "text": said })))
            .await
            .unwrap_or_else(|e| panic!("run {run_no}: {e}"));
        assert_eq!(text(&result), said, "run {run_no}");
        let now = saved_sid(dir.path(), bot_id);
        assert_eq!(
            *sid.get_or_insert(now.clone()),
            now,
            "run {run_no}: same sid"
        );
        // The process exits: nothing reaches the bot.
        let _ = agent.cancel().await;
        bridge.close().await;
    }

    let stats = bot_router.stats();
    assert_eq!(
        stats.sessions_accepted, 1,
        "one session for every run: {stats:?}"
    );
    assert_eq!(stats.sessions_open, 1, "{stats:?}");
    assert_eq!(stats.dropped_session_cap, 0, "{stats:?}");
    assert_eq!(bot.executions("echo"), RESTARTS, "each call ran once");
}

/// A bot whose `slow` tool answers `text` after `secs` seconds.
#[derive(Clone, Default)]
struct SlowBot {
    started: Arc<Notify>,
}

impl ServerHandler for SlowBot {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(json!({
            "name": "slow",
            "inputSchema": {"type": "object"},
        }))
        .expect("tool");
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let secs = args.get("secs").and_then(Value::as_u64).unwrap_or(0);
        let said = args.get("text").and_then(Value::as_str).unwrap_or("");
        self.started.notify_one();
        tokio::time::sleep(Duration::from_secs(secs)).await;
        Ok(CallToolResult::success(vec![ContentBlock::text(said)]).into())
    }
}

#[tokio::test(start_paused = true)]
async fn a_previous_runs_answer_is_not_taken_for_this_runs() {
    let fabric = Fabric::new(43);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let slow = SlowBot::default();
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    let handler = slow.clone();
    bot_router.serve(move |_: &PeerId| handler.clone());
    let dir = tempfile::tempdir().expect("tempdir");

    // Run 1 starts a slow call and exits while the bot is still at it.
    let bridge = run(&fabric, bridge_id, bot_id, dir.path()).await;
    let agent = connect(&bridge, bot_id, ()).await;
    let pending = tokio::spawn(async move {
        let _ = agent
            .call_tool(call("slow", json!({"secs": 10, "text": "run 1"})))
            .await;
        agent
    });
    slow.started.notified().await;
    bridge.close().await;
    pending.abort();

    // Run 2 has calls outstanding, numbered as run 1's were, when run 1's answer lands.
    let bridge = run(&fabric, bridge_id, bot_id, dir.path()).await;
    let agent = Arc::new(connect(&bridge, bot_id, ()).await);
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let agent = agent.clone();
            tokio::spawn(async move {
                let said = format!("run 2 call {i}");
                let result = agent
                    .call_tool(call("slow", json!({"secs": 20, "text": said})))
                    .await
                    .unwrap_or_else(|e| panic!("call {i}: {e}"));
                (said, text(&result))
            })
        })
        .collect();
    for call in calls {
        let (said, got) = call.await.expect("call task");
        assert_eq!(got, said, "each call gets its own answer");
    }
    assert_eq!(bot_router.stats().sessions_accepted, 1);
    bridge.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_go_bot_keeps_the_session_and_after_its_restart_it_is_initialized_again() {
    let go = GoRouter::new(uid(1), Duration::from_secs(600), 8);
    let probe = go.probe();
    let bridge_id = uid(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let echo = |bridge: Bridge, said: &'static str| async move {
        let agent = connect(&bridge, uid(1), ()).await;
        echo_within_a_minute(&agent, said).await;
        let _ = agent.cancel().await;
        bridge.close().await;
    };

    // The double takes one link: each run gets a new bridge on it (the router keeps no
    // session once the run's transport is gone).
    let router = go.link(bridge_id, RouterConfig::client());
    echo(
        start(router.clone(), bridge_id, go.id(), dir.path()).await,
        "one",
    )
    .await;
    let sid = saved_sid(dir.path(), go.id());

    // A restart of the bridge: the Go bot still has the session and serves it.
    echo(
        start(router.clone(), bridge_id, go.id(), dir.path()).await,
        "two",
    )
    .await;
    assert_eq!(go.sessions(), 1, "no second session");
    assert_eq!(GoProbe::get(&probe.refusals), 0, "served as it was");

    // The Go bot restarts and knows the sid no more: go-sdk refuses the resumed
    // session's first request, and the bridge initializes it again, on the same sid.
    go.restart();
    echo(start(router, bridge_id, go.id(), dir.path()).await, "three").await;
    assert_eq!(GoProbe::get(&probe.refusals), 1, "refused once");
    assert_eq!(go.sessions(), 1, "no stray session");
    assert_eq!(saved_sid(dir.path(), go.id()), sid, "the same sid");
    assert_eq!(GoProbe::get(&probe.calls), 3, "each call ran once");
}

/// Calls `echo` with `said`; the answer must be `said`, within a minute.
async fn echo_within_a_minute(agent: &crate::common::Agent, said: &str) {
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        agent.call_tool(call("echo", json!({ "text": said }))),
    )
    .await
    .unwrap_or_else(|_| panic!("{said}: hung"))
    .unwrap_or_else(|e| panic!("{said}: {e}"));
    assert_eq!(text(&r), said);
}

/// A resumed session the Go bot loses in the middle of a run (it restarts): the call
/// is retried on the session initialized again, on its sid, under the next epoch.
#[tokio::test(start_paused = true)]
async fn a_resumed_session_lost_mid_run_is_initialized_again_on_its_sid() {
    let go = GoRouter::new(uid(1), Duration::from_secs(600), 8);
    let probe = go.probe();
    let bridge_id = uid(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let router = go.link(bridge_id, RouterConfig::client());
    // The first run opens the session.
    let bridge = start(router.clone(), bridge_id, go.id(), dir.path()).await;
    let agent = connect(&bridge, go.id(), ()).await;
    echo_within_a_minute(&agent, "one").await;
    let _ = agent.cancel().await;
    bridge.close().await;
    let sid = saved_sid(dir.path(), go.id());

    // The second resumes it; then the Go bot restarts under it.
    let bridge = start(router, bridge_id, go.id(), dir.path()).await;
    let agent = connect(&bridge, go.id(), ()).await;
    echo_within_a_minute(&agent, "two").await;
    go.restart();
    echo_within_a_minute(&agent, "three").await;
    assert_eq!(GoProbe::get(&probe.refusals), 1, "refused once");
    assert_eq!(go.sessions(), 1, "no stray session");
    assert_eq!(saved_sid(dir.path(), go.id()), sid, "the same sid");
    let saved: Value = serde_json::from_slice(
        &std::fs::read(
            dir.path()
                .join("sessions")
                .join(format!("{}.json", go.id())),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(saved["epoch"], json!(2), "the next epoch");
    assert_eq!(GoProbe::get(&probe.calls), 3, "each call ran once");
    let _ = agent.cancel().await;
    bridge.close().await;
}
