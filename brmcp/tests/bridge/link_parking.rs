//! The bridge's link to a bot parks while idle (`RouterConfig::client_park_after`): its
//! rmcp service goes and the sid, the bot's `initialize` and the tool cache stay. The
//! next call goes through on the same session without an `initialize`; the bot's list
//! change or request on a parked link revives it and reaches the agent; the link's
//! close closes the parked session; a call in flight keeps it running; a late answer to
//! the service before the park completes nothing of the revived one; a bot that lost
//! the session meanwhile (it restarted) gets it initialized again and the call
//! succeeds; a paid call across a park pays once.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::wire::{Chunks, MessageId, SessionId, encode_part};
use brmcp::adapters::{Clock, PeerId, Router, RouterConfig};
use brmcp::bridge::Bridge;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ClientResult, ContentBlock, ElicitRequest, ElicitRequestParams, ElicitResult, ErrorData,
    Implementation, ListToolsResult, PaginatedRequestParams, PingRequest, ServerCapabilities,
    ServerConfig, ServerRequest, Tool,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, Peer, RoleClient, RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::common::{PayMode, autopay, autopay_bridge, call, connect, env_full, eventually, text};
use crate::go_bot_sessions::go_router::{GoProbe, GoRouter};

/// The bridge's park delay here: short, so a test waits little (time is paused).
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(2);

/// The bridge's router: links park after [`PARK_AFTER`].
pub(crate) fn parking() -> RouterConfig {
    let mut config = RouterConfig::client();
    config.client_park_after = Some(PARK_AFTER);
    config
}

/// What the bot saw, and its side of the session to push on.
#[derive(Default)]
pub(crate) struct Seen {
    pub(crate) initialized: AtomicUsize,
    peer: Mutex<Option<Peer<RoleServer>>>,
    /// Tools listed beyond `echo` and `slow`.
    extra: Mutex<Vec<String>>,
}

/// A bot with `echo` and `slow` (answers `text` after `secs` seconds).
#[derive(Clone, Default)]
pub(crate) struct ParkBot(pub(crate) Arc<Seen>);

impl ParkBot {
    fn peer(&self) -> Peer<RoleServer> {
        self.0.peer.lock().unwrap().clone().expect("initialized")
    }
}

fn tool(name: &str) -> Tool {
    serde_json::from_value(json!({"name": name, "inputSchema": {"type": "object"}})).expect("tool")
}

impl ServerHandler for ParkBot {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        self.0.initialized.fetch_add(1, SeqCst);
        *self.0.peer.lock().unwrap() = Some(context.peer);
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = vec![tool("echo"), tool("slow")];
        tools.extend(self.0.extra.lock().unwrap().iter().map(|n| tool(n)));
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let secs = args.get("secs").and_then(Value::as_u64).unwrap_or(0);
        let said = args.get("text").and_then(Value::as_str).unwrap_or("");
        tokio::time::sleep(Duration::from_secs(secs)).await;
        Ok(CallToolResult::success(vec![ContentBlock::text(said)]).into())
    }
}

/// An agent that hears the bot's list changes and answers its questions (forms) with
/// the name `parked`.
#[derive(Clone, Default)]
struct Heard(Arc<Notify>);

impl ClientHandler for Heard {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(capabilities, Implementation::new("heard", "1"))
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.notify_one();
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Ok(
            serde_json::from_value(json!({"action": "accept", "content": {"name": "parked"}}))
                .unwrap(),
        )
    }
}

pub(crate) struct Setup {
    pub(crate) fabric: Fabric,
    pub(crate) bot_id: PeerId,
    pub(crate) bridge_id: PeerId,
    pub(crate) bot_router: Router,
    pub(crate) bot: ParkBot,
    pub(crate) bridge: Bridge,
    pub(crate) dir: tempfile::TempDir,
}

pub(crate) async fn setup(seed: u64) -> Setup {
    setup_with(seed, parking()).await
}

/// As [`setup`], the bridge's router made with `config`.
async fn setup_with(seed: u64, config: RouterConfig) -> Setup {
    let fabric = Fabric::new(seed);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let bot = ParkBot::default();
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    let handler = bot.clone();
    bot_router.serve(move |_: &PeerId| handler.clone());
    let dir = tempfile::tempdir().expect("tempdir");
    let router = fabric.router(bridge_id, config);
    let bridge = autopay_bridge(router, dir.path(), bridge_id, bot_id, PayMode::Fail).await;
    Setup {
        fabric,
        bot_id,
        bridge_id,
        bot_router,
        bot,
        bridge,
        dir,
    }
}

/// The sid and epoch the bridge saved for `bot`.
pub(crate) fn saved(dir: &std::path::Path, bot: PeerId) -> (String, u64) {
    let path = dir.join("sessions").join(format!("{bot}.json"));
    let saved: Value = serde_json::from_slice(&std::fs::read(path).expect("saved session"))
        .expect("saved session is JSON");
    (
        saved["sid"].as_str().expect("sid").to_owned(),
        saved["epoch"].as_u64().expect("epoch"),
    )
}

