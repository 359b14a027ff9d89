//! The agent-facing MCP server of one bot: every request forwarded to the bot's link,
//! every answer returned as the bot gave it, and the paid-call loop around `tools/call`;
//! for agents asked through `input_required`, the requests held for their input.

#![allow(deprecated)] // sampling, roots, logging and resources/subscribe are SEP-2577-deprecated

pub(crate) mod ask;
mod call;
mod credit_gate;
mod held;
pub(crate) mod input_required;
mod read;
mod task;

pub(crate) use held::Held;

use std::sync::{Arc, Mutex, OnceLock};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientNotification, ClientRequest,
    CompleteRequest, CompleteRequestParams, CompleteResult, CustomRequest, CustomResult,
    DiscoverResult, ErrorCode, ErrorData, GetPromptRequest, GetPromptRequestParams,
    GetPromptResponse, GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult,
    ListPromptsRequest, ListPromptsResult, ListResourceTemplatesRequest,
    ListResourceTemplatesResult, ListResourcesRequest, ListResourcesResult, ListToolsRequest,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequest,
    ReadResourceRequestParams, ReadResourceResponse, RequestMetaObject, ResultType,
    RootsListChangedNotification, ServerCapabilities, ServerConfig, ServerResult, SetLevelRequest,
    SetLevelRequestParams, SubscribeRequest, SubscribeRequestParams, TASKS_EXTENSION_ID, Tool,
    UnsubscribeRequest, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, PeerRequestOptions, RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceError};
use serde_json::Value;

use brmcp_adapters::{REQUEST_TIMEOUT, is_session_lost};
use input_required::{Asks, InputAsk, MAX_ASKS_PER_CALL, Subject};

use super::Inner;
use super::link::{AgentSession, BotLink, Conn, Silence, Tracked};
use super::settings::Caller;
use brmcp_adapters::protocol::{CALL_INTERRUPTED, PriceBounds, ToolPrice, describe_bounded};

/// The `_meta` key prefix of the protocol's own per-request fields, which describe the
/// agent's request to the bridge, not the bridge's to the bot.
const PROTOCOL_META_PREFIX: &str = "io.modelcontextprotocol/";

/// The agent-facing server of one bot: one per agent session (legacy lifecycle) or
/// per request (stateless lifecycle).
#[derive(Clone)]
pub(crate) struct ProxyServer {
    bridge: Arc<Inner>,
    link: Arc<BotLink>,
    session: Arc<OnceLock<Arc<AgentSession>>>,
}

/// Retries of one logical request the bot answered [`CALL_INTERRUPTED`]: 3. The
/// harness says so once per interrupted call, after a restart; a bot that says it
/// again and again is not believed for ever.
pub(crate) const MAX_INTERRUPTED_RETRIES: u32 = 3;

/// Why a forwarded request got no answer from the bot.
enum Failure {
    /// The bot answered with a JSON-RPC error: passed on as is.
    Rpc(ErrorData),
    /// The bot says the call was interrupted and refunded: worth a retry under the
    /// same call key (see [`MAX_INTERRUPTED_RETRIES`]).
    Interrupted(ErrorData),
    /// The session to the bot failed; worth one retry on a fresh session.
    Transport(String),
    /// The agent stopped waiting (it cancelled, timed out or closed its session).
    Cancelled,
    /// The bot said nothing within the answer bound: why, as far as can be told.
    Unanswered(String),
    /// The bot asked the client something while the call waited, for an agent asked
    /// through `input_required`: the call is to be held.
    Input(Box<BotInput>),
}

/// A forwarded call waiting for the bot's answer, past the send.
struct Waiting {
    conn: Arc<Conn>,
    id: rmcp::model::RequestId,
    rx: tokio::sync::oneshot::Receiver<Result<ServerResult, ServiceError>>,
    upstream_token: rmcp::model::ProgressToken,
    sent: tokio::time::Instant,
    tracked: Tracked,
}

