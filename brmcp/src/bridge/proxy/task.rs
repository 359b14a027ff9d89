//! Tasks (SEP-2663) for agents that declare them: a `tools/call` is recorded in the
//! call journal and answered at once with its task; the call runs on in the
//! background through the same paid-call loop, and `tasks/get` and `tasks/cancel`
//! are answered from the journal (see `bridge::calls::tasks`), across restarts.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, CreateTaskResult, ErrorData,
    GetTaskParams, GetTaskResult,
};
use rmcp::service::{RequestContext, RoleServer};
use tokio_util::sync::CancellationToken;

use super::{ProxyServer, caller};
use crate::bridge::calls::Begin;

/// The error of a task id this agent has not (on this bot, within the journal's
/// window): another agent's task is not found either.
fn not_found() -> ErrorData {
    ErrorData::invalid_params("task not found", None)
}

/// Whether the agent's request declared the tasks extension.
pub(super) fn declares_tasks(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.client_capabilities()
        .is_some_and(|caps| caps.supports_tasks())
}

impl ProxyServer {
    /// A `tools/call` as a task: recorded, then run in the background under its own
    /// stop (`tasks/cancel`), not the request's, which ends with this answer.
    pub(super) async fn call_as_task(
        &self,
        params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let agent = caller(ctx);
        let journal = match self
            .bridge
            .calls
            .begin(agent.name(), &self.link.bot, &params, ctx)
            .await?
        {
            // A repeat the journal holds the outcome of: answered as it is.
            Begin::Held(outcome) => return outcome,
            Begin::Run(journal) => journal,
        };
        let task_id = journal.key.clone();
        let stop = CancellationToken::new();
        let mut run_ctx = ctx.clone();
        run_ctx.ct = stop.clone();
        let server = self.clone();
        tokio::spawn(async move {
            let _run = server.bridge.calls.task_started(&journal, stop);
            // The outcome is kept in the journal, where `tasks/get` reads it.
            let _ = server.call_begun(params, journal, &run_ctx).await;
        });
        let bot = self.link.bot.to_string();
        let task = self
            .bridge
            .calls
            .task(agent.name(), &bot, &task_id)
            .ok_or_else(|| ErrorData::internal_error("task not recorded", None))?;
        Ok(CallToolResponse::Task(CreateTaskResult::new(task.task)))
    }

    /// `tasks/get`: the task as the journal holds it.
    pub(super) fn get_task_of(
        &self,
        params: &GetTaskParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let bot = self.link.bot.to_string();
        self.bridge
            .calls
            .task(caller(ctx).name(), &bot, &params.task_id)
            .map(GetTaskResult::new)
            .ok_or_else(not_found)
    }

    /// `tasks/cancel`: the call is cancelled at the bot and paid for no further.
    pub(super) fn cancel_task_of(
        &self,
        params: &CancelTaskParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let bot = self.link.bot.to_string();
        if self
            .bridge
            .calls
            .cancel_task(caller(ctx).name(), &bot, &params.task_id)
        {
            Ok(())
        } else {
            Err(not_found())
        }
    }
}
