//! Agents on protocol 2026-07-28 (rmcp's client, stateless lifecycle), which cannot be
//! sent requests: the approval of a payment and a bot's own elicitation reach them as
//! `input_required`, answered by retrying the call. Accept pays once under the call's
//! key; decline pays nothing; a forged or replayed `requestState` pays nothing; the
//! approvals command still decides while the agent is asked; a bot's elicitation is
//! answered through the retry and the bot's one call goes on (its sampling and roots
//! requests too), and one left unanswered past the hold gets an error at the bot. A retry given
//! up while its payment settles leaves the call held: the next retry gets the paid call,
//! paid once. A bot's elicitation during `prompts/get` or `resources/read` reaches the
//! agent the same way, its answer (accept or decline) the bot's one request; a replayed
//! or another read's state is a new request, one unanswered past the hold an error at
//! the bot; agents on 2025-11-25 are asked directly.

#![allow(deprecated)] // sampling is SEP-2577-deprecated; still relayed

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{
    Agent, Env, FORTUNE_PRICE, agent_with, autopay, call, env, env_with, eventually, last_text,
    text,
};
use brmcp::bridge::Mode;
use brmcp_test_support::form_message;
use rmcp::model::{
    CallToolResponse, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
    CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, ErrorData,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation, InputRequest,
    InputRequiredResult, InputResponses, ListRootsResult, ProtocolVersion,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents,
    SamplingMessage,
};
use rmcp::service::RequestContext;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient};
use serde_json::{Value, json};

mod reads;

