//! The paid MCP bot of the bridge tests (WIRE.md §10): priced tools, balances debited
//! per call, call keys that run and charge once and replay their outcome.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp::adapters::mem::Fabric;
use brmcp::adapters::{PeerId, Router, RouterConfig};
use brmcp::server::Shortfall;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, CreateMessageRequestParams, ErrorData, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, LoggingLevel, LoggingMessageNotificationParam, PaginatedRequestParams,
    ProgressNotificationParam, Prompt, PromptMessage, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ResourceContents, Role, SamplingMessage,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::model::{ClientResult, ElicitRequest, ElicitRequestParams, ServerRequest};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::complete_from;

/// Price of the bot's `fortune` tool, in atoms.
pub const FORTUNE_PRICE: u64 = 500;

/// What the bot saw and holds.
#[derive(Default)]
pub struct BotState {
    /// Balances by caller, in atoms.
    pub balances: Mutex<HashMap<PeerId, u64>>,
    /// Tool executions by tool name (replays and refusals do not count).
    pub executions: Mutex<HashMap<String, usize>>,
    /// Every `tools/call` received: tool name, call key.
    pub calls: Mutex<Vec<(String, Option<String>)>>,
    /// Completed keyed outcomes by (caller, key).
    pub outcomes: Mutex<HashMap<(PeerId, String), CallToolResult>>,
    /// `_meta` of every tools/call, as the bot received it.
    pub metas: Mutex<Vec<serde_json::Map<String, Value>>>,
    /// `wait` calls that saw their cancellation.
    pub cancelled: AtomicUsize,
    pub wait_started: Notify,
    pub cancel_seen: Notify,
    /// Tools listed in addition to the fixed ones (changed with `add_tool`).
    pub extra_tools: Mutex<Vec<Tool>>,
    /// Drop the next N answers to `tools/call` after running the call (a lost reply).
    pub lose_replies: AtomicUsize,
    /// Keyed calls running, by (caller, key): a duplicate waits for the original's
    /// outcome, as both serving harnesses (ours and the Go one) have it.
    pub running: Mutex<std::collections::HashSet<(PeerId, String)>>,
    /// What a duplicate of a running keyed call is answered at once instead, when set
    /// (a refusal that says to ask again, go-sdk's empty success).
    pub duplicate_answer: Mutex<Option<CallToolResult>>,
    /// How long each `fortune` takes, in milliseconds.
    pub fortune_ms: AtomicU64,
    /// The errors the bot's elicitations (the `elicit` tool's, the `ask` prompt's and
    /// the `test://ask` resource's) got.
    pub elicit_errors: Mutex<Vec<String>>,
    /// Every `prompts/get` (`prompt:NAME`) and `resources/read` (`resource:URI`)
    /// received.
    pub reads: Mutex<Vec<String>>,
}

impl BotState {
    pub fn balance(&self, who: &PeerId) -> u64 {
        self.balances.lock().unwrap().get(who).copied().unwrap_or(0)
    }

    pub fn credit(&self, who: PeerId, atoms: u64) {
        *self.balances.lock().unwrap().entry(who).or_default() += atoms;
    }

    pub fn executions(&self, tool: &str) -> usize {
        self.executions
            .lock()
            .unwrap()
            .get(tool)
            .copied()
            .unwrap_or(0)
    }

    /// How many times the bot received the read `what` (see [`reads`](Self::reads)).
    pub fn reads_of(&self, what: &str) -> usize {
        self.reads
            .lock()
            .unwrap()
            .iter()
            .filter(|r| *r == what)
            .count()
    }

    pub fn calls_of(&self, tool: &str) -> Vec<Option<String>> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == tool)
            .map(|(_, k)| k.clone())
            .collect()
    }
}

fn tool(value: Value) -> Tool {
    serde_json::from_value(value).expect("tool")
}

