//! A link to a bot reconnects after a call timed out while other calls are still in
//! flight on the old connection: those calls keep their answers and their progress.
//! Every connection draws its upstream progress tokens from 0, so the same numbers
//! are live on both at once; each agent still gets only its own progress. A saved
//! session the bot lost is initialized again under an epoch of its own.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Agent, PayMode, autopay_bridge};
use crate::common::{call, connect, text};
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{PeerId, RouterConfig};
use brmcp::bridge::Bridge;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    InitializeRequestParams, InitializeResult, ListToolsResult, NumberOrString,
    PaginatedRequestParams, ProgressNotificationParam, RequestId, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, RoleClient, RoleServer, ServerHandler};
use serde_json::{Value, json};

/// Time a request of the bridge waits for the bot's answer in these tests.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the bot saw.
#[derive(Default)]
struct Seen {
    /// Replies still to lose: the call runs, its answer never leaves.
    lose: AtomicUsize,
    runs: Mutex<HashMap<String, usize>>,
    /// Ids of the `initialize` requests received.
    initializes: Mutex<Vec<RequestId>>,
}

impl Seen {
    fn runs(&self, tool: &str) -> usize {
        self.runs.lock().unwrap().get(tool).copied().unwrap_or(0)
    }
}

/// A bot with tools that take their time and report progress.
#[derive(Clone, Default)]
struct Bot(Arc<Seen>);

async fn progress(ctx: &RequestContext<RoleServer>, step: u32, message: &str) {
    if let Some(token) = ctx.meta.get_progress_token() {
        let params = ProgressNotificationParam::new(token, f64::from(step)).with_message(message);
        let _ = ctx.peer.notify_progress(params).await;
    }
}

impl ServerHandler for Bot {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.0.initializes.lock().unwrap().push(context.id.clone());
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = ["echo", "secret", "quick", "slow"].map(|name| {
            serde_json::from_value::<Tool>(json!({"name": name, "inputSchema": {"type": "object"}}))
                .expect("tool")
        });
        Ok(ListToolsResult::with_all_items(tools.to_vec()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = request.arguments.unwrap_or_default();
        *self.0.runs.lock().unwrap().entry(name.clone()).or_default() += 1;
        let said = match name.as_str() {
            "echo" => args
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            // 1 s of quiet, then progress every 100 ms for 3 s.
            "secret" => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                for step in 1..=30 {
                    progress(&ctx, step, "A-secret").await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                "A done".to_owned()
            }
            "quick" => {
                progress(&ctx, 1, "C-step").await;
                tokio::time::sleep(Duration::from_millis(500)).await;
                "C done".to_owned()
            }
            "slow" => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                "slow done".to_owned()
            }
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        if self
            .0
            .lose
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            std::future::pending::<()>().await;
        }
        Ok(CallToolResult::success(vec![ContentBlock::text(said)]).into())
    }
}

/// An agent that keeps the messages of the progress it receives.
#[derive(Clone, Default)]
struct Progress(Arc<Mutex<Vec<String>>>);

