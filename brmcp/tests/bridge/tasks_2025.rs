//! The experimental tasks of protocol 2025-11-25 on the HTTP endpoint, in raw
//! JSON-RPC: the bridge advertises them to 2025-11-25 clients, a task-augmented
//! `tools/call` answers with the journal's task at once, `tasks/get`, `tasks/result`,
//! `tasks/list` and `tasks/cancel` answer from the journal for the agent that made the
//! task only, approval shows as `input_required`, and hostile requests (a malformed
//! `task`, a `ttl` out of bounds, unknown or foreign task ids, bad cursors, another
//! token on a session) are refused with nothing run or paid.

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Env, autopay, env, held_payment_dropped, http};
use brmcp::adapters::PeerId;
use brmcp::bridge::{AgentEntry, Mode, Settings};

const ONE_TOKEN: &str = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3";
const TWO_TOKEN: &str = "d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4d4";

/// How long a task may take to end on this (noisy) machine.
const TASK_BOUND: Duration = Duration::from_secs(30);

/// JSON-RPC's invalid params.
const INVALID_PARAMS: i64 = -32602;

fn two_agents(bot: PeerId) -> Settings {
    let mut s = autopay(bot);
    s.enabled = true;
    s.agents = vec![
        AgentEntry::new("one", ONE_TOKEN, 10_000, 100_000, Vec::new()),
        AgentEntry::new("two", TWO_TOKEN, 10_000, 100_000, Vec::new()),
    ];
    s
}

async fn started(settings: impl FnOnce(PeerId) -> Settings) -> (Env, SocketAddr) {
    let env = env(settings).await;
    env.bridge.start().await.expect("start");
    let addr = env.bridge.listen_addr().expect("listening");
    (env, addr)
}

/// The JSON-RPC message answering a POST, sent as JSON or as an event stream.
fn answer_of(body: &str) -> Value {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        return value;
    }
    body.split("\n\n")
        .filter_map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            serde_json::from_str::<Value>(&data.join("\n")).ok()
        })
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .unwrap_or_else(|| panic!("no answer in {body:?}"))
}

/// One agent's MCP session over raw HTTP.
struct Session {
    addr: SocketAddr,
    path: String,
    token: &'static str,
    id: String,
    next: u64,
}