pub fn fixed_tools() -> Vec<Tool> {
    vec![
        tool(json!({
            "name": "echo",
            "title": "Echo",
            "description": "Echo the text back",
            "inputSchema": {"type": "object", "properties": {"text": {"type": "string", "description": "the text to echo back"}}, "required": ["text"], "additionalProperties": false},
            "outputSchema": {"type": "object", "properties": {"echo": {"type": "string"}}, "required": ["echo"]},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "fortune",
            "description": "A fortune, for a price",
            "inputSchema": {"type": "object", "additionalProperties": false},
            "_meta": {"brmcp/priceAtoms": FORTUNE_PRICE}
        })),
        tool(json!({
            "name": "quote",
            "description": "A dynamically priced quote",
            "inputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}},
            "_meta": {"brmcp/pricing": "dynamic"}
        })),
        tool(json!({
            "name": "fail",
            "description": "Always fails as a tool",
            "inputSchema": {"type": "object"},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "progress",
            "description": "Reports progress, then finishes",
            "inputSchema": {"type": "object", "properties": {"steps": {"type": "integer"}}},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "wait",
            "description": "Waits until cancelled",
            "inputSchema": {"type": "object"},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "sample",
            "description": "Asks the client's model",
            "inputSchema": {"type": "object", "properties": {"prompt": {"type": "string"}}},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "sample_cancel",
            "description": "Asks the client's model, then cancels the question",
            "inputSchema": {"type": "object"},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "grow",
            "description": "Adds a tool and announces the change",
            "inputSchema": {"type": "object"},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "elicit",
            "description": "Asks the user for a name, `times` times in turn",
            "inputSchema": {"type": "object", "properties": {"times": {"type": "integer"}}},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "roots",
            "description": "Lists the client's roots",
            "inputSchema": {"type": "object"},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
        tool(json!({
            "name": "log",
            "description": "Logs a line to the client",
            "inputSchema": {"type": "object", "properties": {"line": {"type": "string"}}},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
    ]
}

/// Serves the test bot as `bot_id` on `fabric`, with fresh state: its router (the
/// fabric holds routers weakly) and what it sees.
pub fn serve_test_bot(fabric: &Fabric, bot_id: PeerId) -> (Router, Arc<BotState>) {
    let bot = Arc::new(BotState::default());
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    let shared = bot.clone();
    bot_router.serve(move |peer: &PeerId| TestBot {
        state: shared.clone(),
        caller: *peer,
    });
    (bot_router, bot)
}

/// A keyed call's hold on its key while it runs: released when the run ends, or when
/// its future is dropped (its session closed under it).
struct Claim<'a>(&'a BotState, (PeerId, String));

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.running.lock().unwrap().remove(&self.1);
    }
}

/// The test bot, one per session; `caller` is the Bison Relay uid of the peer.
#[derive(Clone)]
pub struct TestBot {
    pub state: Arc<BotState>,
    pub caller: PeerId,
}

impl TestBot {
    fn price(name: &str, args: &serde_json::Map<String, Value>) -> u64 {
        match name {
            "fortune" => FORTUNE_PRICE,
            "quote" => args.get("n").and_then(Value::as_u64).unwrap_or(1),
            _ => 0,
        }
    }

    /// Asks the client for a name by elicitation, `message`: the user's action and
    /// content, or the error (kept in `elicit_errors`).
    async fn ask_name(
        &self,
        message: String,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let params: ElicitRequestParams = serde_json::from_value(json!({
            "message": message,
            "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}
        }))
        .expect("elicitation params");
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        match ctx.peer.send_request(request).await {
            Ok(ClientResult::ElicitResult(r)) => Ok(format!(
                "{} {}",
                serde_json::to_value(&r.action).unwrap_or_default(),
                r.content.unwrap_or_default()
            )),
            Ok(other) => Ok(format!("unexpected {other:?}")),
            Err(e) => {
                self.state.elicit_errors.lock().unwrap().push(e.to_string());
                Err(e.to_string())
            }
        }
    }

    /// A call past its key's claim: priced, debited, run, its outcome kept under its
    /// key; with whether its answer is to be lost.
    async fn keyed_call(
        &self,
        name: &str,
        args: &serde_json::Map<String, Value>,
        key: Option<String>,
        context: &RequestContext<RoleServer>,
    ) -> Result<(CallToolResult, bool), ErrorData> {
        let price = Self::price(name, args);
        if price > 0 {
            let mut balances = self.state.balances.lock().unwrap();
            let balance = balances.entry(self.caller).or_default();
            if *balance < price {
                let body = Shortfall::new(price, *balance * 1000).payment_required_json(name);
                return Ok((CallToolResult::error(vec![ContentBlock::text(body)]), false));
            }
            *balance -= price;
        }
        let result = self.run(name, args, context).await?;
        if let Some(key) = key {
            self.state
                .outcomes
                .lock()
                .unwrap()
                .insert((self.caller, key), result.clone());
        }
        let lose = self
            .state
            .lose_replies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        Ok((result, lose))
    }

    async fn run(
        &self,
        name: &str,
        args: &serde_json::Map<String, Value>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResult, ErrorData> {
        *self
            .state
            .executions
            .lock()
            .unwrap()
            .entry(name.to_owned())
            .or_default() += 1;
        let arg = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        Ok(match name {
            "echo" => {
                let text = arg("text");
                let mut r = CallToolResult::success(vec![ContentBlock::text(text.clone())]);
                r.structured_content = Some(json!({"echo": text}));
                r
            }
            "fortune" => {
                let n = self.state.executions("fortune");
                let ms = self.state.fortune_ms.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                CallToolResult::success(vec![ContentBlock::text(format!("fortune #{n}"))])
            }
            "quote" => CallToolResult::success(vec![ContentBlock::text("a quote")]),
            "fail" => CallToolResult::error(vec![ContentBlock::text("boom")]),
            "progress" => {
                let steps = args.get("steps").and_then(Value::as_u64).unwrap_or(3);
                if let Some(token) = ctx.meta.get_progress_token() {
                    for i in 0..steps {
                        let _ = ctx
                            .peer
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), (i + 1) as f64)
                                    .with_total(steps as f64)
                                    .with_message(format!("step {}", i + 1)),
                            )
                            .await;
                    }
                }
                CallToolResult::success(vec![ContentBlock::text(format!("done {steps}"))])
            }
            "wait" => {
                self.state.wait_started.notify_one();
                tokio::select! {
                    () = ctx.ct.cancelled() => {
                        self.state.cancelled.fetch_add(1, Ordering::SeqCst);
                        self.state.cancel_seen.notify_one();
                        CallToolResult::success(vec![ContentBlock::text("cancelled")])
                    }
                    () = tokio::time::sleep(Duration::from_secs(3600)) => {
                        CallToolResult::success(vec![ContentBlock::text("done")])
                    }
                }
            }
            "sample" => {
                let params = CreateMessageRequestParams::new(
                    vec![SamplingMessage::user_text(arg("prompt"))],
                    64,
                );
                match ctx.peer.create_message(params).await {
                    Ok(answer) => {
                        let text = serde_json::to_value(&answer.message)
                            .ok()
                            .and_then(|m| m["content"]["text"].as_str().map(str::to_owned))
                            .unwrap_or_default();
                        CallToolResult::success(vec![ContentBlock::text(format!(
                            "model said: {text}"
                        ))])
                    }
                    Err(e) => {
                        CallToolResult::error(vec![ContentBlock::text(format!("no sampling: {e}"))])
                    }
                }
            }
            "sample_cancel" => {
                let params =
                    CreateMessageRequestParams::new(vec![SamplingMessage::user_text("hang")], 8);
                let request = ServerRequest::CreateMessageRequest(
                    rmcp::model::CreateMessageRequest::new(params),
                );
                let handle = ctx
                    .peer
                    .send_cancellable_request(
                        request,
                        rmcp::service::PeerRequestOptions::no_options(),
                    )
                    .await
                    .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                let _ = handle.cancel(Some("changed my mind".into())).await;
                CallToolResult::success(vec![ContentBlock::text("sampling cancelled")])
            }
            "elicit" => {
                let times = args.get("times").and_then(Value::as_u64).unwrap_or(1);
                let mut said = Vec::new();
                for n in 1..=times {
                    match self
                        .ask_name(format!("your name? ({n} of {times})"), ctx)
                        .await
                    {
                        Ok(answer) => said.push(answer),
                        Err(e) => {
                            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                                "no elicitation: {e}"
                            ))]));
                        }
                    }
                }
                CallToolResult::success(vec![ContentBlock::text(format!(
                    "user said: {}",
                    said.join("; ")
                ))])
            }
            "roots" => match ctx.peer.list_roots().await {
                Ok(roots) => {
                    let uris: Vec<String> = roots.roots.iter().map(|r| r.uri.clone()).collect();
                    CallToolResult::success(vec![ContentBlock::text(format!(
                        "roots: {}",
                        uris.join(" ")
                    ))])
                }
                Err(e) => CallToolResult::error(vec![ContentBlock::text(format!("no roots: {e}"))]),
            },
            "grow" => {
                self.state.extra_tools.lock().unwrap().push(tool(json!({
                    "name": "grown",
                    "description": "Added at run time",
                    "inputSchema": {"type": "object"},
                    "_meta": {"brmcp/priceAtoms": 7}
                })));
                let _ = ctx.peer.notify_tool_list_changed().await;
                CallToolResult::success(vec![ContentBlock::text("grown")])
            }
            "grown" => CallToolResult::success(vec![ContentBlock::text("hello from grown")]),
            "log" => {
                let _ = ctx
                    .peer
                    .notify_logging_message(
                        LoggingMessageNotificationParam::new(
                            LoggingLevel::Warning,
                            json!(arg("line")),
                        )
                        .with_logger("testbot"),
                    )
                    .await;
                CallToolResult::success(vec![ContentBlock::text("logged")])
            }
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other:?}"),
                    None,
                ));
            }
        })
    }
}

