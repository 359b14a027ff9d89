//! An upstream's progress notifications, taken off its transport in arrival order and
//! relayed to the caller of the call they belong to, coalesced: the latest state only,
//! at most one per interval (each is a PM the operator's client sends). Any progress
//! keeps its call alive. When the call ends, a state not yet relayed goes before the
//! answer if the interval allows, else it is dropped in favour of the answer; nothing
//! is relayed after it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rmcp::Peer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::early_progress::EarlyProgress;

/// Upstream progress tokens whose progress arrived before their call was registered,
/// kept at once; the oldest go first.
pub(crate) const EARLY_TOKENS: usize = 64;

/// Early progress notifications kept per token.
pub(crate) const EARLY_PER_TOKEN: usize = 16;

/// Where each upstream progress token's notifications go.
pub(crate) struct Routes(Mutex<RoutesInner>);

impl Default for Routes {
    fn default() -> Self {
        Self(Mutex::new(RoutesInner {
            routes: HashMap::new(),
            early: EarlyProgress::new(EARLY_TOKENS, EARLY_PER_TOKEN),
        }))
    }
}

pub(crate) struct RoutesInner {
    routes: HashMap<ProgressToken, Arc<Route>>,
    pub(crate) early: EarlyProgress,
}

/// One call's progress: the latest state not yet relayed.
#[derive(Default)]
pub(crate) struct Route {
    latest: Mutex<Option<ProgressNotificationParam>>,
    /// The relay: a new state, or the end.
    wake: Notify,
    finished: AtomicBool,
    /// The call: progress arrived (it is alive).
    activity: Notify,
}

impl Route {
    fn latest(&self) -> MutexGuard<'_, Option<ProgressNotificationParam>> {
        self.latest.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn update(&self, params: ProgressNotificationParam) {
        *self.latest() = Some(params);
        self.wake.notify_one();
        self.activity.notify_one();
    }

    /// Resolves at the call's next progress (or at once if some came since the last).
    pub(crate) async fn progressed(&self) {
        self.activity.notified().await;
    }

    fn finished(&self) -> bool {
        self.finished.load(Ordering::SeqCst)
    }
}

impl Routes {
    pub(crate) fn lock(&self) -> MutexGuard<'_, RoutesInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Relays `upstream`'s progress to the caller's `token` (dropped without one), at
    /// most one per `interval`, until [`finish`](Self::finish); the task ends by then.
    pub(crate) fn route(
        &self,
        upstream: ProgressToken,
        caller: Peer<rmcp::RoleServer>,
        token: Option<ProgressToken>,
        interval: Duration,
    ) -> (Arc<Route>, tokio::task::JoinHandle<()>) {
        let route = Arc::new(Route::default());
        let mut inner = self.lock();
        if let Some(params) = inner.early.take(&upstream).pop_back() {
            route.update(params);
        }
        inner.routes.insert(upstream, route.clone());
        drop(inner);
        let relay = tokio::spawn(relay(route.clone(), caller, token, interval));
        (route, relay)
    }

    /// The call of `upstream` has its answer: what is left is relayed now or never.
    pub(crate) fn finish(&self, upstream: &ProgressToken) {
        let mut inner = self.lock();
        inner.early.take(upstream);
        if let Some(route) = inner.routes.remove(upstream) {
            route.finished.store(true, Ordering::SeqCst);
            route.wake.notify_one();
        }
    }

    /// Called by the tap, in arrival order.
    pub(crate) fn dispatch(&self, params: ProgressNotificationParam) {
        let mut inner = self.lock();
        if let Some(route) = inner.routes.get(&params.progress_token) {
            route.update(params);
            return;
        }
        inner.early.push(params);
    }
}

/// Sends `route`'s latest state to `caller` under `token`, at most one per `interval`.
async fn relay(
    route: Arc<Route>,
    caller: Peer<rmcp::RoleServer>,
    token: Option<ProgressToken>,
    interval: Duration,
) {
    let Some(token) = token else { return };
    let mut last_sent: Option<Instant> = None;
    loop {
        while route.latest().is_none() && !route.finished() {
            route.wake.notified().await;
        }
        if let Some(last) = last_sent {
            let due = last + interval;
            while Instant::now() < due && !route.finished() {
                tokio::select! {
                    () = tokio::time::sleep_until(due) => {}
                    () = route.wake.notified() => {}
                }
            }
            if Instant::now() < due {
                // Finished within the interval: the answer supersedes what is left.
                return;
            }
        }
        let Some(mut params) = route.latest().take() else {
            return;
        };
        params.progress_token = token.clone();
        if let Err(e) = caller.notify_progress(params).await {
            tracing::debug!(error = %e, "progress not relayed");
        }
        last_sent = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::NumberOrString;

    #[test]
    fn early_progress_is_bounded() {
        let routes = Routes::default();
        for token in 0..(EARLY_TOKENS as i64 + 10) {
            for i in 0..(EARLY_PER_TOKEN + 5) {
                routes.dispatch(ProgressNotificationParam::new(
                    ProgressToken(NumberOrString::Number(token)),
                    i as f64,
                ));
            }
        }
        let lens = routes.lock().early.lens();
        assert_eq!(lens.len(), EARLY_TOKENS);
        assert!(lens.values().all(|&n| n == EARLY_PER_TOKEN));
        assert!(!lens.contains_key(&ProgressToken(NumberOrString::Number(0))));
    }
}