impl Session {
    /// Opens a session on `version`, with `capabilities`; also the initialize result.
    async fn open(
        addr: SocketAddr,
        bot: PeerId,
        token: &'static str,
        version: &str,
        capabilities: Value,
    ) -> (Self, Value) {
        let path = format!("/mcp/{bot}");
        let body = json!({
            "jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": capabilities,
                "clientInfo": {"name": "raw-tasks", "version": "0"},
            },
        });
        let (status, headers, text) = post(addr, &path, token, None, &body).await;
        assert_eq!(status, 200, "{text}");
        let id = headers
            .iter()
            .find(|(k, _)| k == "mcp-session-id")
            .map(|(_, v)| v.clone())
            .expect("a session id");
        let session = Self {
            addr,
            path,
            token,
            id,
            next: 1,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, _, _) = session.post(&initialized).await;
        assert!(status == 202 || status == 200, "initialized: {status}");
        (session, answer_of(&text)["result"].clone())
    }

    /// A 2025-11-25 session of an agent that declares tasks.
    async fn tasker(addr: SocketAddr, bot: PeerId, token: &'static str) -> Self {
        let capabilities = json!({"tasks": {"list": {}, "cancel": {}}});
        Self::open(addr, bot, token, "2025-11-25", capabilities)
            .await
            .0
    }

    async fn post(&self, body: &Value) -> (u16, Vec<(String, String)>, String) {
        post(self.addr, &self.path, self.token, Some(&self.id), body).await
    }

    /// Sends request `method` with `params`; its answer.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let (status, _, text) = self.post(&body).await;
        assert_eq!(status, 200, "{method}: {text}");
        let answer = answer_of(&text);
        assert_eq!(answer["id"], json!(id), "{text}");
        answer
    }

    /// A task-augmented call of `tool`; the answer.
    async fn call_as_task(&mut self, tool: &str, task: Value) -> Value {
        let params = json!({"name": tool, "arguments": {}, "task": task});
        self.request("tools/call", params).await
    }

    /// A task-augmented call of `tool` that must answer with a task under way: its id.
    async fn task_of(&mut self, tool: &str) -> String {
        let answer = self.call_as_task(tool, json!({"ttl": 60_000})).await;
        let task = &answer["result"]["task"];
        // Just created: working, or (approval mode) already waiting for the user.
        assert!(
            task["status"] == json!("working") || task["status"] == json!("input_required"),
            "{answer}"
        );
        assert!(task["ttl"].as_u64().is_some_and(|t| t > 0), "{answer}");
        assert!(task["pollInterval"].as_u64().is_some(), "{answer}");
        assert!(task["createdAt"].as_str().is_some(), "{answer}");
        assert!(task["lastUpdatedAt"].as_str().is_some(), "{answer}");
        let id = task["taskId"].as_str().expect("a task id").to_owned();
        assert!(id.len() >= 32, "{id}");
        id
    }

    /// Polls `tasks/get` until the task's status is `want`.
    async fn until(&mut self, id: &str, want: &str) -> Value {
        let start = tokio::time::Instant::now();
        loop {
            let got = self.request("tasks/get", json!({"taskId": id})).await;
            if got["result"]["status"] == json!(want) {
                return got["result"].clone();
            }
            assert!(start.elapsed() < TASK_BOUND, "never {want}: {got}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A POST of `body` to `path` with bearer `token`, on `session` when given.
async fn post(
    addr: SocketAddr,
    path: &str,
    token: &str,
    session: Option<&str>,
    body: &Value,
) -> (u16, Vec<(String, String)>, String) {
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(session) = session {
        headers.push(("Mcp-Session-Id", session));
        headers.push(("Mcp-Protocol-Version", "2025-11-25"));
    }
    http(addr, "POST", path, &headers, &body.to_string()).await
}

/// The code and message of an error answer.
fn error_of(answer: &Value) -> (i64, String) {
    let error = answer
        .get("error")
        .unwrap_or_else(|| panic!("not an error: {answer}"));
    (
        error["code"].as_i64().expect("a code"),
        error["message"].as_str().unwrap_or("").to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_advertised_to_2025_11_25_clients_only() {
    let (env, addr) = started(two_agents).await;
    let caps = json!({"tasks": {"list": {}, "cancel": {}}});
    let (_, result) = Session::open(addr, env.bot_id, ONE_TOKEN, "2025-11-25", caps.clone()).await;
    assert_eq!(result["protocolVersion"], json!("2025-11-25"), "{result}");
    assert_eq!(
        result["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{result}"
    );
    let (_, older) = Session::open(addr, env.bot_id, ONE_TOKEN, "2025-06-18", caps).await;
    assert_eq!(older["protocolVersion"], json!("2025-06-18"), "{older}");
    assert!(older["capabilities"].get("tasks").is_none(), "{older}");
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_is_created_polled_listed_and_its_result_served_to_its_agent_only() {
    let (env, addr) = started(two_agents).await;
    let mut one = Session::tasker(addr, env.bot_id, ONE_TOKEN).await;
    let id = one.task_of("fortune").await;
    // tasks/result holds until the task ends, then is the call's result.
    let result = one.request("tasks/result", json!({"taskId": id})).await;
    let result = &result["result"];
    assert_eq!(result["isError"], json!(false), "{result}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("fortune"))
    );
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        json!(id),
        "{result}"
    );
    let got = one.until(&id, "completed").await;
    assert_eq!(got["taskId"], json!(id));
    assert_eq!(env.payer.count(), 1, "paid once");
    assert_eq!(env.bot.executions("fortune"), 1, "run once");
    let listed = one.request("tasks/list", json!({})).await;
    let ids: Vec<&Value> = listed["result"]["tasks"]
        .as_array()
        .expect("tasks")
        .iter()
        .map(|t| &t["taskId"])
        .collect();
    assert_eq!(ids, vec![&json!(id)], "{listed}");
    // An ended task is not cancelled again.
    let again = one.request("tasks/cancel", json!({"taskId": id})).await;
    let (code, message) = error_of(&again);
    assert_eq!(code, INVALID_PARAMS, "{again}");
    assert!(message.contains("already ended"), "{again}");

    // Another agent: not found, exactly as an unknown id; its list is empty.
    let mut two = Session::tasker(addr, env.bot_id, TWO_TOKEN).await;
    let unknown = "0".repeat(64);
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        for task_id in [id.as_str(), unknown.as_str()] {
            let answer = two.request(method, json!({"taskId": task_id})).await;
            assert_eq!(
                error_of(&answer),
                (INVALID_PARAMS, "task not found".to_owned()),
                "{method} {answer}"
            );
        }
    }
    let listed = two.request("tasks/list", json!({})).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    // Nor does the other token reach it on the first agent's session.
    let borrowed = Session {
        addr,
        path: one.path.clone(),
        token: TWO_TOKEN,
        id: one.id.clone(),
        next: 100,
    };
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"taskId": id}});
    let (_, _, text) = borrowed.post(&body).await;
    assert!(!text.contains("\"completed\""), "{text}");
    // The owner still has it, and nothing ran again.
    one.until(&id, "completed").await;
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_task_requests_are_refused_and_nothing_runs() {
    let (env, addr) = started(two_agents).await;
    let mut one = Session::tasker(addr, env.bot_id, ONE_TOKEN).await;
    let bad_tasks = [
        json!("soon"),
        json!(7),
        json!([]),
        json!({"ttl": -1}),
        json!({"ttl": 0}),
        json!({"ttl": 1.5}),
        json!({"ttl": "60000"}),
        json!({"ttl": 1e300}),
        json!({"ttl": 31u64 * 24 * 3_600 * 1_000}),
        json!({"ttl": u64::MAX}),
    ];
    for task in bad_tasks {
        let answer = one.call_as_task("fortune", task.clone()).await;
        let (code, message) = error_of(&answer);
        assert_eq!(code, INVALID_PARAMS, "{task}: {answer}");
        assert!(message.starts_with("task"), "{task}: {answer}");
    }
    // `_meta` that is not an object.
    let params = json!({"name": "fortune", "arguments": {}, "task": {}, "_meta": 5});
    let answer = one.request("tools/call", params).await;
    assert_eq!(error_of(&answer).0, INVALID_PARAMS, "{answer}");
    for params in [
        json!({}),
        json!({"taskId": 5}),
        json!({"taskId": null}),
        json!({"taskId": "x".repeat(10_000)}),
        json!({"taskId": "'; DROP TABLE calls; --"}),
    ] {
        for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
            let answer = one.request(method, params.clone()).await;
            assert_eq!(
                error_of(&answer).0,
                INVALID_PARAMS,
                "{method} {params}: {answer}"
            );
        }
    }
    for cursor in [
        json!("abc"),
        json!("-1"),
        json!(7),
        json!({}),
        json!("99999999999999999999"),
    ] {
        let answer = one.request("tasks/list", json!({"cursor": cursor})).await;
        assert_eq!(
            error_of(&answer),
            (INVALID_PARAMS, "invalid cursor".to_owned()),
            "{cursor}: {answer}"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(env.bot.executions("fortune"), 0, "nothing ran");
    assert_eq!(env.payer.count(), 0, "nothing paid");
    // The largest ttl allowed is taken (the task says how long it is kept).
    let answer = one
        .call_as_task("fortune", json!({"ttl": 30u64 * 24 * 3_600 * 1_000}))
        .await;
    assert_eq!(
        answer["result"]["task"]["status"],
        json!("working"),
        "{answer}"
    );
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_did_not_declare_tasks_gets_its_call_run_as_usual() {
    let (env, addr) = started(two_agents).await;
    let (mut plain, _) = Session::open(addr, env.bot_id, ONE_TOKEN, "2025-11-25", json!({})).await;
    let answer = plain.call_as_task("fortune", json!({"ttl": 60_000})).await;
    let result = &answer["result"];
    assert!(result.get("task").is_none(), "{answer}");
    assert!(
        result["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("fortune")),
        "{answer}"
    );
    // Its task requests are not served here.
    let got = plain
        .request("tasks/get", json!({"taskId": "0".repeat(64)}))
        .await;
    assert!(got.get("error").is_some(), "{got}");
    env.bridge.close().await;
}

fn approval(bot: PeerId) -> Settings {
    let mut s = two_agents(bot);
    s.mode = Mode::Approval;
    s.approval_timeout_secs = 30;
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_shows_as_input_required_and_the_task_completes_once_approved() {
    let (env, addr) = started(approval).await;
    let mut one = Session::tasker(addr, env.bot_id, ONE_TOKEN).await;
    let id = one.task_of("fortune").await;
    let waiting = one.until(&id, "input_required").await;
    assert!(waiting["statusMessage"].as_str().is_some(), "{waiting}");
    assert_eq!(env.payer.count(), 0, "nothing paid before the approval");
    let pending = env.bridge.pending_payments();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(env.bridge.resolve_payment(&pending[0].id, true));
    let result = one.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["result"]["isError"], json!(false), "{result}");
    one.until(&id, "completed").await;
    assert_eq!(env.payer.count(), 1, "paid once");
    assert_eq!(env.bot.executions("fortune"), 1);
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_cancelled_while_awaiting_approval_is_never_paid() {
    let (env, addr) = started(approval).await;
    let mut one = Session::tasker(addr, env.bot_id, ONE_TOKEN).await;
    let id = one.task_of("fortune").await;
    one.until(&id, "input_required").await;
    let cancelled = one.request("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(
        cancelled["result"]["status"],
        json!("cancelled"),
        "{cancelled}"
    );
    assert_eq!(cancelled["result"]["taskId"], json!(id), "{cancelled}");
    let result = one.request("tasks/result", json!({"taskId": id})).await;
    assert!(error_of(&result).1.contains("cancelled"), "{result}");
    held_payment_dropped(&env, "fortune").await;
    one.until(&id, "cancelled").await;
    env.bridge.close().await;
}

/// A task-augmented call is always answered with a task: a repeat of a call the
/// journal holds (the agent's own key again) with the task it repeats, ended, nothing
/// run or paid again; a call over its agent's share of the bot with a task that failed
/// with the share's refusal, never a plain result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_or_refused_task_call_is_answered_with_a_task() {
    let (env, addr) = started(two_agents).await;
    let mut one = Session::tasker(addr, env.bot_id, ONE_TOKEN).await;
    let keyed = json!({
        "name": "fortune", "arguments": {}, "task": {"ttl": 60_000},
        "_meta": {"brmcp/callKey": "task-repeat-key-0001"},
    });
    let first = one.request("tools/call", keyed.clone()).await;
    let id = first["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {first}"))
        .to_owned();
    one.until(&id, "completed").await;
    let again = one.request("tools/call", keyed).await;
    let task = &again["result"]["task"];
    assert_eq!(task["taskId"], json!(id), "{again}");
    assert_eq!(task["status"], json!("completed"), "{again}");
    let result = one.request("tasks/result", json!({"taskId": id})).await;
    assert_eq!(result["result"]["isError"], json!(false), "{result}");
    assert_eq!(env.payer.count(), 1, "paid once");
    assert_eq!(env.bot.executions("fortune"), 1, "run once");

    // Past its share of the bot (the bridge's 27 calls a minute of the bot's 30, in
    // three callers' shares), every answer is still a task.
    let mut failed = None;
    for n in 0..30 {
        let params = json!({"name": "echo", "arguments": {"text": format!("e{n}")}, "task": {}});
        let answer = one.request("tools/call", params).await;
        let task = &answer["result"]["task"];
        assert!(task["taskId"].is_string(), "call {n}: {answer}");
        if task["status"] == json!("failed") {
            failed = task["taskId"].as_str().map(str::to_owned);
            break;
        }
    }
    let failed = failed.expect("the share refused a call");
    let refused = one.request("tasks/result", json!({"taskId": failed})).await;
    let said = refused["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(refused["result"]["isError"], json!(true), "{refused}");
    assert!(said.contains("over its share"), "{refused}");
    env.bridge.close().await;
}
