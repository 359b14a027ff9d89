//! Paid results (and held outcomes) handed to their agent's stream, marked delivered
//! only once they have had [`SEND_GRACE`] to leave. rmcp writes a response after the
//! handler returns it; a stop or a kill in between loses it, and an unkeyed agent's
//! repeat never takes a delivered call (the repeat may be a new call). So such a call
//! stays answered until its grace has passed: one the bridge stops (or dies) within
//! that time is handed to the agent's repeat in the next run, not paid and run again.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use brmcp_adapters::Clock;

use super::journal::Journal;
use super::logged;

/// How long an answer handed to rmcp stays answered before it counts as delivered:
/// far longer than a response's write to a local stream takes, and as long as rmcp's
/// own drain of a stopped service waits (2 s) with a second to spare.
pub(crate) const SEND_GRACE: Duration = Duration::from_secs(3);

/// The answers handed to agents and not yet marked delivered.
pub(super) struct Handed {
    journal: Arc<Journal>,
    clock: Arc<dyn Clock>,
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    /// Oldest first: the call, when its answer was handed, and whether a repeat
    /// claimed it (given back if the stop leaves it answered).
    calls: VecDeque<(i64, Instant, bool)>,
    /// The bridge is stopping: nothing more is marked delivered.
    closed: bool,
    /// A task marks the due calls delivered.
    sweeping: bool,
}

impl Handed {
    pub(super) fn new(journal: Arc<Journal>, clock: Arc<dyn Clock>) -> Self {
        Self {
            journal,
            clock,
            pending: Mutex::default(),
        }
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The answered call `id` was handed to its agent (`claimed`: as a held outcome,
    /// to a repeat). After a stop it stays answered.
    pub(super) fn hand(self: &Arc<Self>, id: i64, claimed: bool) {
        let mut pending = self.pending();
        if pending.closed {
            drop(pending);
            if claimed {
                logged("release", self.journal.release(id));
            }
            return;
        }
        pending.calls.push_back((id, Instant::now(), claimed));
        if pending.sweeping {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                pending.sweeping = true;
                runtime.spawn(self.clone().sweep());
            }
            // Outside a runtime (no response is written there either): at once.
            Err(_) => self.deliver_due(&mut pending, Instant::now() + SEND_GRACE),
        }
    }

    /// Marks each call handed before `before` delivered.
    fn deliver_due(&self, pending: &mut Pending, before: Instant) {
        while let Some(&(id, at, _)) = pending.calls.front() {
            if at + SEND_GRACE > before {
                break;
            }
            pending.calls.pop_front();
            logged("delivery", self.journal.deliver(id, self.clock.now().0));
        }
    }

    /// Marks calls delivered as their grace passes, until none is left or the bridge
    /// stops. The journal is written under the lock, so a stop never sees a call
    /// half-way.
    async fn sweep(self: Arc<Self>) {
        loop {
            let next = {
                let mut pending = self.pending();
                if !pending.closed {
                    self.deliver_due(&mut pending, Instant::now());
                }
                match pending.calls.front() {
                    Some(&(_, at, _)) if !pending.closed => at + SEND_GRACE,
                    _ => {
                        pending.sweeping = false;
                        return;
                    }
                }
            };
            tokio::time::sleep_until(next.into()).await;
        }
    }

    /// The bridge stops: calls past their grace are delivered, the others stay
    /// answered (a claimed one is given back) for the agent's repeat in the next run.
    pub(super) fn close(&self) {
        let mut pending = self.pending();
        pending.closed = true;
        self.deliver_due(&mut pending, Instant::now());
        for (id, _, claimed) in std::mem::take(&mut pending.calls) {
            if claimed {
                logged("release", self.journal.release(id));
            }
        }
    }
}
