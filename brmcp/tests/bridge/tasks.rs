//! Tasks (SEP-2663) for agents on protocol 2026-07-28 that declare them (rmcp's
//! client): a `tools/call` answers with a task at once, `tasks/get` serves its status
//! and result from the call journal (also after a restart of the bridge), `tasks/cancel`
//! cancels the call at the bot, and another agent's task is not found.

use std::time::Duration;

use crate::common::{
    Agent, FORTUNE_PRICE, PayMode, Stage, autopay, call, env, eventually, held_payment_dropped,
    text,
};
use brmcp::adapters::PeerId;
use brmcp::bridge::{AgentEntry, Bridge, Mode};
use rmcp::model::{
    CallToolResponse, CallToolResult, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, InputResponses, ProtocolVersion, TaskPayload, TaskStatus,
    UpdateTaskParams,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use serde_json::json;

/// How long a task may take to end on this (noisy) machine.
const TASK_BOUND: Duration = Duration::from_secs(30);

/// An agent that declares the tasks extension (and form elicitation: it can be asked
/// to approve a payment).
#[derive(Clone)]
struct Tasker;

impl ClientHandler for Tasker {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = serde_json::from_value(json!({
            "extensions": {"io.modelcontextprotocol/tasks": {}},
            "elicitation": {"form": {}},
        }))
        .unwrap();
        ClientConfig::new(capabilities, Implementation::new("tasker", "1"))
    }
}

fn discover() -> ClientLifecycleMode {
    ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    }
}

/// A 2026-07-28 agent declaring tasks, on `bridge`'s proxy of `bot` over a pipe.
async fn tasker(bridge: &Bridge, bot: PeerId) -> Agent<Tasker> {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let bridge = bridge.clone();
    tokio::spawn(async move {
        if let Err(e) = bridge.serve(&bot, server_end).await {
            eprintln!("bridge serve ended: {e}");
        }
    });
    Tasker
        .serve_with_lifecycle(client_end, discover())
        .await
        .expect("discover")
}

/// Calls `tool` and returns its task's id; the call must answer with a task.
async fn task_of(agent: &Agent<Tasker>, tool: &'static str) -> String {
    let answer = tokio::time::timeout(TASK_BOUND, agent.call_tool_once(call(tool, json!({}))))
        .await
        .expect("an answer")
        .expect("tools/call");
    let CallToolResponse::Task(created) = answer else {
        panic!("not a task: {answer:?}");
    };
    assert_eq!(created.task.status, TaskStatus::Working);
    assert!(created.task.task_id.len() >= 32, "{:?}", created.task);
    created.task.task_id
}