/// A forwarded call the bot asked the client something in: the call and the bot's
/// requests.
struct BotInput {
    waiting: Waiting,
    asks: Vec<InputAsk>,
}

/// How the wait for one answer ended.
enum Waited {
    Answer(Box<Result<Result<ServerResult, ServiceError>, tokio::sync::oneshot::error::RecvError>>),
    Cancelled,
    Silent(Silence),
    Input(Box<InputAsk>),
}

/// The next request the bot made to the client in the call, if the agent is asked
/// through `input_required`; never otherwise.
async fn next_ask(asks: &mut Option<&mut Asks>) -> Option<InputAsk> {
    match asks {
        Some(asks) => asks.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Tells the bot its request `id` is no longer waited for, `why`. Not waited for: a
/// host that cannot send (its connection down) would hold the agent's answer as long
/// as it holds the notice.
fn cancel_at_bot(conn: &Conn, id: rmcp::model::RequestId, why: &'static str) {
    let peer = conn.peer().clone();
    tokio::spawn(async move {
        let notice = rmcp::model::CancelledNotificationParam::new(Some(id), Some(why.into()));
        let _ = peer.notify_cancelled(notice).await;
    });
}

impl From<Failure> for ErrorData {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Rpc(e) | Failure::Interrupted(e) => e,
            Failure::Transport(e) => Self::internal_error(format!("bot unavailable: {e}"), None),
            Failure::Cancelled => Self::new(ErrorCode::INTERNAL_ERROR, "request cancelled", None),
            Failure::Unanswered(why) => Self::internal_error(why, None),
            Failure::Input(_) => Self::internal_error("the bot's request was not relayed", None),
        }
    }
}

/// What the sends of one logical request (a call and its reissues) have used up.
#[derive(Default, Clone, Copy)]
struct Attempts {
    /// The one retry on a fresh session after a failed one.
    transport: bool,
    /// Retries after the bot's [`CALL_INTERRUPTED`].
    interrupted: u32,
    /// The bot answered something for the request (an answer, progress) or was heard
    /// on the session while it waited: the answer bound no longer applies.
    heard: bool,
}

