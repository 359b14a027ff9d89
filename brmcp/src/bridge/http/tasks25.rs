//! The experimental tasks of protocol 2025-11-25 on a bot's endpoint, seen in the
//! JSON-RPC body of a POST before rmcp, which knows only the SEP-2663 form (it drops
//! the `task` param of a `tools/call` and refuses `tasks/get` without that form's
//! capability).
//!
//! - `initialize` on 2025-11-25: the answer advertises `capabilities.tasks` (list,
//!   cancel, `requests.tools.call`); a client that declares `capabilities.tasks` has
//!   its session marked as speaking this form.
//! - `tools/call` with `task` (`{ttl}`) on such a session: the `task` param is checked
//!   and taken off, the SEP-2663 capability put on the request (`_meta`), so the proxy
//!   runs it as the journal's task (`bridge::proxy::task`); its answer is rewritten
//!   into a `CreateTaskResult` of this form.
//! - `tasks/get`, `tasks/result` (held until the task ends), `tasks/list` and
//!   `tasks/cancel` on such a session are answered here from the call journal
//!   (`bridge::calls::tasks25`), for the agent that made the task only: another
//!   agent's task id is not found, as an unknown one is.
//!
//! Everything else, and every request of a session that does not speak this form,
//! goes to rmcp as it came.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};

use super::Endpoint;
use super::refusal::Form;
use crate::bridge::Inner;
use crate::bridge::calls::tasks::Ended;
use crate::bridge::calls::tasks25::{CancelError, Status25, Task25};
use crate::bridge::settings::{Caller, DEFAULT_AGENT};

/// The protocol whose tasks are served here.
const PROTOCOL: &str = "2025-11-25";

/// Largest POST body read here: 4 MiB, rmcp's own bound on a message it reads.
pub(super) const MAX_BODY_BYTES: usize = 4 << 20;

/// Largest `ttl` a task may ask for, in milliseconds: 30 days. The journal keeps a
/// task for its own window whatever is asked (the answer says which); a larger or
/// negative one is a malformed request.
pub(crate) const MAX_REQUESTED_TTL_MS: u64 = 30 * 24 * 3_600 * 1_000;

/// How often a held `tasks/result` looks at its task: 200 ms, small against a paid
/// call's seconds, and one journal read per held request.
const RESULT_POLL: Duration = Duration::from_millis(200);

/// Longest a `tasks/result` is held: 10 minutes, far past a paid call's seconds; past
/// it the agent is told to ask again, so a request whose client went away does not
/// hold its connection for as long as a task runs on.
const MAX_RESULT_HOLD: Duration = Duration::from_secs(600);

/// JSON-RPC's invalid params: a malformed request, an unknown task.
const INVALID_PARAMS: i64 = -32602;

/// JSON-RPC's internal error: a task that ended without a result.
const INTERNAL_ERROR: i64 = -32603;

/// The `_meta` key of the capabilities a request carries (rmcp reads it on any
/// protocol), which turns the proxy's tasks on for the rewritten `tools/call`.
const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// The SEP-2663 tasks extension.
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The `_meta` key naming the task a result belongs to.
const RELATED_TASK_META: &str = "io.modelcontextprotocol/related-task";

/// What a session speaking this form declared at its initialize.
#[derive(Debug)]
pub(crate) struct TaskSession {
    /// The agent that opened it.
    agent: String,
    /// Its capabilities, with the SEP-2663 tasks extension in place of `tasks`: what
    /// its task-augmented calls carry.
    capabilities: Map<String, Value>,
}

/// What was seen in a request that rmcp answers, for its answer.
#[derive(Debug)]
pub(super) enum Seen {
    /// Nothing of this form.
    Other,
    /// An `initialize` on 2025-11-25, by `agent`; its capabilities when it declared
    /// `tasks`.
    Initialize {
        agent: String,
        declared: Option<Map<String, Value>>,
    },
    /// A task-augmented `tools/call` of request `id`.
    TaskCall { id: Value, agent: String },
}

/// What became of a request [`inspect`] read.
#[derive(Debug)]
pub(super) enum Inspected {
    /// Answered here.
    Answered(Response),
    /// For rmcp (rewritten, for a task-augmented `tools/call`), with what its answer
    /// needs.
    Passed(Request, Seen),
}

/// The agent a request came from (the gate put it there).
fn agent_of(request: &Request) -> String {
    request
        .extensions()
        .get::<Caller>()
        .map_or(DEFAULT_AGENT, Caller::name)
        .to_owned()
}