/// Polls the task until it ends; returns its payload.
async fn ended(agent: &Agent<Tasker>, id: &str) -> TaskPayload {
    let start = tokio::time::Instant::now();
    loop {
        let got = agent
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get");
        if got.task.status().is_terminal() {
            return got.task.payload;
        }
        assert!(start.elapsed() < TASK_BOUND, "task still {:?}", got.task);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn completed(payload: TaskPayload) -> CallToolResult {
    let TaskPayload::Completed { result } = payload else {
        panic!("not completed: {payload:?}");
    };
    serde_json::from_value(serde_json::Value::Object(result)).expect("a CallToolResult")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_as_a_task_is_polled_to_its_result_paid_once() {
    let env = env(autopay).await;
    let agent = tasker(&env.bridge, env.bot_id).await;
    let id = task_of(&agent, "fortune").await;
    let result = completed(ended(&agent, &id).await);
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert!(text(&result).contains("fortune"), "{result:?}");
    // Polled again, the same result; paid and run once.
    let again = completed(ended(&agent, &id).await);
    assert_eq!(again, result);
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);
    // An id never given is not found.
    let unknown = agent
        .get_task(GetTaskParams::new("0".repeat(64)))
        .await
        .expect_err("not found");
    assert!(unknown.to_string().contains("task not found"), "{unknown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_is_cancelled_at_the_bot() {
    let env = env(autopay).await;
    let agent = tasker(&env.bridge, env.bot_id).await;
    let started = env.bot.wait_started.notified();
    let id = task_of(&agent, "wait").await;
    tokio::time::timeout(TASK_BOUND, started)
        .await
        .expect("the bot runs it");
    agent
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect("tasks/cancel");
    let bot = env.bot.clone();
    assert!(
        eventually(TASK_BOUND, || bot
            .cancelled
            .load(std::sync::atomic::Ordering::SeqCst)
            == 1)
        .await,
        "the bot saw the cancellation"
    );
    assert_eq!(ended(&agent, &id).await, TaskPayload::Cancelled);
}

const ONE_TOKEN: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const TWO_TOKEN: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

async fn http_tasker(addr: std::net::SocketAddr, bot: PeerId, token: &str) -> Agent<Tasker> {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp/{bot}"))
            .auth_header(token),
    );
    Tasker
        .serve_with_lifecycle(transport, discover())
        .await
        .expect("HTTP agent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_agents_task_is_not_found() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.enabled = true;
        s.agents = vec![
            AgentEntry::new("one", ONE_TOKEN, 10_000, 100_000, Vec::new()),
            AgentEntry::new("two", TWO_TOKEN, 10_000, 100_000, Vec::new()),
        ];
        s
    })
    .await;
    env.bridge.start().await.expect("start");
    let addr = env.bridge.listen_addr().expect("listening");
    let one = http_tasker(addr, env.bot_id, ONE_TOKEN).await;
    let two = http_tasker(addr, env.bot_id, TWO_TOKEN).await;
    let id = task_of(&one, "fortune").await;
    completed(ended(&one, &id).await);
    let got = two
        .get_task(GetTaskParams::new(&id))
        .await
        .expect_err("another agent's task");
    assert!(got.to_string().contains("task not found"), "{got}");
    let cancel = two
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect_err("another agent's task");
    assert!(cancel.to_string().contains("task not found"), "{cancel}");
    // The owner still has it, completed.
    completed(ended(&one, &id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cut_by_a_restart_is_resumed_and_its_result_served() {
    // The tip "succeeds" but its credit never reaches the bot: the task waits on it.
    let stage = Stage::new(11, PayMode::NeverCredit);
    let (bot_id, bridge_id) = (stage.bot_id, stage.bridge_id);
    let (bot, payer) = (&stage.bot, &stage.payer);
    let first = stage.waiting_on_credit(autopay(bot_id)).await;
    let agent = tasker(&first, bot_id).await;
    let id = task_of(&agent, "fortune").await;
    assert!(eventually(TASK_BOUND, || payer.count() == 1).await, "paid");
    let working = agent
        .get_task(GetTaskParams::new(&id))
        .await
        .expect("tasks/get");
    assert_eq!(working.task.status(), TaskStatus::Working);
    first.close().await;
    drop(agent);
    drop(first);
    // The tip's credit reaches the bot after the bridge stopped.
    bot.credit(bridge_id, FORTUNE_PRICE);

    let second = stage.restarted().await;
    let agent = tasker(&second, bot_id).await;
    let result = completed(ended(&agent, &id).await);
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert!(text(&result).contains("fortune"), "{result:?}");
    assert_eq!(payer.count(), 1, "paid once");
    assert_eq!(bot.executions("fortune"), 1, "run once");
}

async fn approval_env() -> crate::common::Env {
    env(|bot| {
        let mut s = autopay(bot);
        s.mode = Mode::Approval;
        s.approval_timeout_secs = 30;
        s
    })
    .await
}

/// Polls the task until it asks for input; returns the input's keys.
async fn asked(agent: &Agent<Tasker>, id: &str) -> Vec<String> {
    let start = tokio::time::Instant::now();
    let requests = loop {
        let got = agent
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get");
        if let TaskPayload::InputRequired { input_requests } = got.task.payload {
            break input_requests;
        }
        assert_eq!(got.task.task.status, TaskStatus::Working, "{got:?}");
        assert!(start.elapsed() < TASK_BOUND, "never asked");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    requests.keys().cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_is_the_tasks_input_required_state() {
    let env = approval_env().await;
    let agent = tasker(&env.bridge, env.bot_id).await;
    let id = task_of(&agent, "fortune").await;
    let keys = asked(&agent, &id).await;
    assert_eq!(env.payer.count(), 0, "nothing paid before the approval");
    assert_eq!(keys.len(), 1, "{keys:?}");
    let key = keys[0].clone();
    let mut responses = InputResponses::new();
    responses.insert(key, json!({"action": "accept"}));
    agent
        .update_task(UpdateTaskParams::new(&id, responses.clone()))
        .await
        .expect("tasks/update");
    let result = completed(ended(&agent, &id).await);
    assert_eq!(result.is_error, Some(false), "{result:?}");
    assert_eq!(env.payer.count(), 1, "paid once");
    assert_eq!(env.bot.executions("fortune"), 1);
    // The task waits for nothing now.
    let again = agent
        .update_task(UpdateTaskParams::new(&id, responses))
        .await
        .expect_err("not waiting");
    assert!(again.to_string().contains("not waiting"), "{again}");
    assert_eq!(env.payer.count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cancelled_while_asked_is_never_paid() {
    let env = approval_env().await;
    let agent = tasker(&env.bridge, env.bot_id).await;
    let id = task_of(&agent, "fortune").await;
    asked(&agent, &id).await;
    assert_eq!(env.bridge.pending_payments().len(), 1, "the payment waits");
    agent
        .cancel_task(CancelTaskParams::new(&id))
        .await
        .expect("tasks/cancel");
    assert_eq!(ended(&agent, &id).await, TaskPayload::Cancelled);
    held_payment_dropped(&env, "fortune").await;
    assert_eq!(ended(&agent, &id).await, TaskPayload::Cancelled);
}