/// The agent's `_meta` without its progress token and protocol fields.
fn forwarded_meta(meta: &RequestMetaObject) -> RequestMetaObject {
    let mut out = RequestMetaObject::new();
    for (k, v) in meta.iter() {
        if k == "progressToken" || k.starts_with(PROTOCOL_META_PREFIX) {
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    out
}

/// Converts a result to the type the method answers with. The bot's answer arrives as
/// an untagged union; going through JSON lands it in the expected type whichever
/// variant it was read as.
fn expect<T: serde::de::DeserializeOwned>(result: ServerResult) -> Result<T, ErrorData> {
    super::reshape(result, "bot's answer")
}

/// `resultType: "complete"` where the bot (on an older protocol) left it out; rmcp
/// strips it again for agents on older protocols.
fn complete(result_type: &mut Option<ResultType>) {
    result_type.get_or_insert(ResultType::COMPLETE);
}

/// [`expect`] for the results that carry a `resultType`, [`complete`] where missing.
fn expect_complete<T: serde::de::DeserializeOwned>(result: ServerResult) -> Result<T, ErrorData> {
    let answer =
        |e: serde_json::Error| ErrorData::internal_error(format!("bot's answer: {e}"), None);
    let mut value = serde_json::to_value(result).map_err(answer)?;
    if let Value::Object(fields) = &mut value
        && !fields.contains_key("resultType")
    {
        let complete = serde_json::to_value(ResultType::COMPLETE).map_err(answer)?;
        fields.insert("resultType".into(), complete);
    }
    serde_json::from_value(value).map_err(answer)
}

/// Who made the request: the agent the HTTP gate identified by its token (in the
/// request's parts), else the default agent (stdio, or a waived token).
fn caller(ctx: &RequestContext<RoleServer>) -> Caller {
    ctx.extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Caller>())
        .cloned()
        .unwrap_or(Caller::Default)
}

impl ProxyServer {
    pub(crate) fn new(bridge: Arc<Inner>, link: Arc<BotLink>) -> Self {
        Self {
            bridge,
            link,
            session: Arc::new(OnceLock::new()),
        }
    }

    /// The session to the bot, while the agent waits for it.
    async fn conn(&self, ctx: &RequestContext<RoleServer>) -> Result<Arc<Conn>, Failure> {
        tokio::select! {
            biased;
            () = ctx.ct.cancelled() => Err(Failure::Cancelled),
            conn = self.link.ensure() => conn.map_err(|e| Failure::Transport(e.to_string())),
        }
    }

    /// Sends one request to the bot and waits for its answer, relaying progress and
    /// the agent's cancellation. Until the bot answers or sends progress of its own, an
    /// agent that asked for progress hears what it waits for. While the bot has said
    /// nothing for the logical request (`attempts.heard`), a bot that said nothing at
    /// all on the session since the send fails the request past the answer bound, with
    /// the reason, and the request is cancelled at the bot. With `asks` (an agent asked
    /// through `input_required`), a request the bot makes to the client meanwhile ends
    /// the wait with [`Failure::Input`].
    async fn forward_once(
        &self,
        conn: &Arc<Conn>,
        request: ClientRequest,
        meta: RequestMetaObject,
        ctx: &RequestContext<RoleServer>,
        attempts: &mut Attempts,
        asks: Option<&mut Asks>,
    ) -> Result<ServerResult, Failure> {
        // The agent's wait is the call's life: nothing is sent for a request it no
        // longer waits for.
        if ctx.ct.is_cancelled() {
            return Err(Failure::Cancelled);
        }
        let hub = &self.link.hub;
        let inputs = asks.as_ref().map(|a| a.inputs.clone());
        let tracked = hub.track(&ctx.peer, &ctx.id, self.session().is_none(), inputs);
        let options = PeerRequestOptions::no_options().with_meta(meta);
        let handle = conn
            .peer()
            .send_request_with_option(request, options)
            .await
            .map_err(|e| Failure::Transport(e.to_string()))?;
        let waiting = Waiting {
            conn: conn.clone(),
            id: handle.id.clone(),
            upstream_token: handle.progress_token.clone(),
            rx: handle.rx,
            sent: tokio::time::Instant::now(),
            tracked,
        };
        self.wait(waiting, ctx, attempts, asks).await
    }

    /// Waits for the bot's answer to a sent request (see
    /// [`forward_once`](Self::forward_once)).
    async fn wait(
        &self,
        waiting: Waiting,
        ctx: &RequestContext<RoleServer>,
        attempts: &mut Attempts,
        mut asks: Option<&mut Asks>,
    ) -> Result<ServerResult, Failure> {
        let hub = &self.link.hub;
        let Waiting {
            conn,
            id,
            mut rx,
            upstream_token,
            sent,
            tracked,
        } = waiting;
        let agent_token = ctx.meta.get_progress_token();
        let route = agent_token.clone().map(|token| {
            hub.route_progress(conn.serial, upstream_token.clone(), ctx.peer.clone(), token)
        });
        let bound = self.bridge.config.answer_bound;
        let bot = self.bridge.settings().bot_label(&self.link.bot);
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + ask::PROGRESS_INTERVAL,
            ask::PROGRESS_INTERVAL,
        );
        let mut ticks: u32 = 0;
        let waited = loop {
            let silent = !attempts.heard;
            let bot_progress = route.as_ref().is_some_and(|r| r.heard());
            tokio::select! {
                biased;
                () = ctx.ct.cancelled() => break Waited::Cancelled,
                answer = &mut rx => {
                    attempts.heard = true;
                    break Waited::Answer(Box::new(answer));
                }
                Some(asked) = next_ask(&mut asks) => {
                    attempts.heard = true;
                    break Waited::Input(Box::new(asked));
                }
                () = tokio::time::sleep_until(sent + bound), if silent => {
                    if bot_progress || conn.watch.heard_since(sent) {
                        // The bot is there and has the session: the call runs.
                        attempts.heard = true;
                    } else {
                        break Waited::Silent(Silence::of(&conn.watch));
                    }
                }
                // Until the bot's own progress for the call takes over.
                _ = tick.tick(), if !bot_progress && agent_token.is_some() => {
                    ticks = ticks.saturating_add(1);
                    if let Some(token) = &agent_token {
                        let progress = ProgressNotificationParam::new(token.clone(), f64::from(ticks))
                            .with_message(format!("waiting for an answer from bot {bot}"));
                        // A progress the agent cannot take changes nothing about the call.
                        let _ = ctx.peer.notify_progress(progress).await;
                    }
                }
            }
        };
        match &route {
            Some(route) => {
                hub.finish_progress(conn.serial, &upstream_token, route)
                    .await
            }
            None => hub.drop_progress(conn.serial, &upstream_token),
        }
        tracked.flush().await;
        let answer = match waited {
            Waited::Answer(answer) => *answer,
            Waited::Input(first) => {
                let mut asked = vec![*first];
                if let Some(asks) = asks {
                    while asked.len() < MAX_ASKS_PER_CALL
                        && let Ok(more) = asks.rx.try_recv()
                    {
                        asked.push(more);
                    }
                }
                let waiting = Waiting {
                    conn,
                    id,
                    rx,
                    upstream_token,
                    sent,
                    tracked,
                };
                return Err(Failure::Input(Box::new(BotInput {
                    waiting,
                    asks: asked,
                })));
            }
            Waited::Cancelled | Waited::Silent(_) => {
                let why = match waited {
                    Waited::Silent(_) => "no answer in time",
                    _ => "cancelled by the agent",
                };
                // A bridge that is stopping leaves the call running at the bot, for the
                // next start to collect (`bridge::calls`).
                if !self.bridge.calls.closing() {
                    cancel_at_bot(&conn, id, why);
                }
                return Err(match waited {
                    Waited::Silent(why) => {
                        tracing::info!(%bot, waited = ?bound, %why, "bot did not answer");
                        Failure::Unanswered(format!(
                            "bot {bot} did not answer within {bound:?}: {why}"
                        ))
                    }
                    _ => Failure::Cancelled,
                });
            }
        };
        match answer {
            Ok(Ok(result)) => Ok(result),
            // No answer in time, or the bot lost the session and it could not be
            // re-established on it (whatever the bot's implementation): whether the
            // call ran is unknown, which is what the call key is for.
            Ok(Err(ServiceError::McpError(e)))
                if e.code == REQUEST_TIMEOUT || is_session_lost(&e) =>
            {
                Err(Failure::Transport(e.message.to_string()))
            }
            Ok(Err(ServiceError::McpError(e))) if e.code == CALL_INTERRUPTED => {
                Err(Failure::Interrupted(e))
            }
            Ok(Err(ServiceError::McpError(e))) => Err(Failure::Rpc(e)),
            Ok(Err(e)) => Err(Failure::Transport(e.to_string())),
            Err(_) => Err(Failure::Transport("session to the bot closed".into())),
        }
    }

    /// [`forward`](Self::forward), the answer as `T` (see [`expect_complete`]).
    async fn forward_complete<T: serde::de::DeserializeOwned>(
        &self,
        request: impl Into<ClientRequest>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<T, ErrorData> {
        expect_complete(self.forward(request.into(), ctx).await?)
    }

    /// Forwards a request, retrying once on a fresh session if the session failed.
    async fn forward(
        &self,
        request: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, Failure> {
        let meta = forwarded_meta(&ctx.meta);
        self.forward_retrying(&request, &meta, ctx, &mut Attempts::default(), None, None)
            .await
    }

    /// Sends `request` with `meta` while the agent waits (or waits on in `resume`, a
    /// held call's send): on a failed session, once per `attempts` (which span every
    /// send of one logical call), again on a fresh session; on the bot's
    /// [`CALL_INTERRUPTED`], again at once, at most [`MAX_INTERRUPTED_RETRIES`] times.
    async fn forward_retrying(
        &self,
        request: &ClientRequest,
        meta: &RequestMetaObject,
        ctx: &RequestContext<RoleServer>,
        attempts: &mut Attempts,
        mut asks: Option<&mut Asks>,
        mut resume: Option<Waiting>,
    ) -> Result<ServerResult, Failure> {
        loop {
            let (conn, answer) = match resume.take() {
                Some(waiting) => {
                    let conn = waiting.conn.clone();
                    let answer = self.wait(waiting, ctx, attempts, asks.as_deref_mut()).await;
                    (conn, answer)
                }
                None => {
                    let conn = self.conn(ctx).await?;
                    let answer = self
                        .forward_once(
                            &conn,
                            request.clone(),
                            meta.clone(),
                            ctx,
                            attempts,
                            asks.as_deref_mut(),
                        )
                        .await;
                    (conn, answer)
                }
            };
            match answer {
                // A call keeps its key: if an earlier attempt ran, the bot replays its
                // outcome; if it was refunded, the retry normally runs on that credit.
                Err(Failure::Transport(e)) if !attempts.transport => {
                    tracing::debug!(bot = %self.link.bot, error = %e, "retrying on a fresh session");
                    attempts.transport = true;
                    self.link.reset(&conn);
                }
                Err(Failure::Interrupted(e)) if attempts.interrupted < MAX_INTERRUPTED_RETRIES => {
                    tracing::info!(bot = %self.link.bot, reason = %e.message, "call interrupted at the bot; retrying it");
                    attempts.interrupted += 1;
                }
                other => return other,
            }
        }
    }

    fn mirrored_info(&self) -> ServerConfig {
        let Some(about) = self.link.about() else {
            return ServerConfig::new(
                ServerCapabilities::builder()
                    .enable_tools()
                    .enable_tasks()
                    .build(),
            );
        };
        let upstream = &about.info;
        let mut capabilities = upstream.capabilities.clone();
        // Extensions (tasks, skills) and experimental features are not proxied.
        capabilities.extensions = None;
        capabilities.experimental = None;
        // The bridge's own tasks (the journal's calls), not the bot's.
        capabilities
            .extensions
            .get_or_insert_with(Default::default)
            .insert(TASKS_EXTENSION_ID.to_owned(), Default::default());
        let mut info = ServerConfig::new(capabilities);
        if let Some(server_info) = &upstream.server_info {
            info = info.with_server_info(server_info.clone());
        }
        info.instructions.clone_from(&upstream.instructions);
        info
    }

    fn session(&self) -> Option<&Arc<AgentSession>> {
        self.session.get()
    }
}

impl ProxyServer {
    /// A dynamically priced tool listed to the agent: its bound is what the bridge
    /// pays a quote within from now on, and its description ends with it (the model
    /// rarely sees `_meta`, as for the prices a harness writes there).
    fn show_price_bound(&self, tool: &mut Tool) {
        let meta = tool.meta.as_deref();
        if !matches!(ToolPrice::from_meta(meta), Ok(Some(ToolPrice::Dynamic))) {
            return;
        }
        let Ok(bounds) = PriceBounds::from_meta(meta) else {
            return;
        };
        self.link.hub.show_bound(&tool.name, bounds);
        if let Some(described) = describe_bounded(tool.description.as_deref(), &bounds) {
            tool.description = Some(described.into());
        }
    }

    /// The calls a minute the bot's live session says it allows each caller, which the
    /// agents' fair shares divide; `None` without a session, when it does not say (a
    /// Go bot) or says it malformed.
    fn bot_calls_per_minute(&self) -> Option<u32> {
        self.link.about()?.calls_per_minute
    }
}

impl ServerHandler for ProxyServer {
    fn get_info(&self) -> ServerConfig {
        self.mirrored_info()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        self.link
            .ensure()
            .await
            .map_err(|e| ErrorData::internal_error(format!("bot unavailable: {e}"), None))?;
        context.peer.set_peer_info(request.clone());
        let session = Arc::new(AgentSession {
            peer: context.peer.clone(),
            subscriptions: Mutex::default(),
        });
        self.link.hub.add_session(&session);
        let _ = self.session.set(session);
        self.negotiate_initialize(&request)
    }

    async fn discover(
        &self,
        _context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, ErrorData> {
        self.link
            .ensure()
            .await
            .map_err(|e| ErrorData::internal_error(format!("bot unavailable: {e}"), None))?;
        Ok(DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        self.forward_complete(CompleteRequest::new(request), &context)
            .await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.forward(
            ClientRequest::SetLevelRequest(SetLevelRequest::new(request)),
            &context,
        )
        .await?;
        Ok(())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let subject = Subject::Prompt(request.name.clone());
        let state = request.request_state.clone();
        let responses = request.input_responses.clone();
        let request = ClientRequest::GetPromptRequest(GetPromptRequest::new(request));
        match self
            .read(request, subject, state.as_deref(), responses, &context)
            .await?
        {
            ServerResult::InputRequiredResult(r) => Ok(GetPromptResponse::InputRequired(r)),
            other => Ok(GetPromptResponse::Complete(expect_complete(other)?)),
        }
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let request = ListPromptsRequest {
            params: request,
            ..Default::default()
        };
        self.forward_complete(request, &context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let request = ListResourcesRequest {
            params: request,
            ..Default::default()
        };
        self.forward_complete(request, &context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let request = ListResourceTemplatesRequest {
            params: request,
            ..Default::default()
        };
        self.forward_complete(request, &context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let subject = Subject::Resource(request.uri.clone());
        let state = request.request_state.clone();
        let responses = request.input_responses.clone();
        let request = ClientRequest::ReadResourceRequest(ReadResourceRequest::new(request));
        match self
            .read(request, subject, state.as_deref(), responses, &context)
            .await?
        {
            ServerResult::InputRequiredResult(r) => Ok(ReadResourceResponse::InputRequired(r)),
            other => Ok(ReadResourceResponse::Complete(expect_complete(other)?)),
        }
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri.clone();
        self.forward(
            ClientRequest::SubscribeRequest(SubscribeRequest::new(request)),
            &context,
        )
        .await?;
        if let Some(session) = self.session() {
            super::lock(&session.subscriptions).insert(uri);
        }
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let uri = request.uri.clone();
        self.forward(
            ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(request)),
            &context,
        )
        .await?;
        if let Some(session) = self.session() {
            super::lock(&session.subscriptions).remove(&uri);
        }
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // One agent's flood is refused here, before it spends the bot's limit.
        let retry = request.request_state.is_some();
        let bot_limit = self.bot_calls_per_minute();
        let admitted = super::fair_share::admit(
            &self.bridge,
            &caller(&context),
            &self.link.bot,
            bot_limit,
            retry,
        );
        if task::declares_tasks(&context) && request.request_state.is_none() {
            return self.call_as_task(request, admitted.err(), &context).await;
        }
        if let Err(over) = admitted {
            return Ok(CallToolResponse::Complete(over));
        }
        self.call(request, &context).await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.get_task_of(&request, &context)
    }

    async fn update_task(
        &self,
        request: UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.update_task_of(request, &context)
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.cancel_task_of(&request, &context)
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let request = ListToolsRequest {
            params: request,
            ..Default::default()
        };
        let mut listed: ListToolsResult = self.forward_complete(request, &context).await?;
        for tool in &mut listed.tools {
            self.show_price_bound(tool);
        }
        Ok(listed)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.link
            .hub
            .tools()
            .iter()
            .find(|t| t.name == name)
            .cloned()
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let r = self
            .forward(ClientRequest::CustomRequest(request), &context)
            .await?;
        expect(r)
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        if let Some(conn) = self.link.running().await {
            let notification = ClientNotification::RootsListChangedNotification(
                RootsListChangedNotification::default(),
            );
            let _ = conn.peer().send_notification(notification).await;
        }
    }
}