/// A bot's uid as the call journal keeps it.
fn bot_of(endpoint: Endpoint) -> Option<String> {
    match endpoint {
        Endpoint::Bot(uid) => Some(uid.to_string()),
        Endpoint::Directory(_) => None,
    }
}

/// Reads a POST to a bot's endpoint: answers the 2025-11-25 form's task requests
/// itself, or hands the request on.
pub(super) async fn inspect(
    inner: &Inner,
    endpoint: Endpoint,
    session: Option<&str>,
    request: Request,
) -> Inspected {
    let Some(bot) = bot_of(endpoint) else {
        return Inspected::Passed(request, Seen::Other);
    };
    if request.method() != axum::http::Method::POST {
        return Inspected::Passed(request, Seen::Other);
    }
    let agent = agent_of(&request);
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return Inspected::Answered(Form::JsonRpc.refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("request too large: at most {MAX_BODY_BYTES} bytes"),
        ));
    };
    // The body handed on may be rewritten: its length is the body's own.
    let mut parts = parts;
    parts.headers.remove(header::CONTENT_LENGTH);
    let passed = |bytes: Bytes| Request::from_parts(parts.clone(), Body::from(bytes));
    let Ok(Value::Object(mut message)) = serde_json::from_slice::<Value>(&bytes) else {
        return Inspected::Passed(passed(bytes), Seen::Other);
    };
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let id = message.get("id").cloned();
    if method == "initialize" {
        let params = message.get("params");
        if params
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str)
            != Some(PROTOCOL)
        {
            return Inspected::Passed(passed(bytes), Seen::Other);
        }
        let declared = params
            .and_then(|p| p.get("capabilities"))
            .and_then(Value::as_object)
            .filter(|c| c.get("tasks").is_some_and(Value::is_object))
            .map(with_extension);
        return Inspected::Passed(passed(bytes), Seen::Initialize { agent, declared });
    }
    let (Some(id), Some(session)) = (id, session) else {
        return Inspected::Passed(passed(bytes), Seen::Other);
    };
    let Some(tasks) = inner.http.sessions.tasks(&endpoint, session) else {
        return Inspected::Passed(passed(bytes), Seen::Other);
    };
    if tasks.agent != agent {
        // Another token on this session: rmcp answers it as it would anyone's.
        return Inspected::Passed(passed(bytes), Seen::Other);
    }
    let answer = |result: Result<Value, (i64, String)>| Inspected::Answered(answered(&id, result));
    match method {
        "tools/call" => {
            let Some(Value::Object(params)) = message.get_mut("params") else {
                return Inspected::Passed(passed(bytes), Seen::Other);
            };
            let Some(task) = params.remove("task") else {
                return Inspected::Passed(passed(bytes), Seen::Other);
            };
            if let Err(why) = check_task(&task) {
                return answer(Err((INVALID_PARAMS, why.to_owned())));
            }
            let meta = params
                .entry("_meta")
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(meta) = meta else {
                return answer(Err((INVALID_PARAMS, "_meta is not an object".into())));
            };
            meta.insert(
                CAPABILITIES_META.into(),
                Value::Object(tasks.capabilities.clone()),
            );
            let body = Bytes::from(Value::Object(message).to_string());
            Inspected::Passed(passed(body), Seen::TaskCall { id, agent })
        }
        "tasks/get" => answer(task_id(&message).and_then(|task_id| {
            inner
                .calls
                .task25(&agent, &bot, task_id)
                .map(|(task, _)| to_value(&task))
                .ok_or_else(not_found)
        })),
        "tasks/list" => answer(cursor(&message).map(|after| {
            let page = inner.calls.tasks25(&agent, &bot, after);
            let mut result = json!({"tasks": page.tasks});
            if let Some(next) = page.next {
                result["nextCursor"] = Value::String(next.to_string());
            }
            result
        })),
        "tasks/cancel" => answer(task_id(&message).and_then(|task_id| {
            inner
                .calls
                .cancel_task25(&agent, &bot, task_id)
                .map(|task| to_value(&task))
                .map_err(|e| match e {
                    CancelError::NotFound => not_found(),
                    CancelError::Ended(status) => (
                        INVALID_PARAMS,
                        format!("task already ended: {}", status_name(status)),
                    ),
                })
        })),
        "tasks/result" => {
            let result = match task_id(&message) {
                Ok(task_id) => result_of(inner, &agent, &bot, task_id).await,
                Err(e) => Err(e),
            };
            answer(result)
        }
        _ => Inspected::Passed(passed(bytes), Seen::Other),
    }
}

