//! A journaled call as an MCP task (SEP-2663, `io.modelcontextprotocol/tasks`): its
//! id is its call key (random, or derived from the agent's own key), so a task is
//! found again from the journal after a restart; it is found only for the agent that
//! made it, and only on its bot.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::{
    CallToolResult, DetailedTask, ErrorData, InputRequests, InputRequiredResult, JsonObject, Task,
    TaskPayload, TaskStatus,
};
use tokio_util::sync::CancellationToken;

use super::journal::{HELD_SECS, Outcome, Row};
use super::state::State;
use super::{Calls, Journaled, logged};

/// How often an agent is asked to poll a working task, in milliseconds: a paid call
/// over Bison Relay takes seconds, so polling faster only loads the bridge.
pub(crate) const POLL_INTERVAL_MS: u64 = 1_000;

/// The tasks this process runs, and those held for their agent's input: how each is
/// stopped, and what it asks. Bounded by the journal's bounds on calls in flight per
/// agent (a task is a call in flight).
#[derive(Debug, Default)]
pub(crate) struct Running {
    set: Mutex<HashMap<i64, Entry>>,
    /// The runs whose payment waits for its approval (the 2025-11-25 form's
    /// `input_required`; the SEP-2663 form holds the run instead, [`Entry::Asks`]).
    approving: Mutex<HashSet<i64>>,
    /// The bridge stops: every run is dropped, left in the journal for the next start
    /// (as an agent's request cut by the stop is), not cancelled at the bot.
    closed: CancellationToken,
}

#[derive(Debug)]
enum Entry {
    /// Running in this process.
    Run(CancellationToken),
    /// Held for the agent's input (`input_required`), answered by `tasks/update`.
    Asks(InputRequiredResult),
}

