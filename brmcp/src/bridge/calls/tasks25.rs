//! The call journal's tasks in the 2025-11-25 form (the experimental tasks of that
//! protocol): the same tasks as [`super::tasks`] serves in the SEP-2663 form, their ids
//! the call keys, found only for the agent that made them on their bot, read from the
//! journal (so across restarts).

use rmcp::model::JsonObject;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use super::journal::Row;
use super::tasks::{Ended, POLL_INTERVAL_MS, ended, ttl_ms};
use super::{Calls, logged};

/// Most tasks one `tasks/list` page holds: 50, a page an agent reads at once; an
/// agent's journal rows are bounded, so its pages are too.
pub(crate) const LIST_PAGE: usize = 50;

/// A task's status in the 2025-11-25 form.
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Status25 {
    /// Its call runs.
    Working,
    /// Its payment waits for the approval.
    InputRequired,
    /// The tool answered.
    Completed,
    /// The call ended with an error (the tool's, or a JSON-RPC one).
    Failed,
    /// Its agent cancelled it.
    Cancelled,
}

impl Status25 {
    /// Whether the task has ended.
    pub(crate) const fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A task in the 2025-11-25 form: `tasks/get`'s and `tasks/cancel`'s result, a
/// `tasks/list` entry, the `task` of a `CreateTaskResult`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Task25 {
    /// The call key.
    pub task_id: String,
    /// Where it stands.
    pub status: Status25,
    /// Why it fails or waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// When the call was recorded (RFC 3339).
    pub created_at: String,
    /// Its last change.
    pub last_updated_at: String,
    /// How long it is kept after its last change, in milliseconds.
    pub ttl: u64,
    /// How often to poll it, in milliseconds.
    pub poll_interval: u64,
}

/// One page of `tasks/list`.
#[derive(Debug)]
pub(crate) struct Page {
    /// The tasks, oldest first.
    pub tasks: Vec<Task25>,
    /// The row the next page starts after, when there is one.
    pub next: Option<i64>,
}

/// Why `tasks/cancel` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CancelError {
    /// No such task for this agent.
    NotFound,
    /// It already ended (its status).
    Ended(Status25),
}

impl Calls {
    /// The task `task_id` of `agent` on `bot` and how it ended; `None` for another
    /// agent's, another bot's, or one the journal no longer holds.
    pub(crate) fn task25(
        &self,
        agent: &str,
        bot: &str,
        task_id: &str,
    ) -> Option<(Task25, Option<Ended>)> {
        let row = self.task_row(agent, bot, task_id)?;
        Some(self.view25(&row))
    }

    /// The tasks of `agent` on `bot` after the row `after` (0: from the first).
    pub(crate) fn tasks25(&self, agent: &str, bot: &str, after: i64) -> Page {
        let mut rows = logged(
            "task list",
            self.journal.of_agent(agent, bot, after, LIST_PAGE + 1),
        )
        .unwrap_or_default();
        let next = if rows.len() > LIST_PAGE {
            rows.truncate(LIST_PAGE);
            rows.last().map(|r| r.id)
        } else {
            None
        };
        Page {
            tasks: rows.iter().map(|r| self.view25(r).0).collect(),
            next,
        }
    }

    /// Cancels the task `task_id` of `agent` on `bot` as
    /// [`cancel_task`](Self::cancel_task) does (its run stopped, the call cancelled at
    /// the bot and paid for no further); the task as it is after.
    pub(crate) fn cancel_task25(
        &self,
        agent: &str,
        bot: &str,
        task_id: &str,
    ) -> Result<Task25, CancelError> {
        let (task, _) = self
            .task25(agent, bot, task_id)
            .ok_or(CancelError::NotFound)?;
        if task.status.is_terminal() {
            return Err(CancelError::Ended(task.status));
        }
        // A run of this form asks by elicitation or on the approval page, never holds
        // itself for input (`tasks/update` is SEP-2663's), so nothing is handed back.
        drop(
            self.cancel_task(agent, bot, task_id, CancellationToken::new())
                .map_err(|_| CancelError::NotFound)?,
        );
        self.task25(agent, bot, task_id)
            .map(|(task, _)| task)
            .ok_or(CancelError::NotFound)
    }

    fn view25(&self, row: &Row) -> (Task25, Option<Ended>) {
        let end = ended(row);
        let (status, message) = match &end {
            Some(Ended::Completed(result)) if is_error(result) => (
                Status25::Failed,
                Some("the tool answered with an error".to_owned()),
            ),
            Some(Ended::Completed(_)) => (Status25::Completed, None),
            Some(Ended::Failed(error)) => (
                Status25::Failed,
                error
                    .get("message")
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned),
            ),
            Some(Ended::Cancelled) => (Status25::Cancelled, None),
            None if self.tasks.approving(row.id) => (
                Status25::InputRequired,
                Some("waiting for the approval of a payment".to_owned()),
            ),
            None => (Status25::Working, None),
        };
        let task = Task25 {
            task_id: row.key.clone(),
            status,
            status_message: message,
            created_at: crate::rfc3339::rfc3339(row.created),
            last_updated_at: crate::rfc3339::rfc3339(row.updated),
            ttl: ttl_ms(),
            poll_interval: POLL_INTERVAL_MS,
        };
        (task, end)
    }
}

/// Whether a `CallToolResult` is the tool's error.
fn is_error(result: &JsonObject) -> bool {
    result.get("isError") == Some(&serde_json::Value::Bool(true))
}

#[cfg(test)]
mod tests;
