//! The agent-facing MCP server of one bot: every request forwarded to the bot's link,
//! every answer returned as the bot gave it, and the paid-call loop around `tools/call`;
//! for agents asked through `input_required`, the requests held for their input.

#![allow(deprecated)] // sampling, roots, logging and resources/subscribe are SEP-2577-deprecated

pub(crate) mod ask;
mod call;
mod credit_gate;
mod forward;
mod held;
pub(crate) mod input_required;
mod read;
pub(crate) mod reask;
mod task;

pub(crate) use forward::MAX_INTERRUPTED_RETRIES;
use forward::{Attempts, BotInput, Failure, Waiting, cancel_at_bot};
pub(crate) use held::Held;

use std::sync::{Arc, Mutex, OnceLock};

use rmcp::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientNotification, ClientRequest,
    CompleteRequest, CompleteRequestParams, CompleteResult, CustomRequest, CustomResult,
    DiscoverResult, ErrorData, GetPromptRequest, GetPromptRequestParams, GetPromptResponse,
    GetTaskParams, GetTaskResult, InitializeRequestParams, InitializeResult, ListPromptsRequest,
    ListPromptsResult, ListResourceTemplatesRequest, ListResourceTemplatesResult,
    ListResourcesRequest, ListResourcesResult, ListToolsRequest, ListToolsResult,
    PaginatedRequestParams, ReadResourceRequest, ReadResourceRequestParams, ReadResourceResponse,
    RequestMetaObject, ResultType, RootsListChangedNotification, ServerCapabilities, ServerConfig,
    ServerResult, SetLevelRequest, SetLevelRequestParams, SubscribeRequest, SubscribeRequestParams,
    TASKS_EXTENSION_ID, Tool, UnsubscribeRequest, UnsubscribeRequestParams, UpdateTaskParams,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use serde_json::Value;

use input_required::Subject;

use super::Inner;
use super::link::{AgentSession, BotLink};
use super::settings::Caller;
use brmcp_adapters::protocol::{PriceBounds, ToolPrice, describe_bounded};

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