impl ServerHandler for TestBot {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_prompts()
                .enable_completions()
                .enable_logging()
                .build(),
        )
        .with_instructions("a test bot")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut tools = fixed_tools();
        tools.extend(self.state.extra_tools.lock().unwrap().iter().cloned());
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = request.arguments.clone().unwrap_or_default();
        let key = context
            .meta
            .get("brmcp/callKey")
            .and_then(Value::as_str)
            .filter(|k| (8..=128).contains(&k.len()))
            .map(str::to_owned);
        self.state
            .calls
            .lock()
            .unwrap()
            .push((name.clone(), key.clone()));
        self.state
            .metas
            .lock()
            .unwrap()
            .push(context.meta.0.0.clone());
        let mut claim = None;
        if let Some(key) = &key {
            let slot = (self.caller, key.clone());
            loop {
                if let Some(outcome) = self.state.outcomes.lock().unwrap().get(&slot) {
                    return Ok(outcome.clone().into());
                }
                if self.state.running.lock().unwrap().insert(slot.clone()) {
                    claim = Some(Claim(&self.state, slot));
                    break;
                }
                if let Some(answer) = self.state.duplicate_answer.lock().unwrap().clone() {
                    return Ok(answer.into());
                }
                // The original is running: its outcome, or the key once it is released.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let answer = self.keyed_call(&name, &args, key.clone(), &context).await;
        drop(claim);
        let (answer, lose) = answer?;
        if lose {
            // The call ran; its answer never arrives (the session is dropped under it).
            std::future::pending::<()>().await;
        }
        Ok(answer.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(serde_json::from_value(json!({
            "resources": [{"uri": "test://hello", "name": "hello", "mimeType": "text/plain", "_meta": {"x-test": 1}}]
        }))
        .expect("resources"))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(serde_json::from_value(json!({
            "resourceTemplates": [{"uriTemplate": "test://items/{id}", "name": "item"}]
        }))
        .expect("templates"))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.state
            .reads
            .lock()
            .unwrap()
            .push(format!("resource:{}", request.uri));
        // Unlisted: read only by the tests of a bot's requests during a read.
        if request.uri == "test://ask" {
            let text = match self.ask_name("whose resource?".into(), &context).await {
                Ok(answer) => format!("user said: {answer}"),
                Err(e) => format!("no elicitation: {e}"),
            };
            return Ok(
                ReadResourceResult::new(vec![ResourceContents::text(text, request.uri)]).into(),
            );
        }
        if request.uri != "test://hello" && !request.uri.starts_with("test://items/") {
            return Err(ErrorData::resource_not_found("no such resource", None));
        }
        let text = format!("contents of {}", request.uri);
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri.clone())]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        Ok(ListPromptsResult::with_all_items(vec![Prompt::new(
            "greet",
            Some("Greets someone"),
            Some(vec![
                serde_json::from_value(json!({"name": "name", "required": true})).expect("arg"),
            ]),
        )]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        self.state
            .reads
            .lock()
            .unwrap()
            .push(format!("prompt:{}", request.name));
        // Unlisted: got only by the tests of a bot's requests during a read.
        if request.name == "ask" {
            let text = match self.ask_name("whom to greet?".into(), &context).await {
                Ok(answer) => format!("user said: {answer}"),
                Err(e) => format!("no elicitation: {e}"),
            };
            return Ok(
                GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)]).into(),
            );
        }
        let name = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("you")
            .to_owned();
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(
            Role::User,
            format!("Hello, {name}!"),
        )])
        .with_description("a greeting")
        .into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        Ok(complete_from(&["alice", "albert", "bob"], &request))
    }

    async fn set_level(
        &self,
        _request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        Ok(())
    }
}
