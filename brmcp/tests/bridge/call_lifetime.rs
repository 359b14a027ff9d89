//! A call lives as long as its agent waits for it. A hostile bot double answers
//! `CALL_INTERRUPTED` (the harness's word for a call its previous process was running):
//! the bridge retries under the same call key while the agent waits, after a pause that
//! lets a stopping bot come back, a bounded number of times. An agent that cancels, or times out, ends the call: nothing is
//! reissued or paid for it afterwards. A bot that says nothing at all fails the call
//! within the answer bound, with the reason; a bot that runs a call silently but
//! answers the session's ping is not cut, and meanwhile the agent hears what it waits
//! for.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::protocol::CALL_INTERRUPTED;
use brmcp::adapters::{PeerId, RouterConfig};
use brmcp::bridge::{Bridge, Config, Mode};
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest,
    ContentBlock, ErrorData, ListToolsResult, PaginatedRequestParams, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::{PeerRequestOptions, RequestContext};
use rmcp::{RoleServer, ServerHandler, ServiceError};
use serde_json::{Value, json};

use crate::common::{PayMode, PayerState, TestPayer, autopay, base_config, connect, eventually};

/// What the bot does with one `tools/call`.
#[derive(Clone, Copy)]
enum Answer {
    /// A JSON-RPC error `CALL_INTERRUPTED`, as a restarted harness sends.
    Interrupted,
    /// `payment_required` for 100 atoms.
    Quote,
    /// Holds the call until the bridge cancels it.
    Hold,
    /// Answers after this many seconds, saying nothing meanwhile.
    Sleep(u64),
    /// The call runs.
    Ran,
}

#[derive(Default)]
struct Script {
    answers: Mutex<VecDeque<Answer>>,
    /// The call key of every `tools/call` received, in order.
    keys: Mutex<Vec<Option<String>>>,
    /// When each `tools/call` came, in order.
    times: Mutex<Vec<std::time::Instant>>,
    /// Calls the bridge cancelled while the bot held them.
    cancelled: Mutex<usize>,
}

#[derive(Clone)]
struct Bot(Arc<Script>);

fn priced(name: &str, atoms: u64) -> Tool {
    serde_json::from_value(json!({
        "name": name,
        "inputSchema": {"type": "object"},
        "_meta": {"brmcp/priceAtoms": atoms},
    }))
    .unwrap()
}

impl ServerHandler for Bot {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![priced("slow", 100)]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = context
            .meta
            .get("brmcp/callKey")
            .and_then(Value::as_str)
            .map(str::to_owned);
        self.0.keys.lock().unwrap().push(key);
        self.0.times.lock().unwrap().push(std::time::Instant::now());
        let answer = self.0.answers.lock().unwrap().pop_front();
        match answer.unwrap_or(Answer::Ran) {
            Answer::Interrupted => Err(ErrorData::new(
                CALL_INTERRUPTED,
                "call interrupted by a restart; refunded",
                None,
            )),
            Answer::Quote => {
                let quote = json!({"error": "payment_required", "tool": "slow",
                    "priceAtoms": 100, "balanceAtoms": 0, "shortfallAtoms": 100,
                    "acceptedRails": ["tip"]});
                Ok(CallToolResult::error(vec![ContentBlock::text(quote.to_string())]).into())
            }
            Answer::Hold => {
                context.ct.cancelled().await;
                *self.0.cancelled.lock().unwrap() += 1;
                Err(ErrorData::internal_error("cancelled", None))
            }
            Answer::Sleep(secs) => {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                Ok(CallToolResult::success(vec![ContentBlock::text("slept")]).into())
            }
            Answer::Ran => Ok(CallToolResult::success(vec![ContentBlock::text("ran")]).into()),
        }
    }
}

struct Setup {
    script: Arc<Script>,
    /// Whether the bot's allow gate lets the bridge in.
    allowed: Arc<AtomicBool>,
    payer: Arc<PayerState>,
    bridge: Bridge,
    bot: PeerId,
    _bot_router: brmcp::adapters::Router,
    _dir: tempfile::TempDir,
    _fabric: Fabric,
}

async fn setup(answers: &[Answer], mode: Mode) -> Setup {
    setup_with(answers, mode, |c| c, RouterConfig::client()).await
}

/// An answer bound and a silence probe short enough for a test.
const BOUND: Duration = Duration::from_secs(3);
const PROBE: Duration = Duration::from_millis(500);

async fn setup_quick(answers: &[Answer]) -> Setup {
    let mut router = RouterConfig::client();
    router.silence_probe = Some(PROBE);
    setup_with(
        answers,
        Mode::Autopay,
        |mut c| {
            c.answer_bound = BOUND;
            c
        },
        router,
    )
    .await
}

