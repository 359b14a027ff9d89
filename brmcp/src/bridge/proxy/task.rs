//! Tasks (SEP-2663) for agents that declare them: a `tools/call` is recorded in the
//! call journal and answered at once with its task; the call runs on in the
//! background through the same paid-call loop, and `tasks/get`, `tasks/update` (the
//! agent's input, e.g. its approval of a payment) and `tasks/cancel` are answered
//! from the journal (see `bridge::calls::tasks`), across restarts.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, CreateTaskResult,
    ErrorData, GetTaskParams, GetTaskResult, InputResponses, UpdateTaskParams,
};
use rmcp::service::{RequestContext, RoleServer};
use tokio_util::sync::CancellationToken;

use super::{ProxyServer, caller};
use crate::bridge::calls::tasks::{Answered, TaskRun, UpdateError};
use crate::bridge::calls::{Begin, Delivery, Journaled};
use serde_json::json;

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
    /// stop (`tasks/cancel`), not the request's, which ends with this answer. A repeat
    /// the journal holds the outcome of is the task it repeats; a call `refused` before
    /// it starts (its agent's share of the bot) is a task ended with that refusal.
    pub(super) async fn call_as_task(
        &self,
        params: CallToolRequestParams,
        refused: Option<CallToolResult>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let agent = caller(ctx);
        let calls = &self.bridge.calls;
        let task_id = match calls
            .begin(agent.name(), &self.link.bot, &params, ctx)
            .await?
        {
            Begin::Held { key, .. } => key,
            Begin::Run(journal) => {
                let task_id = journal.key.clone();
                if let Some(refusal) = refused {
                    let outcome = Ok(CallToolResponse::Complete(refusal));
                    calls.finish(calls.running(&journal), &outcome, false, None);
                } else {
                    let stop = CancellationToken::new();
                    let run = calls.task_started(&journal, stop.clone());
                    self.spawn_run(run, params, Some(journal), ctx, stop);
                }
                task_id
            }
        };
        let bot = self.link.bot.to_string();
        let task = self
            .bridge
            .calls
            .task(agent.name(), &bot, &task_id)
            .ok_or_else(|| ErrorData::internal_error("task not recorded", None))?;
        Ok(CallToolResponse::Task(CreateTaskResult::new(task.task)))
    }

    /// Runs a task's call (its first run, from `journal`, or its resume with the
    /// agent's input) in the background under `stop`, not the request's, which ends
    /// with its answer; its outcome is kept in the journal, where `tasks/get` reads it,
    /// and a call held for the agent's input leaves the task `input_required`.
    fn spawn_run(
        &self,
        mut run: TaskRun,
        params: CallToolRequestParams,
        journal: Option<Journaled>,
        ctx: &RequestContext<RoleServer>,
        stop: CancellationToken,
    ) {
        let mut run_ctx = ctx.clone();
        run_ctx.ct = stop;
        // Its outcome is read by `tasks/get`, not carried on this request's response.
        if let Some(parts) = run_ctx.extensions.get_mut::<axum::http::request::Parts>() {
            parts.extensions.remove::<Delivery>();
        }
        // The 2025-11-25 form shows the run's wait for its payment's approval.
        run_ctx.extensions.insert(run.approval_mark());
        let server = self.clone();
        let closed = self.bridge.calls.tasks_closed();
        tokio::spawn(async move {
            let running = async {
                match journal {
                    Some(journal) => server.call_begun(params, journal, &run_ctx).await,
                    None => server.call(params, &run_ctx).await,
                }
            };
            let outcome = tokio::select! {
                biased;
                // The bridge stops: the call is left in the journal for the next start.
                () = closed.cancelled() => return,
                outcome = running => outcome,
            };
            if let Ok(CallToolResponse::InputRequired(asks)) = outcome {
                run.asks(asks);
            }
        });
    }

    /// `tasks/update`: the agent's input to a task held for it; its call resumes.
    pub(super) fn update_task_of(
        &self,
        params: UpdateTaskParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let bot = self.link.bot.to_string();
        let stop = CancellationToken::new();
        let answered = self
            .bridge
            .calls
            .task_answered(caller(ctx).name(), &bot, &params.task_id, stop.clone())
            .map_err(|e| match e {
                UpdateError::NotFound => not_found(),
                UpdateError::NotWaiting => {
                    ErrorData::invalid_params("task is not waiting for input", None)
                }
            })?;
        self.resume_task(answered, params.input_responses, ctx, stop)
    }

    /// Resumes a task held for its agent's input with `responses`.
    fn resume_task(
        &self,
        answered: Answered,
        responses: InputResponses,
        ctx: &RequestContext<RoleServer>,
        stop: CancellationToken,
    ) -> Result<(), ErrorData> {
        let mut call: CallToolRequestParams = serde_json::from_str(&answered.params)
            .map_err(|e| ErrorData::internal_error(format!("task's call: {e}"), None))?;
        call.request_state = answered.state;
        call.input_responses = Some(responses);
        self.spawn_run(answered.run, call, None, ctx, stop);
        Ok(())
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

    /// `tasks/cancel`: the call is cancelled at the bot and paid for no further; a
    /// call held for the agent's input is answered "cancel" (its held payment is
    /// never made).
    pub(super) fn cancel_task_of(
        &self,
        params: &CancelTaskParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let bot = self.link.bot.to_string();
        let stop = CancellationToken::new();
        let held = self
            .bridge
            .calls
            .cancel_task(caller(ctx).name(), &bot, &params.task_id, stop.clone())
            .map_err(|_| not_found())?;
        if let Some(held) = held {
            let responses: InputResponses = held
                .keys
                .iter()
                .map(|k| (k.clone(), json!({"action": "cancel"})))
                .collect();
            self.resume_task(held, responses, ctx, stop)?;
        }
        Ok(())
    }
}
