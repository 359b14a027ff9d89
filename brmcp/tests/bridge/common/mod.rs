//! Shared pieces of the bridge tests: a small paid MCP bot (until the serving harness
//! lands), a payer that "tips" it, and the fabric + bot + bridge set-up.
//!
//! The bot follows WIRE.md §10: tools list `_meta["brmcp/priceAtoms"]`; an unfunded
//! paid call gets exactly the `payment_required` result; a funded one is debited; a
//! call key (`brmcp/callKey`, 8 to 128 bytes) runs and charges a call at most once per
//! caller and replays its outcome; a refused call does not consume its key.
#![allow(dead_code, unreachable_pub, missing_docs, deprecated)]

pub mod conformance;
pub mod harness_bot;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, PeerId, RouterConfig};
use brmcp::bridge::{Bridge, Config, Mode, Payer, Settings};
use brmcp::server::Shortfall;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    CompletionInfo, ContentBlock, CreateMessageRequestParams, ErrorData, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, LoggingLevel, LoggingMessageNotificationParam,
    PaginatedRequestParams, ProgressNotificationParam, Prompt, PromptMessage,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, ResourceContents, Role,
    SamplingMessage, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::Notify;

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
            "name": "log",
            "description": "Logs a line to the client",
            "inputSchema": {"type": "object", "properties": {"line": {"type": "string"}}},
            "_meta": {"brmcp/priceAtoms": 0}
        })),
    ]
}

/// The test bot, one per session; `caller` is the Bison Relay uid of the peer.
#[derive(Clone)]
pub struct TestBot {
    pub state: Arc<BotState>,
    pub caller: PeerId,
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

impl TestBot {
    fn price(name: &str, args: &serde_json::Map<String, Value>) -> u64 {
        match name {
            "fortune" => FORTUNE_PRICE,
            "quote" => args.get("n").and_then(Value::as_u64).unwrap_or(1),
            _ => 0,
        }
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
                let request = rmcp::model::ServerRequest::CreateMessageRequest(
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
        if let Some(key) = &key
            && let Some(outcome) = self
                .state
                .outcomes
                .lock()
                .unwrap()
                .get(&(self.caller, key.clone()))
        {
            return Ok(outcome.clone().into());
        }
        let price = Self::price(&name, &args);
        if price > 0 {
            let mut balances = self.state.balances.lock().unwrap();
            let balance = balances.entry(self.caller).or_default();
            if *balance < price {
                let body = Shortfall::new(price, *balance * 1000).payment_required_json(&name);
                return Ok(CallToolResult::error(vec![ContentBlock::text(body)]).into());
            }
            *balance -= price;
        }
        let result = self.run(&name, &args, &context).await?;
        if let Some(key) = key {
            self.state
                .outcomes
                .lock()
                .unwrap()
                .insert((self.caller, key), result.clone());
        }
        if self
            .state
            .lose_replies
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            // The call ran; its answer never arrives (the session is dropped under it).
            std::future::pending::<()>().await;
        }
        Ok(result.into())
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
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
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
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
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

/// How the test payer behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayMode {
    /// Credit the bot at once and succeed.
    Credit,
    /// Succeed, but credit the bot only after this delay (credit in flight).
    CreditLate(Duration),
    /// Succeed without ever crediting.
    NeverCredit,
    /// Fail with "no route to bot".
    Fail,
    /// Never settle.
    Hang,
    /// Give up waiting: [`brmcp::bridge::PaymentUnconfirmed`].
    Unconfirmed,
}

/// What the payer did.
pub struct PayerState {
    pub bot: Arc<BotState>,
    pub payer_id: PeerId,
    pub mode: Mutex<PayMode>,
    /// Payments asked for: (bot, atoms).
    pub payments: Mutex<Vec<(PeerId, u64)>>,
}

impl PayerState {
    pub fn count(&self) -> usize {
        self.payments.lock().unwrap().len()
    }
}

#[derive(Clone)]
pub struct TestPayer(pub Arc<PayerState>);

impl Payer for TestPayer {
    async fn pay(&self, bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.0.payments.lock().unwrap().push((bot, atoms));
        let mode = *self.0.mode.lock().unwrap();
        match mode {
            PayMode::Credit => {
                self.0.bot.credit(self.0.payer_id, atoms);
                Ok(())
            }
            PayMode::CreditLate(delay) => {
                let state = self.0.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    state.bot.credit(state.payer_id, atoms);
                });
                Ok(())
            }
            PayMode::NeverCredit => Ok(()),
            PayMode::Fail => Err("no route to bot".into()),
            PayMode::Hang => std::future::pending().await,
            PayMode::Unconfirmed => Err(brmcp::bridge::PaymentUnconfirmed.into()),
        }
    }
}