/// The user at a 2026-07-28 agent: answers every form with `action` (and `content`),
/// and records the questions.
#[derive(Clone)]
struct User {
    action: ElicitationAction,
    content: Option<Value>,
    /// Whether the client declares elicitation.
    declares: bool,
    /// Whether the client declares sampling.
    samples: bool,
    /// The client's roots, declared if any.
    roots: Vec<&'static str>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl User {
    fn answering(action: ElicitationAction) -> Self {
        Self {
            action,
            content: None,
            declares: true,
            samples: false,
            roots: Vec::new(),
            asked: Arc::default(),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl ClientHandler for User {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = json!({});
        if self.declares {
            capabilities["elicitation"] = json!({"form": {}});
        }
        if self.samples {
            capabilities["sampling"] = json!({});
        }
        if !self.roots.is_empty() {
            capabilities["roots"] = json!({});
        }
        let capabilities: ClientCapabilities = serde_json::from_value(capabilities).unwrap();
        ClientConfig::new(capabilities, Implementation::new("user-2026", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.lock().unwrap().push(form_message(request)?);
        let mut answer = json!({"action": self.action});
        if let Some(content) = &self.content {
            answer["content"] = content.clone();
        }
        Ok(serde_json::from_value(answer).unwrap())
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let roots: Vec<Value> = self.roots.iter().map(|uri| json!({"uri": uri})).collect();
        Ok(serde_json::from_value(json!({"roots": roots})).unwrap())
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let asked = serde_json::to_value(&params.messages[0]).unwrap()["content"]["text"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        self.asked.lock().unwrap().push(asked.clone());
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(format!("42 ({asked})")),
            "test-model".into(),
        ))
    }
}

/// An agent on the stateless 2026-07-28 lifecycle, on the bridge's proxy of the test
/// bot over an in-memory pipe.
async fn agent_2026(env: &Env, user: User) -> Agent<User> {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let (bridge, bot) = (env.bridge.clone(), env.bot_id);
    tokio::spawn(async move {
        if let Err(e) = bridge.serve(&bot, server_end).await {
            eprintln!("bridge serve ended: {e}");
        }
    });
    user.serve_with_lifecycle(
        client_end,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .expect("discover")
}

async fn approval_env() -> Env {
    env(|bot| {
        let mut s = autopay(bot);
        s.mode = Mode::Approval;
        s.approval_timeout_secs = 30;
        s
    })
    .await
}

/// The keys the bot saw `fortune` called with: every one the same, and how many.
fn one_key(env: &Env) -> usize {
    let keys = env.bot.calls_of("fortune");
    assert!(keys[0].is_some(), "{keys:?}");
    assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
    keys.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accept_pays_once_and_returns_the_result() {
    let env = approval_env().await;
    let user = User::answering(ElicitationAction::Accept);
    let agent = agent_2026(&env, user.clone()).await;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{r:?}");
    assert_eq!(text(&r), "fortune #1");
    let asked = user.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    let question = &asked[0];
    for part in [
        &env.bot_id.to_string(),
        "\"fortune\"",
        &format!("{FORTUNE_PRICE} atoms"),
        "0.00000500 DCR",
    ] {
        assert!(question.contains(part), "{part} not in {question}");
    }
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);
    assert_eq!(
        one_key(&env),
        2,
        "the quote, then the paid call, under one key"
    );
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (1, FORTUNE_PRICE), "{entries:?}");
    assert!(env.bridge.pending_payments().is_empty());
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decline_and_cancel_pay_nothing() {
    let env = approval_env().await;
    for (action, reason) in [
        (ElicitationAction::Decline, "payment declined by the user"),
        (
            ElicitationAction::Cancel,
            "payment approval cancelled by the user",
        ),
    ] {
        let user = User::answering(action);
        let agent = agent_2026(&env, user.clone()).await;
        let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
        assert_eq!(r.is_error, Some(true), "{r:?}");
        assert_eq!(
            last_text(&r),
            format!("brmcp-bridge: payment not made: {reason}")
        );
        assert_eq!(user.asked().len(), 1);
        assert!(env.bridge.pending_payments().is_empty(), "unparked");
        agent.cancel().await.unwrap();
    }
    assert_eq!(env.payer.count(), 0);
    assert_eq!(env.bot.executions("fortune"), 0);
    assert_eq!(env.bridge.spend_log().unwrap().0.len(), 0);
}

/// The first round of a call of `tool` by hand: its `input_required`.
async fn asked_by(agent: &Agent<User>, tool: &'static str) -> InputRequiredResult {
    match agent.call_tool_once(call(tool, json!({}))).await.unwrap() {
        CallToolResponse::InputRequired(r) => r,
        other => panic!("not asked: {other:?}"),
    }
}

/// The first round of a `fortune` call by hand: its `input_required`.
async fn first_round(agent: &Agent<User>) -> InputRequiredResult {
    asked_by(agent, "fortune").await
}

/// Waits for the bot's request to get its error past the hold, unanswered.
async fn bot_request_expires(env: &Env) {
    let errored = || !env.bot.elicit_errors.lock().unwrap().is_empty();
    assert!(eventually(Duration::from_secs(5), errored).await);
    let errors = env.bot.elicit_errors.lock().unwrap().clone();
    assert!(errors[0].contains("did not answer"), "{errors:?}");
}

/// A user whose client declares no elicitation.
fn undeclared() -> User {
    User {
        declares: false,
        ..User::answering(ElicitationAction::Accept)
    }
}

/// The approval key of an `input_required` and a response to it with `action`.
fn respond(asked: &InputRequiredResult, action: &str) -> InputResponses {
    let requests = asked.input_requests.as_ref().expect("input requests");
    assert_eq!(requests.len(), 1);
    let (key, request) = requests.iter().next().unwrap();
    assert!(
        matches!(request, InputRequest::Elicitation(_)),
        "{request:?}"
    );
    let mut responses = InputResponses::new();
    responses.insert(key.clone(), json!({"action": action}));
    responses
}

/// A retry of `fortune` with `state` and `responses`.
/// The one `bot/...` key of a bot's `input_required` and an accept naming `name`.
fn answer_bot(asked: &InputRequiredResult, name: &str) -> InputResponses {
    let requests = asked.input_requests.as_ref().expect("input requests");
    assert_eq!(requests.len(), 1, "{requests:?}");
    let (key, _) = requests.iter().next().unwrap();
    let mut responses = InputResponses::new();
    responses.insert(
        key.clone(),
        json!({"action": "accept", "content": {"name": name}}),
    );
    responses
}

async fn retry(agent: &Agent<User>, state: &str, responses: InputResponses) -> CallToolResponse {
    let params = call("fortune", json!({}))
        .with_request_state(state)
        .with_input_responses(responses);
    agent.call_tool_once(params).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_replayed_states_pay_nothing() {
    let env = approval_env().await;
    let agent = agent_2026(&env, User::answering(ElicitationAction::Accept)).await;
    let asked = first_round(&agent).await;
    let state = asked.request_state.clone().expect("a state");
    let accept = respond(&asked, "accept");

    // A forged state with an accept: a new call, asked again; nothing paid.
    let forged = "0".repeat(state.len());
    let again = retry(&agent, &forged, accept.clone()).await;
    let CallToolResponse::InputRequired(again) = again else {
        panic!("a forged state was taken: {again:?}");
    };
    assert_ne!(again.request_state.as_deref(), Some(state.as_str()));
    assert_ne!(again.request_state.as_deref(), Some(forged.as_str()));
    assert_eq!(env.payer.count(), 0);

    // Another tool's retry with the right state is not this call's.
    let other = call("quote", json!({"n": 3}))
        .with_request_state(&state)
        .with_input_responses(accept.clone());
    let other = agent.call_tool_once(other).await.unwrap();
    assert!(
        matches!(other, CallToolResponse::InputRequired(_)),
        "{other:?}"
    );
    assert_eq!(env.payer.count(), 0);

    // The real state pays once and returns the result.
    let CallToolResponse::Complete(done) = retry(&agent, &state, accept.clone()).await else {
        panic!("not completed");
    };
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);

    // Replayed: a new call, asked again; nothing more paid or run.
    let replayed = retry(&agent, &state, accept).await;
    assert!(
        matches!(replayed, CallToolResponse::InputRequired(_)),
        "{replayed:?}"
    );
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);

    // The payments still asked about are refused from the approvals queue.
    for pending in env.bridge.pending_payments() {
        assert!(env.bridge.resolve_payment(&pending.id, false));
    }
    assert!(
        eventually(Duration::from_secs(5), || env
            .bridge
            .pending_payments()
            .is_empty())
        .await
    );
    assert_eq!(env.payer.count(), 1);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (1, FORTUNE_PRICE), "{entries:?}");
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approvals_queue_decides_while_the_agent_is_asked() {
    let env = approval_env().await;
    let mut parked = env.bridge.subscribe_payments();
    let agent = agent_2026(&env, User::answering(ElicitationAction::Decline)).await;
    let asked = first_round(&agent).await;
    let pending = parked.recv().await.unwrap();
    assert_eq!(
        (pending.tool.as_str(), pending.atoms),
        ("fortune", FORTUNE_PRICE)
    );
    assert!(env.bridge.resolve_payment(&pending.id, true));
    assert!(eventually(Duration::from_secs(5), || env.payer.count() == 1).await);

    // The agent's decline comes after the decision: the paid call completes.
    let state = asked.request_state.clone().unwrap();
    let CallToolResponse::Complete(done) = retry(&agent, &state, respond(&asked, "decline")).await
    else {
        panic!("not completed");
    };
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);
    assert_eq!(one_key(&env), 2);
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bots_elicitation_reaches_the_agent_and_its_answer_the_bot() {
    let env = env(autopay).await;
    let mut user = User::answering(ElicitationAction::Accept);
    user.content = Some(json!({"name": "ada"}));
    let agent = agent_2026(&env, user.clone()).await;
    let r = agent
        .call_tool(call("elicit", json!({"times": 2})))
        .await
        .unwrap();
    assert_eq!(
        text(&r),
        r#"user said: "accept" {"name":"ada"}; "accept" {"name":"ada"}"#
    );
    assert_eq!(
        user.asked(),
        vec!["your name? (1 of 2)", "your name? (2 of 2)"]
    );
    assert_eq!(env.bot.calls_of("elicit").len(), 1, "one call to the bot");
    assert_eq!(env.bot.executions("elicit"), 1);

    // An agent that declared no elicitation is not asked: the bot hears so.
    let plain = agent_2026(&env, undeclared()).await;
    let r = plain.call_tool(call("elicit", json!({}))).await.unwrap();
    assert!(text(&r).starts_with("no elicitation:"), "{}", text(&r));
    agent.cancel().await.unwrap();
    plain.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bots_elicitation_state_is_not_replayable() {
    let env = env(autopay).await;
    let agent = agent_2026(&env, User::answering(ElicitationAction::Accept)).await;
    let asked = asked_by(&agent, "elicit").await;
    let state = asked.request_state.clone().unwrap();
    let responses = answer_bot(&asked, "bo");
    let answer = |state: &str, responses: InputResponses| {
        call("elicit", json!({}))
            .with_request_state(state)
            .with_input_responses(responses)
    };
    let done = agent
        .call_tool_once(answer(&state, responses.clone()))
        .await
        .unwrap();
    let CallToolResponse::Complete(done) = done else {
        panic!("not completed: {done:?}");
    };
    assert_eq!(text(&done), r#"user said: "accept" {"name":"bo"}"#);
    // Replayed: a new call at the bot, which asks again.
    let replayed = agent
        .call_tool_once(answer(&state, responses))
        .await
        .unwrap();
    assert!(
        matches!(replayed, CallToolResponse::InputRequired(_)),
        "{replayed:?}"
    );
    assert_eq!(env.bot.calls_of("elicit").len(), 2);
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_bot_request_expires_with_an_error_at_the_bot() {
    let env = env_with(autopay, |mut c| {
        c.input_hold = Duration::from_millis(300);
        c
    })
    .await;
    let agent = agent_2026(&env, User::answering(ElicitationAction::Accept)).await;
    let asked = asked_by(&agent, "elicit").await;
    assert!(env.bot.elicit_errors.lock().unwrap().is_empty());
    // No retry: past the hold the bot's request gets its error.
    bot_request_expires(&env).await;

    // The expired state's retry is a new call, which the bot asks again.
    let responses = answer_bot(&asked, "late");
    let late = call("elicit", json!({}))
        .with_request_state(asked.request_state.unwrap())
        .with_input_responses(responses);
    let late = agent.call_tool_once(late).await.unwrap();
    assert!(
        matches!(late, CallToolResponse::InputRequired(_)),
        "{late:?}"
    );
    assert_eq!(env.bot.calls_of("elicit").len(), 2);
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bots_sampling_request_reaches_the_agent_and_its_answer_the_bot() {
    let env = env(autopay).await;
    let user = User {
        samples: true,
        ..User::answering(ElicitationAction::Accept)
    };
    let agent = agent_2026(&env, user.clone()).await;
    let r = agent
        .call_tool(call("sample", json!({"prompt": "meaning?"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "model said: 42 (meaning?)");
    assert_eq!(user.asked(), vec!["meaning?"]);
    assert_eq!(env.bot.calls_of("sample").len(), 1, "one call to the bot");

    // Without sampling declared, the bot's request is refused and the bot says so.
    let plain = agent_2026(&env, User::answering(ElicitationAction::Accept)).await;
    let r = plain
        .call_tool(call("sample", json!({"prompt": "meaning?"})))
        .await
        .unwrap();
    assert!(text(&r).starts_with("no sampling:"), "{}", text(&r));
    agent.cancel().await.unwrap();
    plain.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_given_up_while_paying_leaves_the_call_for_the_next() {
    let env = approval_env().await;
    *env.payer.mode.lock().unwrap() = crate::common::PayMode::Slow(Duration::from_millis(800));
    let agent = agent_2026(&env, User::answering(ElicitationAction::Accept)).await;
    let asked = first_round(&agent).await;
    let state = asked.request_state.clone().unwrap();
    let accept = respond(&asked, "accept");

    // The retry is given up (its request cancelled) while the tip is on its way.
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        retry(&agent, &state, accept.clone()),
    )
    .await;
    assert!(gave_up.is_err(), "answered before the tip settled");
    assert!(eventually(Duration::from_secs(5), || env.payer.count() == 1).await);
    // The cancellation travels to the bridge on its own, after the request it cancels:
    // a retry sent at once may overtake it.
    tokio::time::sleep(Duration::from_millis(200)).await;

    // The next retry with the same state gets the paid call; nothing paid again.
    let done = retry(&agent, &state, accept).await;
    let CallToolResponse::Complete(done) = done else {
        panic!("not completed: {done:?}");
    };
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);
    assert_eq!(one_key(&env), 2);
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bots_roots_request_reaches_the_agent_and_its_answer_the_bot() {
    let env = env(autopay).await;
    let user = User {
        roots: vec!["file:///home/ada/project", "file:///tmp"],
        ..User::answering(ElicitationAction::Accept)
    };
    let agent = agent_2026(&env, user).await;
    let r = agent.call_tool(call("roots", json!({}))).await.unwrap();
    assert_eq!(text(&r), "roots: file:///home/ada/project file:///tmp");
    assert_eq!(env.bot.calls_of("roots").len(), 1, "one call to the bot");
    agent.cancel().await.unwrap();
}