/// Rewrites rmcp's answer to a request [`inspect`] saw; the session to mark as
/// speaking this form, for an `initialize` that declared it.
pub(super) async fn finish(
    inner: &Inner,
    endpoint: Endpoint,
    seen: Seen,
    response: Response,
) -> (Response, Option<TaskSession>) {
    match seen {
        Seen::Other => (response, None),
        Seen::Initialize { agent, declared } => {
            let response = rewrite(response, None, |message| {
                let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
                    return;
                };
                if result.get("protocolVersion").and_then(Value::as_str) != Some(PROTOCOL) {
                    return;
                }
                if let Some(Value::Object(capabilities)) = result.get_mut("capabilities") {
                    capabilities.insert(
                        "tasks".into(),
                        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
                    );
                }
            })
            .await;
            let session = declared.map(|capabilities| TaskSession {
                agent,
                capabilities,
            });
            (response, session)
        }
        Seen::TaskCall { id, agent } => {
            let Some(bot) = bot_of(endpoint) else {
                return (response, None);
            };
            let response = rewrite(response, Some(&id), |message| {
                // The proxy's task, in the SEP-2663 form (`resultType` "task").
                let task_id = message
                    .get("result")
                    .filter(|r| r.get("resultType").and_then(Value::as_str) == Some("task"))
                    .and_then(|r| r.get("taskId"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let Some(task_id) = task_id else { return };
                if let Some((task, _)) = inner.calls.task25(&agent, &bot, &task_id) {
                    message["result"] = json!({ "task": to_value(&task) });
                }
            })
            .await;
            (response, None)
        }
    }
}

/// Capabilities a task's run does not use: its requests to the agent would go out on
/// the `tools/call`'s stream, which ended with the created task. So the run asks the
/// agent nothing: a bot's request to it is refused, and its payment's approval is the
/// approval page's (`input_required` meanwhile).
const NOT_IN_A_TASK: [&str; 4] = ["tasks", "elicitation", "sampling", "roots"];

/// `capabilities` as a task-augmented call carries them: `tasks` (this form's)
/// replaced by the SEP-2663 extension, which the proxy reads, and none the run cannot
/// use ([`NOT_IN_A_TASK`]).
fn with_extension(capabilities: &Map<String, Value>) -> Map<String, Value> {
    let mut out = capabilities.clone();
    for key in NOT_IN_A_TASK {
        out.remove(key);
    }
    let extensions = out
        .entry("extensions")
        .or_insert_with(|| Value::Object(Map::new()));
    if !extensions.is_object() {
        *extensions = Value::Object(Map::new());
    }
    if let Value::Object(extensions) = extensions {
        extensions.insert(TASKS_EXTENSION.into(), Value::Object(Map::new()));
    }
    out
}

/// Checks a `tools/call`'s `task` param: an object whose `ttl`, when given, is a whole
/// number of milliseconds from 1 to [`MAX_REQUESTED_TTL_MS`].
pub(crate) fn check_task(task: &Value) -> Result<(), &'static str> {
    let Value::Object(task) = task else {
        return Err("task must be an object");
    };
    match task.get("ttl") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(ms) if (1..=MAX_REQUESTED_TTL_MS).contains(&ms) => Ok(()),
            _ => Err("task.ttl must be a whole number of milliseconds from 1 to 30 days"),
        },
        Some(_) => Err("task.ttl must be a number of milliseconds"),
    }
}

/// The `taskId` param of a task request.
fn task_id(message: &Map<String, Value>) -> Result<&str, (i64, String)> {
    message
        .get("params")
        .and_then(|p| p.get("taskId"))
        .and_then(Value::as_str)
        .ok_or_else(|| (INVALID_PARAMS, "taskId must be a string".to_owned()))
}

/// The row `tasks/list` starts after: its `cursor` param (one of its own
/// `nextCursor`s), or the first.
fn cursor(message: &Map<String, Value>) -> Result<i64, (i64, String)> {
    match message.get("params").and_then(|p| p.get("cursor")) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(c)) => c
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .ok_or_else(|| (INVALID_PARAMS, "invalid cursor".to_owned())),
        Some(_) => Err((INVALID_PARAMS, "invalid cursor".to_owned())),
    }
}

fn not_found() -> (i64, String) {
    (INVALID_PARAMS, "task not found".to_owned())
}

fn to_value(task: &Task25) -> Value {
    serde_json::to_value(task).unwrap_or(Value::Null)
}