impl Running {
    /// Whether the run of the call `id` waits for the approval of its payment.
    pub(super) fn approving(&self, id: i64) -> bool {
        lock_set(&self.approving).contains(&id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Entry>> {
        self.set.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bridge stops (see [`closed`](Calls::tasks_closed)).
    pub(crate) fn close(&self) {
        self.closed.cancel();
        // A run the stop cuts mid-step sees its stop too: with the bridge closing, its
        // call is left for the next start, neither answered nor cancelled at the bot.
        for entry in self.lock().values() {
            if let Entry::Run(stop) = entry {
                stop.cancel();
            }
        }
    }
}

/// A running task's stop, removed when its run ends (or replaced by what it asks).
#[derive(Debug)]
pub(crate) struct TaskRun {
    set: Arc<Running>,
    id: i64,
    asks: Option<InputRequiredResult>,
}

impl TaskRun {
    /// What the run's payment marks while it waits for its approval.
    pub(crate) fn approval_mark(&self) -> ApprovalMark {
        ApprovalMark {
            set: self.set.clone(),
            id: self.id,
        }
    }

    /// The run ended held for the agent's input: the task waits on `asks`.
    pub(crate) fn asks(&mut self, asks: InputRequiredResult) {
        self.asks = Some(asks);
    }
}

impl Drop for TaskRun {
    fn drop(&mut self) {
        let mut set = self.set.lock();
        match self.asks.take() {
            Some(asks) => set.insert(self.id, Entry::Asks(asks)),
            None => set.remove(&self.id),
        };
    }
}

/// Carried by a task's run (in its request's extensions): while the run's payment
/// waits for its approval, the task is `input_required` in the 2025-11-25 form.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalMark {
    set: Arc<Running>,
    id: i64,
}

impl ApprovalMark {
    /// The task waits for the approval of its payment until the guard drops.
    pub(crate) fn waiting(&self) -> ApprovalWait {
        lock_set(&self.set.approving).insert(self.id);
        ApprovalWait(self.clone())
    }
}

/// The approval a task's payment waits for; the wait ends when it drops.
#[derive(Debug)]
pub(crate) struct ApprovalWait(ApprovalMark);

impl Drop for ApprovalWait {
    fn drop(&mut self) {
        lock_set(&self.0.set.approving).remove(&self.0.id);
    }
}

fn lock_set(set: &Mutex<HashSet<i64>>) -> std::sync::MutexGuard<'_, HashSet<i64>> {
    set.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Why `tasks/update` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UpdateError {
    /// No such task for this agent.
    NotFound,
    /// The task does not wait for input.
    NotWaiting,
}

/// A task's run resumed with the agent's input.
#[derive(Debug)]
pub(crate) struct Answered {
    /// The run's guard.
    pub run: TaskRun,
    /// The call as the agent made it (`name`, `arguments`), as JSON.
    pub params: String,
    /// The held call's `requestState`.
    pub state: Option<String>,
    /// The keys of the input the call was held for.
    pub keys: Vec<String>,
}

impl Calls {
    /// Cancelled when the bridge stops: a task's run ends with it, left to the next
    /// start.
    pub(crate) fn tasks_closed(&self) -> CancellationToken {
        self.tasks.closed.clone()
    }

    /// Registers `call` as a task this process runs, stopped by `stop`.
    pub(crate) fn task_started(&self, call: &Journaled, stop: CancellationToken) -> TaskRun {
        self.tasks.lock().insert(call.id, Entry::Run(stop));
        TaskRun {
            set: self.tasks.clone(),
            id: call.id,
            asks: None,
        }
    }

    /// The call `id`, which an earlier run left in flight, is resumed by this process:
    /// its task's cancel stops the resumed send under `stop`.
    pub(crate) fn task_resumed(&self, id: i64, stop: CancellationToken) -> TaskRun {
        self.tasks.lock().insert(id, Entry::Run(stop));
        TaskRun {
            set: self.tasks.clone(),
            id,
            asks: None,
        }
    }

    /// The task `task_id` of `agent` on `bot` takes the agent's input: its run
    /// resumes under `stop`.
    pub(crate) fn task_answered(
        &self,
        agent: &str,
        bot: &str,
        task_id: &str,
        stop: CancellationToken,
    ) -> Result<Answered, UpdateError> {
        let row = self
            .task_row(agent, bot, task_id)
            .ok_or(UpdateError::NotFound)?;
        let mut set = self.tasks.lock();
        let Some(Entry::Asks(asks)) = set.remove(&row.id) else {
            return Err(UpdateError::NotWaiting);
        };
        set.insert(row.id, Entry::Run(stop));
        drop(set);
        Ok(Answered {
            run: TaskRun {
                set: self.tasks.clone(),
                id: row.id,
                asks: None,
            },
            keys: Vec::new(),
            params: row.params,
            state: asks.request_state,
        })
    }

    /// The task `task_id` of `agent` on `bot`; `None` for another agent's, another
    /// bot's, or one the journal no longer holds.
    pub(crate) fn task(&self, agent: &str, bot: &str, task_id: &str) -> Option<DetailedTask> {
        let row = self.task_row(agent, bot, task_id)?;
        let asks = match self.tasks.lock().get(&row.id) {
            Some(Entry::Asks(asks)) if row.state.in_flight() => asks.input_requests.clone(),
            _ => None,
        };
        Some(detailed(&row, asks))
    }

    pub(super) fn task_row(&self, agent: &str, bot: &str, task_id: &str) -> Option<Row> {
        let row = logged("task lookup", self.journal.by_key(bot, task_id))??;
        (row.agent == agent).then_some(row)
    }

    /// Cancels the task `task_id` of `agent` on `bot`: a run of this process is
    /// stopped (which cancels the call at the bot); the journal marks it cancelled
    /// unless it already ended. A task held for its agent's input is handed back to
    /// be answered "cancel" under `stop`, so its held payment is never made.
    pub(crate) fn cancel_task(
        &self,
        agent: &str,
        bot: &str,
        task_id: &str,
        stop: CancellationToken,
    ) -> Result<Option<Answered>, UpdateError> {
        let row = self
            .task_row(agent, bot, task_id)
            .ok_or(UpdateError::NotFound)?;
        let mut set = self.tasks.lock();
        let held = match set.remove(&row.id) {
            Some(Entry::Run(running)) => {
                running.cancel();
                None
            }
            Some(Entry::Asks(asks)) => {
                set.insert(row.id, Entry::Run(stop));
                Some(Answered {
                    run: TaskRun {
                        set: self.tasks.clone(),
                        id: row.id,
                        asks: None,
                    },
                    keys: asks
                        .input_requests
                        .as_ref()
                        .map(|r| r.keys().cloned().collect())
                        .unwrap_or_default(),
                    params: row.params.clone(),
                    state: asks.request_state,
                })
            }
            None => None,
        };
        drop(set);
        if row.state.in_flight() {
            logged("cancel", self.journal.cancel(row.id, self.now()));
        }
        Ok(held)
    }
}

/// How a task ended, as its journal row holds it (both task forms read it).
pub(crate) enum Ended {
    /// The tool's `CallToolResult`.
    Completed(JsonObject),
    /// The JSON-RPC error the call ended with (or one saying why its outcome is lost).
    Failed(JsonObject),
    /// Cancelled by its agent.
    Cancelled,
}

/// How the call of `row` ended; `None` while it runs.
pub(crate) fn ended(row: &Row) -> Option<Ended> {
    Some(match (&row.state, &row.outcome) {
        (State::Cancelled, _) => Ended::Cancelled,
        (_, Some(Outcome::Result(json))) => {
            match serde_json::from_str::<CallToolResult>(json).map(serde_json::to_value) {
                Ok(Ok(serde_json::Value::Object(result))) => Ended::Completed(result),
                _ => Ended::Failed(failed("the kept result is not readable")),
            }
        }
        (_, Some(Outcome::Error(json))) => match serde_json::from_str::<JsonObject>(json) {
            Ok(error) => Ended::Failed(error),
            Err(_) => Ended::Failed(failed("the kept error is not readable")),
        },
        (_, Some(Outcome::TooLarge(n))) => Ended::Failed(failed(&format!(
            "the result ({n} bytes) was larger than the bridge keeps"
        ))),
        (_, None) => return None,
    })
}

/// How long a task is kept after its last change, in milliseconds: the journal's
/// window.
pub(crate) fn ttl_ms() -> u64 {
    u64::try_from(HELD_SECS).unwrap_or(0).saturating_mul(1_000)
}

/// The task a journal row is.
fn detailed(row: &Row, asks: Option<InputRequests>) -> DetailedTask {
    let created = crate::rfc3339::rfc3339(row.created);
    let updated = crate::rfc3339::rfc3339(row.updated);
    let task = Task::new(row.key.clone(), TaskStatus::Working, created, updated)
        .with_ttl_ms(ttl_ms())
        .with_poll_interval_ms(POLL_INTERVAL_MS);
    let payload = match ended(row) {
        Some(Ended::Cancelled) => TaskPayload::Cancelled,
        Some(Ended::Completed(result)) => TaskPayload::Completed { result },
        Some(Ended::Failed(error)) => TaskPayload::Failed { error },
        None => match asks {
            Some(input_requests) => TaskPayload::InputRequired { input_requests },
            None => TaskPayload::Working,
        },
    };
    DetailedTask::new(task, payload)
}

/// A JSON-RPC internal error saying `message`.
fn failed(message: &str) -> JsonObject {
    let error = ErrorData::internal_error(message.to_owned(), None);
    match serde_json::to_value(error) {
        Ok(serde_json::Value::Object(error)) => error,
        _ => JsonObject::new(),
    }
}
