//! A graceful stop that keeps its word: every charged call still running when the
//! harness stops is stopped, refunded and answered [`CALL_INTERRUPTED`] on its session
//! before the sessions close, or, if the answer cannot be sent in time, left to be told
//! by the next start. A free call without a call key (nothing charged, nothing kept)
//! is stopped and answered the same way, with [`FREE_STOPPED_NOTICE`]; one the answer
//! does not reach in time is not told later (there is nothing to refund).
//!
//! Each call registers while its handler runs; whoever takes it out of the
//! register (the call, with its handler's answer, or [`Shared::stop`]) owns its end, so
//! a call is completed or interrupted, never both. The interruption is durable before
//! anything is sent: one store transaction refunds the call and marks its caller to be
//! told ([`Billing::interrupt`]); the mark is cleared once the answer is sent, so a
//! process that dies in between tells the caller at its next start.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::PoisonError;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol::CALL_INTERRUPTED;
use brmcp_adapters::wire::SessionId;
use rmcp::model::{ErrorData, RequestId, ServerJsonRpcMessage};
use tokio::sync::oneshot;

use super::{Counters, Shared};
#[cfg(doc)]
use crate::server::billing::Billing;
use crate::server::billing::CallId;

/// The message of the [`CALL_INTERRUPTED`] answer to a call a graceful stop ended.
pub const STOPPED_NOTICE: &str =
    "call interrupted by a stop of the bot; refunded; retry with the same call key";

/// The message of the [`CALL_INTERRUPTED`] answer to a free call without a call key a
/// graceful stop ended.
pub const FREE_STOPPED_NOTICE: &str =
    "call interrupted by a stop of the bot; nothing was charged; retry shortly";

/// The message of the `CALL_INTERRUPTED` answer to a call that would start while the
/// harness stops (nothing charged).
pub const STOPPING: &str = "the bot is stopping; nothing was charged; retry shortly";

/// Why a call has no answer of its own: a graceful stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// The stop took the running call and answers its caller itself.
    Answered,
    /// The call came as the harness stopped; nothing was charged: answer it
    /// `CALL_INTERRUPTED` with [`STOPPING`], so its client retries it; the store's
    /// mark (if it keeps one) to clear once told
    /// ([`Billing::refuse_stopping`](crate::server::billing::Billing::refuse_stopping)).
    Refused(Option<CallId>),
}

/// A running call in the register: a charged one by its charge, a free one without a
/// call key by a number of this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Run {
    /// Charged (also at price 0, for a keyed call): refunded when stopped.
    Charged(CallId),
    /// Free and unkeyed: nothing to refund, only an answer.
    Free(u64),
}

/// One call whose handler runs.
pub(super) struct Running {
    pub(super) caller: PeerId,
    pub(super) sid: SessionId,
    pub(super) request_id: RequestId,
    /// Dropped or fired: the handler is to stop.
    pub(super) stop: oneshot::Sender<()>,
}

/// The calls whose handlers run, and whether the harness stops.
#[derive(Default)]
pub(super) struct RunningCalls {
    calls: Mutex<HashMap<Run, Running>>,
    stopping: AtomicBool,
    /// The number of the next free call.
    next_free: AtomicU64,
}

impl RunningCalls {
    /// A new number for a free call without a call key.
    pub(super) fn free(&self) -> Run {
        Run::Free(self.next_free.fetch_add(1, SeqCst))
    }

    /// Registers a call; `false` (and nothing registered) once the harness stops.
    pub(super) fn start(&self, call: Run, running: Running) -> bool {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        if self.stopping.load(SeqCst) {
            return false;
        }
        calls.insert(call, running);
        true
    }

    /// Takes a finished call out; `true` when its end is the caller's to record, `false`
    /// when a stop took it first.
    pub(super) fn finish(&self, call: Run) -> bool {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&call)
            .is_some()
    }

    /// Whether the harness stops: no call is charged any more.
    pub(super) fn stopping(&self) -> bool {
        self.stopping.load(SeqCst)
    }

    /// Marks the harness stopping and takes every running call.
    fn stop_all(&self) -> Vec<(Run, Running)> {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        self.stopping.store(true, SeqCst);
        calls.drain().collect()
    }
}

