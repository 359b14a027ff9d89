//! A journaled call as an MCP task (SEP-2663, `io.modelcontextprotocol/tasks`): its
//! id is its call key (random, or derived from the agent's own key), so a task is
//! found again from the journal after a restart; it is found only for the agent that
//! made it, and only on its bot.

use std::collections::HashMap;
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

    fn task_row(&self, agent: &str, bot: &str, task_id: &str) -> Option<Row> {
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

/// The task a journal row is.
fn detailed(row: &Row, asks: Option<InputRequests>) -> DetailedTask {
    let created = crate::rfc3339::rfc3339(row.created);
    let updated = crate::rfc3339::rfc3339(row.updated);
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
        (_, None) => match asks {
            Some(input_requests) => TaskPayload::InputRequired { input_requests },
            None => TaskPayload::Working,
        },
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
