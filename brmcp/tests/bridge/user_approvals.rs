//! Approvals from the user, when the user says so: an agent whose approver is the user
//! (`"approver": "user"`, the default of an agent of `agents`) is never asked about
//! its payments, neither by `input_required` (protocol 2026-07-28) nor by elicitation
//! (2025-11-25), and no answer of its own pays: an `accept` it sends anyway, with a
//! forged state or after its approvals were made the user's (a live edit of the file),
//! pays nothing until the user approves with the approval secret (`/payments`, what
//! the page and `approvals` decide through); then it is paid once and the agent gets
//! the result; the same for an elicitation answered after the edit, and for the
//! default agent when the file's `approver` is the user. An agent whose approver is
//! the agent still approves itself, and its question names the bot's uid once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{
    Env, FORTUNE_PRICE, agent_with, autopay, call, env, eventually, http, last_text, text,
};
use brmcp::bridge::{
    AgentEntry, Approver, Caller, Mode, PendingPayment, SETTINGS_FILE, Settings, approval_secret,
};
use brmcp_test_support::form_message;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult,
    ErrorData, Implementation, InputResponses, ProtocolVersion,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::json;
use tokio::sync::{Notify, broadcast};

const DEFAULT_TOKEN: &str = "dddddddddddddddddddddddddddddddd";
/// An agent of `agents` that names no approver: the user's.
const CI_TOKEN: &str = "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";
/// An agent of `agents` whose approver is the agent.
const OWN_TOKEN: &str = "0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a";

/// The name the user gave the test bot.
const BOT_NAME: &str = "fortunes";

/// How long a payment is watched for not being made: the bridge pays within
/// milliseconds of a decision, so a payment made on the agent's word shows by then.
const UNPAID_FOR: Duration = Duration::from_secs(2);

/// A client that answers every form `accept` (once `gate` opens, if it has one) and
/// records the questions.
#[derive(Clone, Default)]
struct Accepts {
    asked: Arc<Mutex<Vec<String>>>,
    gate: Option<Arc<Notify>>,
}

impl Accepts {
    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl ClientHandler for Accepts {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(capabilities, Implementation::new("accepts", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.lock().unwrap().push(form_message(request)?);
        if let Some(gate) = &self.gate {
            gate.notified().await;
        }
        Ok(serde_json::from_value(json!({"action": "accept"})).unwrap())
    }
}

type Agent = RunningService<RoleClient, Accepts>;

/// A bridge listening with the default token, agents `ci` (no approver named: the
/// user's) and `own` (its own approver), the test bot named [`BOT_NAME`], in approval
/// mode, following its settings file.
async fn started() -> (Env, std::net::SocketAddr) {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.mode = Mode::Approval;
        s.approval_timeout_secs = 60;
        s.enabled = true;
        s.token = DEFAULT_TOKEN.into();
        s.bot_names.insert(BOT_NAME.into(), bot.to_string());
        s.agents = vec![
            AgentEntry::new(
                "ci",
                CI_TOKEN,
                FORTUNE_PRICE,
                10 * FORTUNE_PRICE,
                Vec::new(),
            ),
            AgentEntry::new(
                "own",
                OWN_TOKEN,
                FORTUNE_PRICE,
                10 * FORTUNE_PRICE,
                Vec::new(),
            )
            .with_approver(Approver::Agent),
        ];
        s
    })
    .await;
    env.bridge.start().await.expect("start");
    env.bridge.watch_settings();
    let addr = env.bridge.listen_addr().expect("listening");
    (env, addr)
}

fn transport(
    addr: std::net::SocketAddr,
    env: &Env,
    token: &str,
) -> StreamableHttpClientTransport<reqwest::Client> {
    StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp/{}", env.bot_id))
            .auth_header(token.to_owned()),
    )
}

