//! The call journal: every agent `tools/call` recorded durably before its first send,
//! and each step of it (sent, paying, paid, answered, delivered, cancelled) before the
//! step is taken, so a paid call outlives the bridge's process.
//!
//! - [`journal`]: the file ([`CALLS_FILE`]) and its rows; [`bounds`]: each agent's share.
//! - [`state`]: what moves a call from one state to the next.
//! - [`key`]: the key sent to the bot (fresh, or derived from the agent's own
//!   `brmcp/callKey`) and the digest of the arguments.
//! - [`begin`](Calls::begin) and the hooks of the paid-call loop (`proxy::call`).
//! - [`delivery`]: a paid answer counts as delivered once its response was written.
//! - [`resume`](mod@resume): on start, each call an earlier run left in flight is asked of its bot
//!   again under its key (the harness replays a completed call and runs nothing
//!   again), never paid again, and its outcome kept for the agent's retry.

mod begin;
mod bounds;
pub(crate) mod delivery;
pub(crate) mod journal;
pub(crate) mod key;
mod resume;
pub(crate) mod state;
pub(crate) mod tasks;
pub(crate) mod tasks25;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use brmcp_adapters::Clock;
use tokio::sync::watch;

use journal::Journal;
pub use journal::{CALLS_FILE, JournalError};

pub(crate) use begin::{Begin, Journaled};
pub(crate) use delivery::Delivery;
pub(crate) use resume::{resume, unpaid_unreserved};

/// The journal of the bridge's calls and the calls this process runs.
pub(crate) struct Calls {
    journal: Arc<Journal>,
    /// This process's run: a call of another run died with it (or is being resumed).
    run: String,
    /// The calls this process runs now (an agent's request, or a resume): another
    /// request for one waits for it to end.
    live: Arc<LiveSet>,
    /// The bridge is stopping: a request cut by the stop is left to the next start,
    /// not cancelled.
    closing: AtomicBool,
    /// The calls of earlier runs were resumed (once per process).
    resumed: AtomicBool,
    /// The tasks this process runs.
    tasks: Arc<tasks::Running>,
    /// Answers whose response ended, not yet counted as delivered.
    grace: Arc<delivery::InGrace>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Calls")
            .field("run", &self.run)
            .finish_non_exhaustive()
    }
}

/// A call this process runs: while it lives, another request for the call waits.
#[derive(Debug)]
pub(crate) struct Live {
    set: Arc<LiveSet>,
    id: i64,
    done: watch::Sender<bool>,
}

type LiveSet = Mutex<HashMap<i64, watch::Receiver<bool>>>;

impl Drop for Live {
    fn drop(&mut self) {
        self.set
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        let _ = self.done.send(true);
    }
}

impl Calls {
    /// Opens the journal in `dir`.
    ///
    /// # Errors
    /// [`JournalError`], naming the file.
    pub(crate) fn open(dir: &std::path::Path, clock: Arc<dyn Clock>) -> Result<Self, JournalError> {
        let journal = Arc::new(Journal::open(dir, clock.now().0)?);
        // Never the run of an earlier process: random, as call keys are.
        let run = crate::bridge::random_hex::<8>()
            .unwrap_or_else(|_| format!("{}-{}", std::process::id(), clock.now().0));
        Ok(Self {
            journal,
            run,
            live: Arc::default(),
            closing: AtomicBool::new(false),
            resumed: AtomicBool::new(false),
            tasks: Arc::default(),
            grace: Arc::new(delivery::InGrace::new(
                crate::bridge::DEFAULT_DELIVERY_GRACE,
            )),
            clock,
        })
    }

    /// Answers count as delivered `grace` after their response ended (see
    /// [`DEFAULT_DELIVERY_GRACE`](crate::bridge::DEFAULT_DELIVERY_GRACE)).
    pub(crate) fn with_delivery_grace(mut self, grace: std::time::Duration) -> Self {
        self.grace = Arc::new(delivery::InGrace::new(grace));
        self
    }

    fn now(&self) -> i64 {
        self.clock.now().0
    }

    /// The bridge is stopping: requests it cuts are left for the next start.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.tasks.close();
        self.grace.stop(&self.journal, self.now());
    }

    /// The agent made a request on `session`: the answers sent on it before count as
    /// delivered (see [`delivery::InGrace::acknowledged`]).
    pub(crate) fn acknowledged(&self, session: &str) {
        self.grace.acknowledged(session, &self.journal, self.now());
    }

    /// Whether the bridge is stopping (see [`close`](Self::close)).
    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Marks the call `id` live in this process, unless it already is: then its wait.
    fn take_live(&self, id: i64) -> Result<Live, watch::Receiver<bool>> {
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(running) = live.get(&id) {
            return Err(running.clone());
        }
        let (done, wait) = watch::channel(false);
        live.insert(id, wait);
        drop(live);
        Ok(Live {
            set: self.live.clone(),
            id,
            done,
        })
    }
}

/// Logs a journal write that failed: the call goes on as the agent asked, without
/// the guarantee the journal gives (the write is retried at the next step).
fn logged<T>(what: &str, written: Result<T, JournalError>) -> Option<T> {
    match written {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(error = %e, "call journal: {what} not recorded");
            None
        }
    }
}