fn status_name(status: Status25) -> String {
    serde_json::to_value(status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// `tasks/result`: held until the task ends (or the bridge stops), then its call's
/// result, or the error it ended with.
async fn result_of(
    inner: &Inner,
    agent: &str,
    bot: &str,
    task_id: &str,
) -> Result<Value, (i64, String)> {
    let closed = inner.calls.tasks_closed();
    let deadline = tokio::time::Instant::now() + MAX_RESULT_HOLD;
    loop {
        let (_, end) = inner
            .calls
            .task25(agent, bot, task_id)
            .ok_or_else(not_found)?;
        let related = json!({ RELATED_TASK_META: {"taskId": task_id} });
        match end {
            Some(Ended::Completed(mut result)) => {
                let meta = result
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()));
                if let (Value::Object(meta), Value::Object(related)) = (meta, related) {
                    meta.extend(related);
                }
                return Ok(Value::Object(result));
            }
            Some(Ended::Failed(error)) => {
                let code = error
                    .get("code")
                    .and_then(Value::as_i64)
                    .unwrap_or(INTERNAL_ERROR);
                let message = error
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("the call failed");
                return Err((code, message.to_owned()));
            }
            Some(Ended::Cancelled) => return Err((INTERNAL_ERROR, "task cancelled".into())),
            None => {}
        }
        tokio::select! {
            () = closed.cancelled() => {
                return Err((INTERNAL_ERROR, "the bridge is stopping; ask again after its restart".into()));
            }
            () = tokio::time::sleep(RESULT_POLL) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err((
                INTERNAL_ERROR,
                format!(
                    "task still running after {} s; ask again",
                    MAX_RESULT_HOLD.as_secs()
                ),
            ));
        }
    }
}

/// The JSON-RPC answer to request `id`.
fn answered(id: &Value, result: Result<Value, (i64, String)>) -> Response {
    let body = match result {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": code, "message": message},
        }),
    };
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// Applies `edit` to the JSON-RPC answer in `response` (the one to `id`, or the first
/// answer when `None`), whether rmcp sent it as JSON or as an event stream. The stream
/// is read up to that answer (rmcp ends it there), so what came before it passes too.
async fn rewrite(
    response: Response,
    id: Option<&Value>,
    edit: impl FnOnce(&mut Value),
) -> Response {
    if response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let is_sse = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    parts.headers.remove(header::CONTENT_LENGTH);
    let is_answer = |message: &Value| {
        (message.get("result").is_some() || message.get("error").is_some())
            && id.is_none_or(|id| message.get("id") == Some(id))
    };
    if !is_sse {
        let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
            return (StatusCode::BAD_GATEWAY, "answer too large").into_response();
        };
        let Ok(mut message) = serde_json::from_slice::<Value>(&bytes) else {
            return Response::from_parts(parts, Body::from(bytes));
        };
        if is_answer(&message) {
            edit(&mut message);
        }
        return Response::from_parts(parts, Body::from(message.to_string()));
    }
    let mut stream = body.into_data_stream();
    let mut pending = String::new();
    let mut out = String::new();
    let mut edit = Some(edit);
    'read: while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        pending.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = pending.find("\n\n") {
            let event: String = pending.drain(..end + 2).collect();
            let (event, done) = edit_event(&event, &is_answer, &mut edit);
            out.push_str(&event);
            if done {
                break 'read;
            }
        }
        if pending.len() > MAX_BODY_BYTES {
            break;
        }
    }
    out.push_str(&pending);
    if let Ok(v) = HeaderValue::from_str("text/event-stream") {
        parts.headers.insert(header::CONTENT_TYPE, v);
    }
    Response::from_parts(parts, Body::from(out))
}

/// One event of an event stream, its data edited when it is the answer; whether it
/// was.
fn edit_event(
    event: &str,
    is_answer: &impl Fn(&Value) -> bool,
    edit: &mut Option<impl FnOnce(&mut Value)>,
) -> (String, bool) {
    let data: Vec<&str> = event
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.strip_prefix(' ').unwrap_or(d))
        .collect();
    if data.is_empty() {
        return (event.to_owned(), false);
    }
    let Ok(mut message) = serde_json::from_str::<Value>(&data.join("\n")) else {
        return (event.to_owned(), false);
    };
    if !is_answer(&message) {
        return (event.to_owned(), false);
    }
    if let Some(edit) = edit.take() {
        edit(&mut message);
    }
    let mut out: String = event
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("data:"))
        .map(|l| format!("{l}\n"))
        .collect();
    out.push_str(&format!("data: {message}\n\n"));
    (out, true)
}

#[cfg(test)]
mod tests;