/// Calls `tool` with `args`; its text, within a minute.
pub(crate) async fn ask<H: ClientHandler>(
    agent: &crate::common::Agent<H>,
    tool: &'static str,
    args: Value,
) -> String {
    let said = args.to_string();
    let result = tokio::time::timeout(Duration::from_secs(60), agent.call_tool(call(tool, args)))
        .await
        .unwrap_or_else(|_| panic!("{tool} {said}: hung"))
        .unwrap_or_else(|e| panic!("{tool} {said}: {e}"));
    text(&result)
}

/// Waits out a park delay (and more): the idle link parks.
pub(crate) async fn idle() {
    tokio::time::sleep(PARK_AFTER * 3).await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_link_parks_and_the_next_call_goes_on_its_session_without_initialize() {
    let s = setup(61).await;
    let agent = connect(&s.bridge, s.bot_id, ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "one"})).await, "one");
    let (sid, _) = saved(s.dir.path(), s.bot_id);

    idle().await;
    let stats = s.bridge.router().stats();
    assert_eq!(stats.client_parked, 1, "{stats:?}");
    assert_eq!(stats.client_revived, 0, "{stats:?}");

    assert_eq!(ask(&agent, "echo", json!({"text": "two"})).await, "two");
    let stats = s.bridge.router().stats();
    assert_eq!(stats.client_revived, 1, "{stats:?}");
    assert_eq!(s.bot.0.initialized.load(SeqCst), 1, "one initialize");
    let bot_stats = s.bot_router.stats();
    assert_eq!(bot_stats.sessions_accepted, 1, "one session: {bot_stats:?}");
    let (again, epoch) = saved(s.dir.path(), s.bot_id);
    assert_eq!(again, sid, "the same sid");
    assert_eq!(epoch, 1, "the revival's ids are the next epoch's, saved");

    // Parked and revived again and again: still the one session.
    for round in 0..3 {
        idle().await;
        let said = format!("round {round}");
        assert_eq!(ask(&agent, "echo", json!({"text": said})).await, said);
    }
    let stats = s.bridge.router().stats();
    assert_eq!(
        (stats.client_parked, stats.client_revived),
        (4, 4),
        "{stats:?}"
    );
    assert_eq!(s.bot.0.initialized.load(SeqCst), 1, "one initialize");
    assert_eq!(s.bot_router.stats().sessions_accepted, 1);
    let _ = agent.cancel().await;
    s.bridge.close().await;
}

/// The bridge command's router (`bridge::router_config`) parks a link after
/// `LINK_PARK_AFTER`, not after a `Client`'s shorter default: each revival saves the
/// link's session.
#[tokio::test(start_paused = true)]
async fn the_bridge_commands_links_park_after_their_own_delay() {
    use brmcp::adapters::DEFAULT_CLIENT_PARK_AFTER;
    use brmcp::bridge::{LINK_PARK_AFTER, router_config};

    assert!(LINK_PARK_AFTER > DEFAULT_CLIENT_PARK_AFTER * 5);
    let s = setup_with(63, router_config()).await;
    let agent = connect(&s.bridge, s.bot_id, ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "one"})).await, "one");
    tokio::time::sleep(DEFAULT_CLIENT_PARK_AFTER * 5).await;
    let stats = s.bridge.router().stats();
    assert_eq!(stats.client_parked, 0, "parked early: {stats:?}");
    tokio::time::sleep(LINK_PARK_AFTER).await;
    let stats = s.bridge.router().stats();
    assert_eq!(stats.client_parked, 1, "{stats:?}");
    assert_eq!(ask(&agent, "echo", json!({"text": "two"})).await, "two");
    assert_eq!(s.bridge.router().stats().client_revived, 1);
    assert_eq!(s.bot.0.initialized.load(SeqCst), 1, "one initialize");
    let _ = agent.cancel().await;
    s.bridge.close().await;
}