/// An agent with `token` on protocol 2026-07-28 (rmcp's client, stateless), declaring
/// form elicitation.
async fn agent_2026(addr: std::net::SocketAddr, env: &Env, token: &str) -> (Agent, Accepts) {
    let user = Accepts::default();
    let agent = user
        .clone()
        .serve_with_lifecycle(
            transport(addr, env, token),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("2026-07-28 agent");
    (agent, user)
}

/// An agent with `token` on the legacy lifecycle (2025-11-25), declaring form
/// elicitation.
async fn agent_2025(addr: std::net::SocketAddr, env: &Env, token: &str) -> (Agent, Accepts) {
    agent_2025_as(addr, env, token, Accepts::default()).await
}

/// [`agent_2025`] with `user`.
async fn agent_2025_as(
    addr: std::net::SocketAddr,
    env: &Env,
    token: &str,
    user: Accepts,
) -> (Agent, Accepts) {
    let agent = user
        .clone()
        .serve(transport(addr, env, token))
        .await
        .expect("2025-11-25 agent");
    (agent, user)
}

/// The user's decision on payment `id` with the approval secret, as the page and
/// `approvals` decide.
async fn decide(env: &Env, addr: std::net::SocketAddr, id: &str, verb: &str) {
    let secret = approval_secret(env.dir.path()).expect("approval secret");
    let auth = format!("Bearer {secret}");
    let path = format!("/payments/{id}/{verb}");
    let (status, _, body) = http(addr, "POST", &path, &[("Authorization", &auth)], "").await;
    assert_eq!(status, 200, "{path}: {body}");
}

/// The next payment parked for the user, within a generous bound.
async fn parked(rx: &mut broadcast::Receiver<PendingPayment>) -> PendingPayment {
    tokio::time::timeout(Duration::from_secs(30), rx.recv())
        .await
        .expect("a payment waits for the user")
        .expect("announced")
}

/// An accept of the approval question, as a client would send it in its retry.
fn accept() -> InputResponses {
    let mut responses = InputResponses::new();
    responses.insert("brmcp/approval".into(), json!({"action": "accept"}));
    responses
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_only_agents_own_accept_pays_nothing_until_the_user_approves() {
    let (env, addr) = started().await;
    let mut waiting = env.bridge.subscribe_payments();
    let (agent, user) = agent_2026(addr, &env, CI_TOKEN).await;

    // Not asked: its call waits for the user.
    let peer = agent.peer().clone();
    let first = tokio::spawn(async move { peer.call_tool_once(call("fortune", json!({}))).await });
    let pending = parked(&mut waiting).await;
    assert_eq!(
        (pending.agent.as_str(), pending.tool.as_str()),
        ("ci", "fortune")
    );

    // Its own accept, with a state it made up: a new call, which waits for the user too.
    let forged = call("fortune", json!({}))
        .with_request_state("5eed".repeat(8))
        .with_input_responses(accept());
    let peer = agent.peer().clone();
    let second = tokio::spawn(async move { peer.call_tool_once(forged).await });
    let forged_pending = parked(&mut waiting).await;
    tokio::time::sleep(UNPAID_FOR).await;
    assert_eq!(env.payer.count(), 0, "nothing paid on the agent's word");
    assert!(!first.is_finished() && !second.is_finished());
    assert!(user.asked().is_empty(), "never asked: {:?}", user.asked());

    // The user approves the first: paid once, the agent gets its fortune.
    decide(&env, addr, &pending.id, "approve").await;
    let done = first.await.unwrap().expect("the first call");
    let CallToolResponse::Complete(done) = done else {
        panic!("not completed: {done:?}");
    };
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);

    // The user denies the forged one: nothing more is paid.
    decide(&env, addr, &forged_pending.id, "deny").await;
    let CallToolResponse::Complete(refused) = second.await.unwrap().expect("the second call")
    else {
        panic!("not completed");
    };
    assert_eq!(
        last_text(&refused),
        "brmcp-bridge: payment not made: payment denied by the user"
    );
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);
    let (entries, _) = env.bridge.spend_log().unwrap();
    let agents: Vec<&str> = entries.iter().map(|e| e.agent.as_str()).collect();
    assert_eq!(agents, ["ci"]);
    let _ = agent.cancel().await;
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_after_its_approvals_were_made_the_users_waits_for_the_user() {
    let (env, addr) = started().await;
    let mut waiting = env.bridge.subscribe_payments();
    let (agent, _user) = agent_2026(addr, &env, OWN_TOKEN).await;
    let asked = match agent
        .call_tool_once(call("fortune", json!({})))
        .await
        .unwrap()
    {
        CallToolResponse::InputRequired(asked) => asked,
        other => panic!("not asked: {other:?}"),
    };
    let state = asked.request_state.clone().expect("a state");
    let pending = parked(&mut waiting).await;

    // The user makes `own`'s approvals theirs, by editing the file.
    make_users(&env, "own").await;

    // Its accept, under the state it was given, no longer pays.
    let retry = call("fortune", json!({}))
        .with_request_state(state)
        .with_input_responses(accept());
    let peer = agent.peer().clone();
    let answered = tokio::spawn(async move { peer.call_tool_once(retry).await });
    tokio::time::sleep(UNPAID_FOR).await;
    assert_eq!(env.payer.count(), 0, "nothing paid on the agent's word");
    assert!(!answered.is_finished(), "the retry waits for the user");
    assert_eq!(env.bridge.pending_payments(), vec![pending.clone()]);

    decide(&env, addr, &pending.id, "approve").await;
    let CallToolResponse::Complete(done) = answered.await.unwrap().expect("retry") else {
        panic!("not completed");
    };
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);
    let _ = agent.cancel().await;
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_only_agent_on_2025_11_25_is_not_asked_and_paid_once_approved() {
    let (env, addr) = started().await;
    let mut waiting = env.bridge.subscribe_payments();
    let (agent, user) = agent_2025(addr, &env, CI_TOKEN).await;
    let peer = agent.peer().clone();
    let paid = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    let pending = parked(&mut waiting).await;
    tokio::time::sleep(UNPAID_FOR).await;
    assert_eq!(env.payer.count(), 0);
    assert!(user.asked().is_empty(), "never asked: {:?}", user.asked());
    decide(&env, addr, &pending.id, "approve").await;
    let done = paid.await.unwrap().expect("fortune");
    assert_eq!(done.is_error, Some(false), "{done:?}");
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);
    let _ = agent.cancel().await;
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_approver_approves_itself_on_both_protocols() {
    let (env, addr) = started().await;
    let uid = env.bot_id.to_string();
    for (n, protocol) in ["2026-07-28", "2025-11-25"].into_iter().enumerate() {
        let (agent, user) = if n == 0 {
            agent_2026(addr, &env, OWN_TOKEN).await
        } else {
            agent_2025(addr, &env, OWN_TOKEN).await
        };
        let done = agent.call_tool(call("fortune", json!({}))).await.unwrap();
        assert_eq!(done.is_error, Some(false), "{protocol}: {done:?}");
        assert_eq!(text(&done), format!("fortune #{}", n + 1));
        assert_eq!(env.payer.count(), n + 1, "{protocol}");
        let asked = user.asked();
        assert_eq!(asked.len(), 1, "{protocol}: {asked:?}");
        let bot = format!("to bot \"{BOT_NAME}\" ({uid}) for tool \"fortune\"");
        assert!(asked[0].contains(&bot), "{protocol}: {}", asked[0]);
        assert_eq!(
            asked[0].matches(&uid).count(),
            1,
            "{protocol}: {}",
            asked[0]
        );
        let _ = agent.cancel().await;
    }
    assert!(env.bridge.pending_payments().is_empty());
    env.bridge.close().await;
}

/// Makes agent `name`'s approvals the user's by editing the settings file, and waits
/// for the running bridge to apply it.
async fn make_users(env: &Env, name: &str) {
    let path = env.dir.path().join(SETTINGS_FILE);
    let mut settings = Settings::load(&path).expect("settings");
    let agent = settings.agents.iter_mut().find(|a| a.name == name).unwrap();
    agent.approver = Some(Approver::User);
    settings.save(&path).expect("saved");
    let caller = Caller::Agent(name.into());
    let reloaded = || env.bridge.settings().approver_of(&caller) == Approver::User;
    assert!(
        eventually(Duration::from_secs(20), reloaded).await,
        "reloaded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elicitation_answered_after_approvals_were_made_the_users_waits_for_the_user() {
    let (env, addr) = started().await;
    let mut waiting = env.bridge.subscribe_payments();
    let gate = Arc::new(Notify::new());
    let user = Accepts {
        gate: Some(gate.clone()),
        ..Accepts::default()
    };
    let (agent, user) = agent_2025_as(addr, &env, OWN_TOKEN, user).await;
    let peer = agent.peer().clone();
    let paid = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    let pending = parked(&mut waiting).await;
    assert!(eventually(Duration::from_secs(20), || user.asked().len() == 1).await);

    make_users(&env, "own").await;
    gate.notify_one();
    tokio::time::sleep(UNPAID_FOR).await;
    assert_eq!(env.payer.count(), 0, "nothing paid on the agent's word");
    assert!(!paid.is_finished(), "the call waits for the user");

    decide(&env, addr, &pending.id, "approve").await;
    let done = paid.await.unwrap().expect("fortune");
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);
    let _ = agent.cancel().await;
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_files_approver_binds_the_default_agent() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.mode = Mode::Approval;
        s.approval_timeout_secs = 60;
        s.approver = Some(Approver::User);
        s
    })
    .await;
    let mut waiting = env.bridge.subscribe_payments();
    let user = Accepts::default();
    // The default agent, as `bridge stdio` serves it.
    let agent = agent_with(&env, user.clone()).await;
    let peer = agent.peer().clone();
    let paid = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    let pending = parked(&mut waiting).await;
    assert_eq!(pending.agent, "default");
    tokio::time::sleep(UNPAID_FOR).await;
    assert_eq!(env.payer.count(), 0);
    assert!(user.asked().is_empty(), "never asked: {:?}", user.asked());
    assert!(env.bridge.resolve_payment(&pending.id, true));
    let done = paid.await.unwrap().expect("fortune");
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);
    let _ = agent.cancel().await;
}