async fn setup_with(
    answers: &[Answer],
    mode: Mode,
    config: impl FnOnce(Config) -> Config,
    router: RouterConfig,
) -> Setup {
    let fabric = Fabric::new(23);
    let (bot, bridge_id) = (uid(1), uid(2));
    let script = Arc::new(Script::default());
    *script.answers.lock().unwrap() = answers.iter().copied().collect();
    let allowed = Arc::new(AtomicBool::new(true));
    let gate = allowed.clone();
    let bot_router = fabric.router(
        bot,
        RouterConfig::server().with_authorizer(move |_: &PeerId| gate.load(SeqCst)),
    );
    let handler = Bot(script.clone());
    bot_router.serve(move |_: &PeerId| handler.clone());
    let payer = PayerState::new(Arc::default(), bridge_id, PayMode::NeverCredit);
    let dir = tempfile::tempdir().unwrap();
    let bridge = Bridge::new(
        config(base_config(dir.path())),
        fabric.router(bridge_id, router),
        TestPayer(payer.clone()),
    )
    .unwrap();
    let mut settings = autopay(bot);
    settings.mode = mode;
    settings.approval_timeout_secs = 60;
    bridge.apply_settings(settings).await.unwrap();
    Setup {
        script,
        allowed,
        payer,
        bridge,
        bot,
        _bot_router: bot_router,
        _dir: dir,
        _fabric: fabric,
    }
}

fn keys(script: &Script) -> Vec<Option<String>> {
    script.keys.lock().unwrap().clone()
}

#[tokio::test]
async fn an_interrupted_call_is_retried_under_its_key_while_the_agent_waits() {
    let s = setup(&[Answer::Interrupted], Mode::Autopay).await;
    let agent = connect(&s.bridge, s.bot, ()).await;
    let result = agent
        .call_tool(CallToolRequestParams::new("slow"))
        .await
        .expect("the retry's outcome reaches the agent");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let keys = keys(&s.script);
    assert_eq!(keys.len(), 2, "one retry: {keys:?}");
    assert!(
        keys[0].is_some() && keys[0] == keys[1],
        "same call key: {keys:?}"
    );
    assert_eq!(s.payer.count(), 0, "the refund is credit: nothing paid");
    agent.cancel().await.unwrap();
}

