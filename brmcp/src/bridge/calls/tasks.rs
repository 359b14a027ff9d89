//! A journaled call as an MCP task (SEP-2663, `io.modelcontextprotocol/tasks`): its
//! id is its call key (random, or derived from the agent's own key), so a task is
//! found again from the journal after a restart; it is found only for the agent that
//! made it, and only on its bot.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use rmcp::model::{
    CallToolResult, DetailedTask, ErrorData, JsonObject, Task, TaskPayload, TaskStatus,
};
use tokio_util::sync::CancellationToken;

use super::journal::{HELD_SECS, Outcome, Row};
use super::state::State;
use super::{Calls, Journaled, logged};

/// How often an agent is asked to poll a working task, in milliseconds: a paid call
/// over Bison Relay takes seconds, so polling faster only loads the bridge.
pub(crate) const POLL_INTERVAL_MS: u64 = 1_000;

/// The tasks this process runs: how each is stopped. Bounded by the journal's
/// bounds on calls in flight per agent (a task is a call in flight).
#[derive(Debug, Default)]
pub(crate) struct Running(Mutex<HashMap<i64, CancellationToken>>);

impl Running {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, CancellationToken>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A running task's stop, removed when its run ends.
#[derive(Debug)]
pub(crate) struct TaskRun<'a> {
    calls: &'a Calls,
    id: i64,
}

impl Drop for TaskRun<'_> {
    fn drop(&mut self) {
        self.calls.tasks.lock().remove(&self.id);
    }
}

impl Calls {
    /// Registers `call` as a task this process runs, stopped by `stop`.
    pub(crate) fn task_started(&self, call: &Journaled, stop: CancellationToken) -> TaskRun<'_> {
        self.tasks.lock().insert(call.id, stop);
        TaskRun {
            calls: self,
            id: call.id,
        }
    }

    /// The task `task_id` of `agent` on `bot`; `None` for another agent's, another
    /// bot's, or one the journal no longer holds.
    pub(crate) fn task(&self, agent: &str, bot: &str, task_id: &str) -> Option<DetailedTask> {
        let row = self.task_row(agent, bot, task_id)?;
        Some(detailed(&row))
    }

    fn task_row(&self, agent: &str, bot: &str, task_id: &str) -> Option<Row> {
        let row = logged("task lookup", self.journal.by_key(bot, task_id))??;
        (row.agent == agent).then_some(row)
    }

    /// Cancels the task `task_id` of `agent` on `bot`: a run of this process is
    /// stopped (which cancels the call at the bot); the journal marks it cancelled
    /// unless it already ended. `false` if there is no such task.
    pub(crate) fn cancel_task(&self, agent: &str, bot: &str, task_id: &str) -> bool {
        let Some(row) = self.task_row(agent, bot, task_id) else {
            return false;
        };
        if let Some(stop) = self.tasks.lock().get(&row.id) {
            stop.cancel();
        }
        if row.state.in_flight() {
            logged("cancel", self.journal.cancel(row.id, self.now()));
        }
        true
    }
}

/// The task a journal row is.
fn detailed(row: &Row) -> DetailedTask {
    let created = crate::cli::table::rfc3339(row.created);
    let updated = crate::cli::table::rfc3339(row.updated);
    let ttl_ms = u64::try_from(HELD_SECS).unwrap_or(0).saturating_mul(1_000);
    let task = Task::new(row.key.clone(), TaskStatus::Working, created, updated)
        .with_ttl_ms(ttl_ms)
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    let payload = match (&row.state, &row.outcome) {
        (State::Cancelled, _) => TaskPayload::Cancelled,
        (_, Some(Outcome::Result(json))) => {
            match serde_json::from_str::<CallToolResult>(json).map(serde_json::to_value) {
                Ok(Ok(serde_json::Value::Object(result))) => TaskPayload::Completed { result },
                _ => failed("the kept result is not readable"),
            }
        }
        (_, Some(Outcome::Error(json))) => match serde_json::from_str::<JsonObject>(json) {
            Ok(error) => TaskPayload::Failed { error },
            Err(_) => failed("the kept error is not readable"),
        },
        (_, Some(Outcome::TooLarge(n))) => failed(&format!(
            "the result ({n} bytes) was larger than the bridge keeps"
        )),
        (_, None) => TaskPayload::Working,
    };
    DetailedTask::new(task, payload)
}

fn failed(message: &str) -> TaskPayload {
    let error = ErrorData::internal_error(message.to_owned(), None);
    match serde_json::to_value(error) {
        Ok(serde_json::Value::Object(error)) => TaskPayload::Failed { error },
        _ => TaskPayload::Failed {
            error: JsonObject::new(),
        },
    }
}