#[tokio::test(start_paused = true)]
async fn the_bots_list_change_ping_or_question_revives_a_parked_link_and_reaches_the_agent() {
    let s = setup(62).await;
    let heard = Heard::default();
    let agent = connect(&s.bridge, s.bot_id, heard.clone()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "one"})).await, "one");

    idle().await;
    assert_eq!(s.bridge.router().stats().client_parked, 1);
    s.bot.0.extra.lock().unwrap().push("late".into());
    s.bot
        .peer()
        .notify_tool_list_changed()
        .await
        .expect("notify");
    tokio::time::timeout(Duration::from_secs(10), heard.0.notified())
        .await
        .expect("the list change never reached the agent");
    assert_eq!(s.bridge.router().stats().client_revived, 1);
    // The link listed the tools again on the revived service before telling.
    let tools = agent.list_all_tools().await.expect("tools");
    assert!(tools.iter().any(|t| t.name == "late"), "{tools:?}");

    idle().await;
    assert_eq!(s.bridge.router().stats().client_parked, 2);
    let pong = tokio::time::timeout(
        Duration::from_secs(10),
        s.bot
            .peer()
            .send_request(ServerRequest::PingRequest(PingRequest::default())),
    )
    .await
    .expect("no answer to the ping")
    .expect("ping failed");
    assert!(matches!(pong, ClientResult::EmptyResult(_)), "{pong:?}");
    let stats = s.bridge.router().stats();
    assert_eq!(stats.client_revived, 2, "{stats:?}");

    // The bot asks the user something on the parked link: the agent answers.
    idle().await;
    assert_eq!(s.bridge.router().stats().client_parked, 3);
    let params: ElicitRequestParams = serde_json::from_value(json!({
        "message": "your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
    }))
    .unwrap();
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        s.bot
            .peer()
            .send_request(ServerRequest::ElicitRequest(ElicitRequest::new(params))),
    )
    .await
    .expect("no answer to the elicitation")
    .expect("elicitation failed");
    let ClientResult::ElicitResult(answer) = answer else {
        panic!("{answer:?}");
    };
    assert_eq!(
        answer.content,
        Some(json!({"name": "parked"})),
        "{answer:?}"
    );
    assert_eq!(s.bridge.router().stats().client_revived, 3);

    assert_eq!(ask(&agent, "echo", json!({"text": "two"})).await, "two");
    assert_eq!(s.bot.0.initialized.load(SeqCst), 1, "one initialize");
    assert_eq!(s.bot_router.stats().sessions_accepted, 1);
    let _ = agent.cancel().await;
    s.bridge.close().await;
}

/// A parked session has no transport whose drop would close it: the link's close (the
/// bridge's, or the bot's removal) closes it at the router.
#[tokio::test(start_paused = true)]
async fn a_parked_session_closes_with_its_link() {
    let s = setup(65).await;
    let agent = connect(&s.bridge, s.bot_id, ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "one"})).await, "one");
    idle().await;
    let stats = s.bridge.router().stats();
    assert_eq!(
        (stats.client_parked, stats.sessions_open),
        (1, 1),
        "{stats:?}"
    );
    let _ = agent.cancel().await;
    s.bridge.close().await;
    let router = s.bridge.router();
    assert!(
        eventually(Duration::from_secs(5), || router.stats().sessions_open == 0).await,
        "{:?}",
        router.stats()
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_in_flight_keeps_the_link_from_parking() {
    let s = setup(63).await;
    let agent = connect(&s.bridge, s.bot_id, ()).await;
    let secs = (PARK_AFTER * 4).as_secs();
    assert_eq!(
        ask(&agent, "slow", json!({"secs": secs, "text": "slow"})).await,
        "slow"
    );
    let stats = s.bridge.router().stats();
    assert_eq!(stats.client_parked, 0, "parked under a call: {stats:?}");
    // Calls overlapping one another, each longer than the park delay.
    let agent = Arc::new(agent);
    let calls: Vec<_> = (0..3u32)
        .map(|i| {
            let agent = agent.clone();
            tokio::spawn(async move {
                tokio::time::sleep(PARK_AFTER / 2 * i).await;
                let said = format!("call {i}");
                let got = ask(&agent, "slow", json!({"secs": secs, "text": said})).await;
                (said, got)
            })
        })
        .collect();
    for call in calls {
        let (said, got) = call.await.expect("call task");
        assert_eq!(got, said);
    }
    assert_eq!(s.bridge.router().stats().client_parked, 0);
    s.bridge.close().await;
}

/// One JSON-RPC message from `from` to `to` on session `sid`, as PMs on the fabric.
fn inject(fabric: &Fabric, from: PeerId, to: PeerId, sid: SessionId, message: &Value) {
    let payload = serde_json::to_vec(message).unwrap();
    let exp = fabric.clock().now().saturating_add(600).0;
    let mid = MessageId::random().unwrap();
    for (header, chunk) in Chunks::new(sid, mid, exp, &payload, 1 << 16).unwrap() {
        let mut pm = vec![0u8; header.encoded_len(chunk.len())];
        let n = encode_part(&header, chunk, &mut pm).unwrap();
        pm.truncate(n);
        fabric
            .send(from, &to, String::from_utf8(pm).unwrap())
            .expect("send");
    }
}

/// A hostile bot replays answers under the ids of the service before the park: the
/// revived service numbers its requests in another range, so none is taken for its.
#[tokio::test(start_paused = true)]
async fn a_late_answer_to_the_service_before_the_park_completes_nothing() {
    let s = setup(64).await;
    let agent = connect(&s.bridge, s.bot_id, ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "one"})).await, "one");
    idle().await;
    assert_eq!(s.bridge.router().stats().client_parked, 1);
    let sid: SessionId = saved(s.dir.path(), s.bot_id).0.parse().expect("sid");

    let forged = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for id in 0..8 {
            inject(
                &s.fabric,
                s.bot_id,
                s.bridge_id,
                sid,
                &json!({"jsonrpc": "2.0", "id": id,
                        "result": {"content": [{"type": "text", "text": "forged"}]}}),
            );
        }
    };
    let (answer, ()) = tokio::join!(
        ask(&agent, "slow", json!({"secs": 3, "text": "two"})),
        forged
    );
    assert_eq!(answer, "two", "a replayed answer was taken for the call");
    assert_eq!(s.bridge.router().stats().client_revived, 1);
    s.bridge.close().await;
}