/// The agent's call of `slow`, given up after `timeout` (rmcp then tells the bridge it
/// is cancelled).
async fn timed_out(agent: &crate::common::Agent, timeout: Duration) {
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("slow")));
    let mut options = PeerRequestOptions::no_options();
    options.timeout = Some(timeout);
    let handle = agent
        .peer()
        .send_request_with_option(request, options)
        .await
        .unwrap();
    let outcome = handle.await_response().await;
    assert!(
        matches!(outcome, Err(ServiceError::Timeout { .. })),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_retry_after_interrupted_gives_the_bot_time_to_come_back() {
    let s = setup(&[Answer::Interrupted], Mode::Autopay).await;
    let agent = connect(&s.bridge, s.bot, ()).await;
    let result = agent
        .call_tool(CallToolRequestParams::new("slow"))
        .await
        .expect("the retry's outcome");
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let times = s.script.times.lock().unwrap().clone();
    assert_eq!(times.len(), 2);
    // A bot that is stopping answers every call so; one retried at once finds it
    // still stopping.
    assert!(
        times[1] - times[0] >= Duration::from_millis(900),
        "retried after {:?}",
        times[1] - times[0]
    );
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn an_agent_that_leaves_during_the_pause_is_not_retried_for() {
    let s = setup(&[Answer::Interrupted], Mode::Autopay).await;
    let agent = connect(&s.bridge, s.bot, ()).await;
    // The agent gives up while the bridge pauses before its retry.
    timed_out(&agent, Duration::from_millis(300)).await;
    assert_eq!(keys(&s.script).len(), 1, "sent once");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(keys(&s.script).len(), 1, "no retry for an agent that left");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_bot_that_always_says_interrupted_is_believed_a_bounded_number_of_times() {
    let s = setup(&[Answer::Interrupted; 20], Mode::Autopay).await;
    let agent = connect(&s.bridge, s.bot, ()).await;
    let error = agent
        .call_tool(CallToolRequestParams::new("slow"))
        .await
        .expect_err("the bot's error reaches the agent in the end");
    let ServiceError::McpError(error) = error else {
        panic!("a JSON-RPC error, not {error:?}");
    };
    assert_eq!(error.code, CALL_INTERRUPTED, "{error:?}");
    // The first send and MAX_INTERRUPTED_RETRIES (3) retries, all under one key.
    let keys = keys(&s.script);
    assert_eq!(keys.len(), 4, "{keys:?}");
    assert!(
        keys.iter().all(|k| k.is_some() && *k == keys[0]),
        "{keys:?}"
    );
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn an_agent_that_times_out_ends_its_call_at_the_bot() {
    let s = setup(&[Answer::Hold], Mode::Autopay).await;
    let agent = connect(&s.bridge, s.bot, ()).await;
    timed_out(&agent, Duration::from_secs(1)).await;
    let script = s.script.clone();
    assert!(
        eventually(Duration::from_secs(20), || *script
            .cancelled
            .lock()
            .unwrap()
            == 1)
        .await,
        "the bot was told the call is cancelled"
    );
    // Nothing comes after: no reissue, no payment.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(keys(&s.script).len(), 1);
    assert_eq!(s.payer.count(), 0);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn nothing_is_paid_for_a_call_cancelled_while_its_payment_waits_for_approval() {
    let s = setup(&[Answer::Quote], Mode::Approval).await;
    let mut parked = s.bridge.subscribe_payments();
    let agent = connect(&s.bridge, s.bot, ()).await;
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("slow")));
    let handle = agent
        .peer()
        .send_request_with_option(request, PeerRequestOptions::no_options())
        .await
        .unwrap();
    let pending = tokio::time::timeout(Duration::from_secs(20), parked.recv())
        .await
        .expect("the payment is parked for approval")
        .unwrap();
    handle
        .cancel(Some("the agent gave up".into()))
        .await
        .unwrap();
    // The user approves after the agent left: nothing is paid, nothing reissued.
    let bridge = s.bridge.clone();
    assert!(
        eventually(Duration::from_secs(20), || {
            !bridge.pending_payments().iter().any(|p| p.id == pending.id)
        })
        .await,
        "the parked payment went with its call"
    );
    assert!(!s.bridge.resolve_payment(&pending.id, true));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(s.payer.count(), 0, "nothing paid");
    assert_eq!(keys(&s.script).len(), 1, "nothing reissued");
    assert_eq!(
        s.bridge.spend_log().unwrap().0.len(),
        0,
        "nothing in the spend log"
    );
    agent.cancel().await.unwrap();
}

/// An agent that records the progress it hears.
#[derive(Clone, Default)]
struct Heard(Arc<Mutex<Vec<String>>>);

impl rmcp::ClientHandler for Heard {
    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0
            .lock()
            .unwrap()
            .push(params.message.unwrap_or_default());
    }
}

/// `slow` with a progress token.
fn slow_with_progress() -> ClientRequest {
    let mut request = CallToolRequest::new(CallToolRequestParams::new("slow"));
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.set_progress_token(rmcp::model::ProgressToken(
        rmcp::model::NumberOrString::String("agent-token".into()),
    ));
    request.params.meta = Some(meta);
    ClientRequest::CallToolRequest(request)
}

#[tokio::test]
async fn a_bot_running_a_call_silently_is_not_cut_and_the_agent_hears_what_it_waits_for() {
    // The bot says nothing for longer than the bound, but answers the session's pings.
    let s = setup_quick(&[Answer::Sleep(BOUND.as_secs() + 5)]).await;
    // Named by the user, the bot is shown by its name (and uid).
    let named = s.bridge.settings().with_bot("oracle", s.bot).unwrap();
    s.bridge.apply_settings(named).await.unwrap();
    let heard = Heard::default();
    let agent = connect(&s.bridge, s.bot, heard.clone()).await;
    let handle = agent
        .peer()
        .send_request_with_option(slow_with_progress(), PeerRequestOptions::no_options())
        .await
        .unwrap();
    let result = handle
        .await_response()
        .await
        .expect("the call's own answer");
    let rmcp::model::ServerResult::CallToolResult(result) = result else {
        panic!("a tool result: {result:?}");
    };
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let messages = heard.0.lock().unwrap().clone();
    let expected = format!("waiting for an answer from bot \"oracle\" ({})", s.bot);
    assert!(
        !messages.is_empty() && messages.iter().all(|m| *m == expected),
        "{messages:?}"
    );
    assert_eq!(keys(&s.script).len(), 1);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_bot_that_stops_answering_this_client_fails_the_call_within_the_bound_with_the_reason() {
    let s = setup_quick(&[Answer::Ran, Answer::Ran]).await;
    let agent = connect(&s.bridge, s.bot, ()).await;
    agent
        .call_tool(CallToolRequestParams::new("slow"))
        .await
        .expect("allowed: the call runs");
    // The bot's operator removes this client from its allowlist: the bot drops
    // everything from it, pings included.
    s.allowed.store(false, SeqCst);
    let started = tokio::time::Instant::now();
    let error = tokio::time::timeout(
        BOUND * 4,
        agent.call_tool(CallToolRequestParams::new("slow")),
    )
    .await
    .expect("an answer within the bound, not the request timeout")
    .expect_err("an error");
    let ServiceError::McpError(error) = error else {
        panic!("a JSON-RPC error, not {error:?}");
    };
    let message = error.message.to_string();
    assert!(
        message.contains(&s.bot.to_string()),
        "names the bot: {message}"
    );
    assert!(message.contains("never answered"), "{message}");
    assert!(message.contains("does not allow this client"), "{message}");
    assert!(started.elapsed() >= BOUND, "not before the bound");
    // The call was not re-sent: the bot saw the first call only (the second was
    // dropped at its gate).
    assert_eq!(keys(&s.script).len(), 1);
    assert_eq!(s.payer.count(), 0);
    agent.cancel().await.unwrap();
}