/// A fabric with the test bot and a bridge, set up for one test.
pub struct Env {
    pub fabric: Fabric,
    /// The bot's router (the fabric holds routers weakly).
    pub bot_router: brmcp::adapters::Router,
    pub bot_id: PeerId,
    pub bridge_id: PeerId,
    pub bot: Arc<BotState>,
    pub payer: Arc<PayerState>,
    pub bridge: Bridge,
    pub dir: tempfile::TempDir,
}

/// Settings with the bot allowed, autopay, generous caps.
pub fn autopay(bot: PeerId) -> Settings {
    let mut s = Settings::default();
    s.mode = Mode::Autopay;
    s.per_call_cap_atoms = 10_000;
    s.per_day_cap_atoms = 100_000;
    s.allowed_bots = vec![bot.to_string()];
    s
}

pub fn base_config(dir: &std::path::Path) -> Config {
    let mut config = Config::new(dir).with_listen("127.0.0.1:0".parse().unwrap());
    config.connect_timeout = Duration::from_secs(5);
    config.retry_after = Duration::from_millis(200);
    config.poll_interval = Duration::from_millis(50);
    config
}

/// A fabric, the test bot serving on it, and a bridge with `settings` (made from the
/// bot's uid) and `config`.
pub async fn env_with(
    settings: impl FnOnce(PeerId) -> Settings,
    config: impl FnOnce(Config) -> Config,
) -> Env {
    env_full(settings, config, RouterConfig::client()).await
}

/// As [`env_with`], with the bridge's router config too.
pub async fn env_full(
    settings: impl FnOnce(PeerId) -> Settings,
    config: impl FnOnce(Config) -> Config,
    router_config: RouterConfig,
) -> Env {
    let fabric = Fabric::new(7);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let bot = Arc::new(BotState::default());
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    let shared = bot.clone();
    bot_router.serve(move |peer: &PeerId| TestBot {
        state: shared.clone(),
        caller: *peer,
    });
    let client_router = fabric.router(bridge_id, router_config);
    let payer = Arc::new(PayerState {
        bot: bot.clone(),
        payer_id: bridge_id,
        mode: Mutex::new(PayMode::Credit),
        payments: Mutex::default(),
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let bridge = Bridge::new(
        config(base_config(dir.path())),
        client_router,
        TestPayer(payer.clone()),
    )
    .expect("bridge");
    bridge
        .apply_settings(settings(bot_id))
        .await
        .expect("settings");
    Env {
        fabric,
        bot_router,
        bot_id,
        bridge_id,
        bot,
        payer,
        bridge,
        dir,
    }
}

pub async fn env(settings: impl FnOnce(PeerId) -> Settings) -> Env {
    env_with(settings, |c| c).await
}

pub type Agent<H = ()> = RunningService<RoleClient, H>;

/// An MCP client (legacy lifecycle) talking to the bridge's proxy of the test bot over
/// an in-memory pipe, as an agent on stdio would.
pub async fn agent_with<H: ClientHandler>(env: &Env, handler: H) -> Agent<H> {
    connect(&env.bridge, env.bot_id, handler).await
}

/// An MCP client talking to `bridge`'s proxy of `bot` over an in-memory pipe.
pub async fn connect<H: ClientHandler>(bridge: &Bridge, bot: PeerId, handler: H) -> Agent<H> {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let bridge = bridge.clone();
    tokio::spawn(async move {
        if let Err(e) = bridge.serve(&bot, server_end).await {
            eprintln!("bridge serve ended: {e}");
        }
    });
    handler.serve(client_end).await.expect("agent initialize")
}

pub async fn agent(env: &Env) -> Agent {
    agent_with(env, ()).await
}

/// `tools/call` params.
pub fn call(name: &'static str, args: Value) -> CallToolRequestParams {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    CallToolRequestParams::new(name).with_arguments(args)
}

/// The concatenated text content of a result, one item per line.
pub fn text(result: &CallToolResult) -> String {
    text_of(result)
}

/// A raw HTTP/1.1 exchange with the bridge's listener: status, headers, body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: 127.0.0.1:{}\r\n", addr.port()));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw)).await;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

/// A JSON-RPC `initialize` body for raw HTTP tests.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// Waits until `cond` holds, polling every 10 ms, up to `limit`.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// The candidates that start with the argument's value, as a completion result.
pub fn complete_from(candidates: &[&str], request: &CompleteRequestParams) -> CompleteResult {
    let prefix = &request.argument.value;
    let values: Vec<String> = candidates
        .iter()
        .filter(|v| v.starts_with(prefix.as_str()))
        .map(|v| (*v).to_owned())
        .collect();
    CompleteResult::new(CompletionInfo::new(values).expect("completion"))
}