impl Shared {
    /// Answers the request `request_id` on `caller`'s session `sid` with
    /// [`CALL_INTERRUPTED`] and `notice`, on the router itself (not through the
    /// request's service, whose session may be closing).
    async fn interrupted_answer(
        &self,
        caller: PeerId,
        sid: SessionId,
        request_id: RequestId,
        notice: &'static str,
    ) -> Result<(), brmcp_adapters::BoxError> {
        let router = self
            .started
            .get()
            .map(|s| s.router.clone())
            .ok_or("not started")?;
        let message = ServerJsonRpcMessage::error(
            ErrorData::new(CALL_INTERRUPTED, notice, None),
            Some(request_id),
        );
        router
            .send_on(caller, sid, &message)
            .await
            .map_err(Into::into)
    }

    /// Answers a call refused at the stop ([`Stop::Refused`]) on its session at once,
    /// not through its closing service, and clears its `mark` once sent. Whether it
    /// was sent (if not, the next start tells a marked caller).
    pub(super) async fn tell_refused(
        &self,
        caller: PeerId,
        sid: SessionId,
        request_id: RequestId,
        mark: Option<CallId>,
    ) -> bool {
        if let Err(e) = self
            .interrupted_answer(caller, sid, request_id, STOPPING)
            .await
        {
            tracing::warn!(error = %e, "call refused at the stop: caller not told now");
            return false;
        }
        if let Some(call) = mark
            && let Err(e) = self.blocking(move |b| b.told(call)).await
        {
            // Told again at the next start: harmless.
            tracing::warn!(%call, error = %e, "refused call's notice not cleared");
        }
        true
    }

    /// Stops every running call: its handler is stopped, a charge refunded with its
    /// caller marked to be told (one transaction), and its caller answered
    /// [`CALL_INTERRUPTED`]; waits up to `wait` for those answers to be sent. Returns
    /// how many charged calls it stopped, how many of their callers were told (the rest
    /// are told by the next start), and how many free calls' callers were told.
    pub(super) async fn stop(self: std::sync::Arc<Self>, wait: Duration) -> (usize, usize, usize) {
        let stopped = self.running.stop_all();
        let count = stopped
            .iter()
            .filter(|(run, _)| matches!(run, Run::Charged(_)))
            .count();
        let mut answers = tokio::task::JoinSet::new();
        for (run, running) in stopped {
            let Running {
                caller,
                sid,
                request_id,
                stop,
            } = running;
            let _ = stop.send(());
            let shared = self.clone();
            answers.spawn(async move {
                let told = async {
                let now = shared.clock.now();
                let (charged, notice) = match run {
                    Run::Charged(call) => (Some(call), STOPPED_NOTICE),
                    Run::Free(_) => (None, FREE_STOPPED_NOTICE),
                };
                if let Some(call) = charged
                    && let Err(e) = shared.blocking(move |b| b.interrupt(call, now)).await
                {
                    // Still pending in the store: refunded and told at the next start.
                    tracing::error!(%call, error = %e, "stopped call not refunded now");
                    return false;
                }
                if let Err(e) = shared.interrupted_answer(caller, sid, request_id, notice).await {
                    tracing::warn!(?run, error = %e, "stopped call's caller not told; a charged one is told by the next start");
                    return false;
                }
                let Some(call) = charged else {
                    return true;
                };
                Counters::bump(&shared.counters.interrupted_told);
                if let Err(e) = shared.blocking(move |b| b.told(call)).await {
                    // Told again at the next start: harmless.
                    tracing::warn!(%call, error = %e, "stopped call's notice not cleared");
                }
                true
                };
                (run, told.await)
            });
        }
        let (mut told, mut free_told) = (0, 0);
        let all = async {
            while let Some(sent) = answers.join_next().await {
                match sent {
                    Ok((Run::Charged(_), true)) => told += 1,
                    Ok((Run::Free(_), true)) => free_told += 1,
                    _ => {}
                }
            }
        };
        if tokio::time::timeout(wait, all).await.is_err() {
            tracing::warn!("stop: some interrupted calls' callers are told at the next start");
        }
        (count, told, free_told)
    }
}