/// A Go bot that restarts while the link is parked has forgotten the session: the next
/// call gets it initialized again, on its sid, and succeeds. Once on a session this run
/// opened, once on one a previous run left (resumed, then parked).
#[tokio::test(start_paused = true)]
async fn a_session_the_bot_lost_while_parked_is_initialized_again() {
    let go = GoRouter::new(uid(1), Duration::from_secs(600), 8);
    let probe = go.probe();
    let bridge_id = uid(2);
    let dir = tempfile::tempdir().expect("tempdir");
    let router = go.link(bridge_id, parking());
    let start = || {
        autopay_bridge(
            router.clone(),
            dir.path(),
            bridge_id,
            go.id(),
            PayMode::Fail,
        )
    };

    // This run opened the session.
    let bridge = start().await;
    let agent = connect(&bridge, go.id(), ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "one"})).await, "one");
    let (sid, _) = saved(dir.path(), go.id());
    idle().await;
    assert_eq!(bridge.router().stats().client_parked, 1);
    go.restart();
    assert_eq!(ask(&agent, "echo", json!({"text": "two"})).await, "two");
    assert_eq!(
        GoProbe::get(&probe.initializes),
        2,
        "initialized again once"
    );
    assert_eq!(go.sessions(), 1, "no stray session");
    let _ = agent.cancel().await;
    bridge.close().await;

    // The next run resumes it; it parks; the bot restarts under it.
    let bridge = start().await;
    let agent = connect(&bridge, go.id(), ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "three"})).await, "three");
    let (_, resumed) = saved(dir.path(), go.id());
    idle().await;
    assert_eq!(bridge.router().stats().client_parked, 2, "parked again");
    go.restart();
    assert_eq!(ask(&agent, "echo", json!({"text": "four"})).await, "four");
    assert_eq!(
        GoProbe::get(&probe.initializes),
        3,
        "initialized again once"
    );
    assert_eq!(go.sessions(), 1, "no stray session");
    let (again, epoch) = saved(dir.path(), go.id());
    assert_eq!(again, sid, "the same sid throughout");
    // The revival's ids were the next epoch's; the `initialize` again, the one after:
    // an answer to either is never taken for the other's.
    assert_eq!(
        epoch,
        resumed + 2,
        "initialized again past the revived epoch"
    );
    assert_eq!(GoProbe::get(&probe.calls), 4, "each call ran once");
    let _ = agent.cancel().await;
    bridge.close().await;
}

/// A paid call whose credit lands while the link is parked: the reissue revives it and
/// the call is paid for once and runs once.
#[tokio::test(start_paused = true)]
async fn a_paid_call_across_a_park_pays_once() {
    let env = env_full(
        autopay,
        |mut config| {
            // Each poll for the credit waits past the park delay.
            config.poll_interval = PARK_AFTER * 3;
            config.poll_attempts = 5;
            config
        },
        parking(),
    )
    .await;
    *env.payer.mode.lock().unwrap() = PayMode::CreditLate(PARK_AFTER * 2);
    let agent = connect(&env.bridge, env.bot_id, ()).await;
    let result = tokio::time::timeout(
        Duration::from_secs(120),
        agent.call_tool(call("fortune", json!({}))),
    )
    .await
    .expect("hung")
    .expect("call");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let stats = env.bridge.router().stats();
    assert!(stats.client_parked >= 1, "never parked: {stats:?}");
    assert!(stats.client_revived >= 1, "{stats:?}");
    assert_eq!(env.payer.count(), 1, "paid once");
    assert_eq!(env.bot.executions("fortune"), 1, "ran once");
    assert_eq!(env.bot.balance(&env.bridge_id), 0, "its credit spent on it");
    let keys = env.bot.calls_of("fortune");
    assert!(keys.len() >= 2, "{keys:?}");
    assert!(keys.iter().all(|k| *k == keys[0]), "one key throughout");
    agent.cancel().await.unwrap();
}
