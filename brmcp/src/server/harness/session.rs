//! One MCP session: an rmcp server on behalf of the peer that opened it.

use std::sync::{Arc, Weak};

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol;
use brmcp_adapters::wire::SessionId;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelledNotificationParam, GetPromptRequestParams,
    GetPromptResponse, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ErrorData, ServerHandler};

use super::call::{Call, refusal};
use super::stop::{STOPPED_NOTICE, STOPPING, Stop};
use super::{Counters, Shared};
use crate::server::call_key::{ArgsHash, CALL_KEY_META, CallKey};
use crate::server::catalog::Catalog;
use crate::server::rate_limit::RATE_LIMITED;
use brmcp_adapters::protocol::CALL_INTERRUPTED;

/// One session: an rmcp server on behalf of the peer that opened it.
pub(super) struct Session {
    pub(super) shared: Weak<Shared>,
    pub(super) caller: PeerId,
    /// The session's id: kept with a charge, so that a restarted harness can tell the
    /// caller its call was interrupted.
    pub(super) sid: SessionId,
}

impl Session {
    fn shared(&self) -> Result<Arc<Shared>, ErrorData> {
        self.shared
            .upgrade()
            .ok_or_else(|| ErrorData::internal_error("server shutting down", None))
    }

    /// The catalog for one request of the part `offered` selects: method not found
    /// when it is not offered, refused by the rate limit like a call.
    fn catalog(
        &self,
        context: &RequestContext<RoleServer>,
        offered: impl Fn((bool, bool)) -> bool,
    ) -> Result<Arc<dyn Catalog>, ErrorData> {
        let shared = self.shared()?;
        let Some(catalog) = shared.catalog.clone().filter(|c| offered(c.offers())) else {
            return Err(ErrorData::new(
                rmcp::model::ErrorCode::METHOD_NOT_FOUND,
                "not offered by this server",
                None,
            ));
        };
        shared.listen(self.caller, &context.peer);
        if !shared
            .limiter
            .try_take(&self.caller, shared.clock.since_epoch())
        {
            Counters::bump(&shared.counters.rate_limited);
            return Err(ErrorData::invalid_request(RATE_LIMITED, None));
        }
        Ok(catalog)
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        let Some(shared) = self.shared.upgrade() else {
            return ServerConfig::default();
        };
        let mut info = shared.info.clone();
        // The limit as it is now (brmcp.json is read live): bridges divide it among
        // their agents.
        let mut meta = info.meta.take().unwrap_or_default();
        protocol::advertise_calls_per_minute(&mut meta.0, shared.limiter.calls_per_minute());
        info.meta = Some(meta);
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let shared = self.shared()?;
        shared.listen(self.caller, &context.peer);
        Ok(ListToolsResult::with_all_items(
            shared.visible_tools(&self.caller),
        ))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let catalog = self.catalog(&context, |(resources, _)| resources)?;
        Ok(ListResourcesResult::with_all_items(
            catalog.list_resources().await?,
        ))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let catalog = self.catalog(&context, |(resources, _)| resources)?;
        Ok(ListResourceTemplatesResult::with_all_items(
            catalog.list_resource_templates().await?,
        ))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let catalog = self.catalog(&context, |(resources, _)| resources)?;
        Ok(catalog.read_resource(request).await?.into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let catalog = self.catalog(&context, |(_, prompts)| prompts)?;
        Ok(ListPromptsResult::with_all_items(
            catalog.list_prompts().await?,
        ))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let catalog = self.catalog(&context, |(_, prompts)| prompts)?;
        Ok(catalog.get_prompt(request).await?.into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        if let Ok(shared) = self.shared() {
            shared.listen(self.caller, &context.peer);
        }
    }

    /// An explicit cancellation of a duplicate waiting for its original cancels the
    /// original's run (`calls`); rmcp cancels the request's own token meanwhile.
    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        let (Ok(shared), Some(id)) = (self.shared(), notification.request_id) else {
            return;
        };
        if shared.waiting.cancel(&(self.sid, id)) {
            tracing::info!(caller = %self.caller, "a waiting duplicate was cancelled: its original's run is cancelled");
        }
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let shared = self.shared.upgrade()?;
        shared
            .visible_tool(&self.caller, name)
            .map(|(_, spec)| spec.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let shared = self.shared()?;
        let Some((tool, spec)) = shared.visible_tool(&self.caller, &request.name) else {
            return Err(ErrorData::invalid_params(
                format!("unknown tool {:?}", request.name),
                None,
            ));
        };
        // A key that is not a string of 8 to 128 bytes is ignored (WIRE.md §10).
        let key = context
            .meta
            .get(CALL_KEY_META)
            .or_else(|| request.meta.as_ref().and_then(|m| m.get(CALL_KEY_META)))
            .and_then(serde_json::Value::as_str)
            .and_then(|key| CallKey::new(key).ok());
        let args = ArgsHash::of_arguments(request.arguments.as_ref());
        let keyed = key.map(|key| (key, args));
        let prepared = match spec.prepare(request.arguments) {
            Ok(prepared) => prepared,
            Err(message) => {
                // Refused before its charge (the tool unavailable, say its upstream
                // down): credit reserved for it goes back to the balance.
                shared.release_reserved(self.caller, keyed.as_ref()).await;
                return Ok(refusal(message).into());
            }
        };
        Counters::bump(&shared.counters.calls);
        let (started, price) = (std::time::Instant::now(), Arc::default());
        let call = Call {
            caller: self.caller,
            tool,
            keyed,
            args,
            origin: (self.sid, context.id.clone()),
            priced: Arc::clone(&price),
        };
        let name = call.tool.clone();
        let cancelled = context.ct.clone();
        let request_id = context.id.clone();
        let result = match Arc::clone(&shared).call(call, prepared, context).await {
            Ok(result) => result,
            Err(Stop::Refused(mark)) => {
                let refused = ErrorData::new(CALL_INTERRUPTED, STOPPING, None);
                let told = shared
                    .tell_refused(self.caller, self.sid, request_id, mark)
                    .await;
                if told {
                    // Answered on the session already; this request ends with it
                    // (holding nothing of the harness meanwhile).
                    drop(shared);
                    cancelled.cancelled().await;
                }
                return Err(refused);
            }
            Err(Stop::Answered) => {
                // A graceful stop took the call and answers it on the session itself;
                // this request sends nothing more, and ends with the session.
                drop(shared);
                cancelled.cancelled().await;
                return Err(ErrorData::new(CALL_INTERRUPTED, STOPPED_NOTICE, None));
            }
        };
        crate::server::call_log::log_call(
            &self.caller,
            &name,
            price.get().copied(),
            &result,
            started.elapsed(),
        );
        Ok(result.into())
    }
}
