//! The bridge's client handler toward a bot: relays the bot's requests to an agent
//! and its notifications to the agent sessions.

#![allow(deprecated)] // sampling and roots are SEP-2577-deprecated; still relayed

use std::sync::Arc;

use rmcp::ClientHandler;
use rmcp::model::{
    ClientConfig, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
    CreateMessageResult, CustomRequest, CustomResult, ElicitRequest, ElicitRequestParams,
    ElicitResult, ErrorData, ListRootsRequest, ListRootsResult, ResourceUpdatedNotificationParam,
    ServerRequest,
};
use rmcp::service::{NotificationContext, RequestContext, RoleClient};

use super::hub::{AgentSession, Hub};
use super::list_all_tools;
use crate::bridge::lock;

/// The bridge's client side toward a bot: relays what the bot sends on its own.
#[derive(Clone)]
pub(super) struct LinkHandler {
    pub(super) hub: Arc<Hub>,
    pub(super) info: ClientConfig,
}

impl LinkHandler {
    async fn each_session<F, Fut>(&self, f: F)
    where
        F: Fn(Arc<AgentSession>) -> Fut,
        Fut: Future<Output = ()>,
    {
        for session in self.hub.live_sessions() {
            f(session).await;
        }
    }
}

fn expect<T: serde::de::DeserializeOwned>(result: ClientResult) -> Result<T, ErrorData> {
    crate::bridge::reshape(result, "agent's answer")
}

impl ClientHandler for LinkHandler {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
        let result = self
            .hub
            .relay(request, &context, |c| c.sampling.is_some())
            .await?;
        expect(result)
    }

    async fn list_roots(
        &self,
        context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
        let result = self
            .hub
            .relay(request, &context, |c| c.roots.is_some())
            .await?;
        expect(result)
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
        let result = self
            .hub
            .relay(request, &context, |c| c.elicitation.is_some())
            .await?;
        expect(result)
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleClient>,
    ) -> Result<CustomResult, ErrorData> {
        let result = self
            .hub
            .relay(ServerRequest::CustomRequest(request), &context, |_| true)
            .await?;
        expect(result)
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.each_session(|s| {
            let params = params.clone();
            async move {
                let subscribed = lock(&s.subscriptions).contains(&params.uri);
                if subscribed {
                    let _ = s.peer.notify_resource_updated(params).await;
                }
            }
        })
        .await;
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.each_session(|s| async move {
            let _ = s.peer.notify_resource_list_changed().await;
        })
        .await;
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.each_session(|s| async move {
            let _ = s.peer.notify_prompt_list_changed().await;
        })
        .await;
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        // Refresh the cache before the agents hear of it, so their `tools/list` (and
        // the endpoint's schema checks) see the new list.
        match list_all_tools(&context.peer).await {
            Ok(tools) => self.hub.set_tools(tools),
            Err(e) => tracing::debug!(error = %e, "tool list not refreshed"),
        }
        self.each_session(|s| async move {
            let _ = s.peer.notify_tool_list_changed().await;
        })
        .await;
    }
}