impl Progress {
    fn messages(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl ClientHandler for Progress {
    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.0
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }
}

struct Setup {
    fabric: Fabric,
    /// The bot's router (the fabric holds routers weakly); `None` while it restarts.
    bot_router: Option<brmcp::adapters::Router>,
    bot: Bot,
    bot_id: PeerId,
    bridge_id: PeerId,
    dir: tempfile::TempDir,
}

/// The bot serving as `bot_id` on `fabric`, with fresh state: its router and handler.
fn serve_bot(fabric: &Fabric, bot_id: PeerId) -> (brmcp::adapters::Router, Bot) {
    let bot = Bot::default();
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    let handler = bot.clone();
    bot_router.serve(move |_: &PeerId| handler.clone());
    (bot_router, bot)
}

fn setup(seed: u64) -> Setup {
    let fabric = Fabric::new(seed);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let (bot_router, bot) = serve_bot(&fabric, bot_id);
    Setup {
        fabric,
        bot_router: Some(bot_router),
        bot,
        bot_id,
        bridge_id,
        dir: tempfile::tempdir().expect("tempdir"),
    }
}

/// One run of the bridge on the set-up's data directory.
async fn bridge(s: &Setup) -> Bridge {
    let mut router = RouterConfig::client();
    router.request_timeout = Some(REQUEST_TIMEOUT);
    let router = s.fabric.router(s.bridge_id, router);
    autopay_bridge(router, s.dir.path(), s.bridge_id, s.bot_id, PayMode::Credit).await
}

async fn call_text<H: ClientHandler>(agent: &Agent<H>, tool: &'static str) -> String {
    let result = agent
        .call_tool(call(tool, json!({"text": tool})))
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    text(&result)
}

#[tokio::test(start_paused = true)]
async fn progress_of_a_call_on_the_old_connection_stays_its_own() {
    let s = setup(51);
    let bridge = bridge(&s).await;
    let (a, c) = (Progress::default(), Progress::default());
    let agent_a = Arc::new(connect(&bridge, s.bot_id, a.clone()).await);
    let agent_b = Arc::new(connect(&bridge, s.bot_id, ()).await);
    let agent_c = connect(&bridge, s.bot_id, c.clone()).await;

    // B's call runs, its reply is lost: it times out at 5 s and is retried on a new
    // connection. A's call starts at 2 s on the old one, which lives on under it.
    s.bot.0.lose.store(1, Ordering::SeqCst);
    let b = tokio::spawn({
        let agent_b = agent_b.clone();
        async move { call_text(&agent_b, "echo").await }
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a_call = tokio::spawn({
        let agent_a = agent_a.clone();
        async move { call_text(&agent_a, "secret").await }
    });
    assert_eq!(b.await.unwrap(), "echo", "B's retry answered");
    // C's call on the new connection draws the upstream token A's call has on the old.
    assert_eq!(call_text(&agent_c, "quick").await, "C done");
    assert_eq!(a_call.await.unwrap(), "A done");

    assert!(
        !c.messages().iter().any(|m| m == "A-secret"),
        "C got A's progress: {:?}",
        c.messages()
    );
    assert_eq!(c.messages(), vec!["C-step".to_owned()]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let a_steps = a.messages();
    assert_eq!(a_steps.len(), 30, "A got all its steps: {a_steps:?}");
    assert!(a_steps.iter().all(|m| m == "A-secret"));
    bridge.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_timeout_on_a_resumed_session_leaves_its_other_calls_alone() {
    let s = setup(52);
    // Run 1 opens the session; run 2 resumes it.
    let first = bridge(&s).await;
    let agent = connect(&first, s.bot_id, ()).await;
    assert_eq!(call_text(&agent, "echo").await, "echo");
    let _ = agent.cancel().await;
    first.close().await;
    let bridge = bridge(&s).await;
    let agent = Arc::new(connect(&bridge, s.bot_id, ()).await);
    assert_eq!(call_text(&agent, "echo").await, "echo", "resumed");

    // The echo's reply is lost: it times out at 5 s while the slow call (4 to 6 s) is
    // in flight on the same connection.
    s.bot.0.lose.store(1, Ordering::SeqCst);
    let lost = tokio::spawn({
        let agent = agent.clone();
        async move { call_text(&agent, "echo").await }
    });
    tokio::time::sleep(Duration::from_secs(4)).await;
    let slow = tokio::spawn({
        let agent = agent.clone();
        async move { call_text(&agent, "slow").await }
    });
    assert_eq!(lost.await.unwrap(), "echo", "the lost reply's call retried");
    assert_eq!(slow.await.unwrap(), "slow done");
    assert_eq!(
        s.bot.0.runs("slow"),
        1,
        "the slow call was answered, not retried"
    );
    bridge.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_lost_saved_session_is_initialized_under_an_epoch_of_its_own() {
    let mut s = setup(53);
    let first = bridge(&s).await;
    let agent = connect(&first, s.bot_id, ()).await;
    assert_eq!(call_text(&agent, "echo").await, "echo");
    let _ = agent.cancel().await;
    first.close().await;

    // The bot restarts and knows the session no more: the resume's listing (epoch 1,
    // id 2^32) is refused, and the session is initialized again on its sid.
    s.bot_router = None;
    let (bot_router, bot) = serve_bot(&s.fabric, s.bot_id);
    (s.bot_router, s.bot) = (Some(bot_router), bot);
    let bridge = bridge(&s).await;
    let agent = connect(&bridge, s.bot_id, ()).await;
    assert_eq!(call_text(&agent, "echo").await, "echo");
    // Not the refused listing's id: a late answer to it cannot pass for this one's.
    let epoch_2 = NumberOrString::Number(2 << 32);
    assert_eq!(*s.bot.0.initializes.lock().unwrap(), vec![epoch_2]);
    let _ = agent.cancel().await;
    bridge.close().await;
}
