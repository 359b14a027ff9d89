//! When an answer counts as delivered: once the HTTP response carrying it has been
//! written out, and a grace after ([`DEFAULT_DELIVERY_GRACE`]). rmcp writes a
//! response after the handler returns it; a stop or a kill in between loses it, and
//! an unkeyed agent's repeat never takes a delivered call (the repeat may be a new
//! call). So a paid result (or a held outcome handed to a repeat) stays answered until
//! its response body has ended after carrying it and the grace has passed, or the
//! agent made its next request on the session: one the bridge stops (or dies) before
//! then is handed to the agent's repeat in the next run, not paid and run again.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use futures_util::Stream;
use rmcp::service::{RequestContext, RoleServer};

use super::journal::Journal;
use super::logged;
#[cfg(doc)]
use crate::bridge::DEFAULT_DELIVERY_GRACE;
use crate::bridge::Inner;

/// Answers whose response ended and whose grace ([`DEFAULT_DELIVERY_GRACE`]) runs:
/// the journal ids, marked delivered when it passes, at the agent's next request on
/// the session, or at once when the bridge stops.
pub(crate) struct InGrace {
    /// How long the grace is.
    grace: Duration,
    /// Each answer's journal id, and the MCP session its response went out on.
    ids: Mutex<HashMap<i64, Option<String>>>,
    /// The bridge is stopping: answers count as delivered once their response ended.
    stopping: AtomicBool,
}

impl InGrace {
    pub(crate) fn new(grace: Duration) -> Self {
        Self {
            grace,
            ids: Mutex::default(),
            stopping: AtomicBool::new(false),
        }
    }

    fn ids(&self) -> MutexGuard<'_, HashMap<i64, Option<String>>> {
        self.ids.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The agent made another request on `session`: it took the answers sent on the
    /// session before (a client waits for an answer, or gives up on it, before its next
    /// request), which are delivered now.
    pub(crate) fn acknowledged(&self, session: &str, journal: &Journal, now: i64) {
        let ids: Vec<i64> = {
            let mut ids = self.ids();
            let taken: Vec<i64> = ids
                .iter()
                .filter(|(_, s)| s.as_deref() == Some(session))
                .map(|(id, _)| *id)
                .collect();
            for id in &taken {
                ids.remove(id);
            }
            taken
        };
        for id in ids {
            logged("delivery", journal.deliver(id, now));
        }
    }

    /// The bridge stops: every answer in its grace is delivered now, and those that end
    /// from now on at once.
    pub(crate) fn stop(&self, journal: &Journal, now: i64) {
        self.stopping.store(true, Ordering::SeqCst);
        let ids: Vec<i64> = self.ids().drain().map(|(id, _)| id).collect();
        for id in ids {
            logged("delivery", journal.deliver(id, now));
        }
    }
}

/// The answers one HTTP request carries to its agent; in the request's extensions,
/// where the call's end finds it through rmcp's request context.
#[derive(Clone)]
pub(crate) struct Delivery(Arc<Slot>);

struct Slot {
    journal: Arc<Journal>,
    clock: Arc<dyn brmcp_adapters::Clock>,
    grace: Arc<InGrace>,
    /// The MCP session the request came on, if any.
    session: Option<String>,
    carried: Mutex<Carried>,
}

#[derive(Default)]
struct Carried {
    /// JSON-RPC messages the response body has yielded so far.
    frames: u64,
    /// Each call answered on this response: its id, whether a repeat claimed it (given
    /// back if the answer never left), and the frames yielded before it was handed.
    calls: Vec<(i64, bool, u64)>,
    /// The response ended or was dropped: nothing more goes out on it.
    settled: bool,
}

impl Delivery {
    /// A delivery for one request to `inner`'s bridge, on the MCP session `session`.
    pub(crate) fn new(inner: &Inner, session: Option<String>) -> Self {
        let calls = &inner.calls;
        Self(Arc::new(Slot {
            journal: calls.journal.clone(),
            clock: calls.clock.clone(),
            grace: calls.grace.clone(),
            session,
            carried: Mutex::default(),
        }))
    }

    /// The delivery of the request `ctx` serves; `None` off HTTP (nothing to wait for).
    pub(crate) fn of(ctx: &RequestContext<RoleServer>) -> Option<Self> {
        ctx.extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Self>())
            .cloned()
    }

    fn carried(&self) -> MutexGuard<'_, Carried> {
        self.0
            .carried
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The answered call `id` goes out on this response (`claimed`: a held outcome
    /// handed to a repeat).
    pub(super) fn hand(&self, id: i64, claimed: bool) {
        let mut carried = self.carried();
        if carried.settled {
            // The response already ended without it: the call stays answered.
            drop(carried);
            if claimed {
                logged("release", self.0.journal.release(id));
            }
            return;
        }
        let frames = carried.frames;
        carried.calls.push((id, claimed, frames));
    }

    /// `body`, whose end after a message marks each call handed before that frame
    /// delivered; a body dropped before its end (its connection or its session gone,
    /// the bridge stopped) leaves them answered.
    pub(crate) fn carry(self, body: Body) -> Body {
        Body::from_stream(Carrying {
            body: body.into_data_stream(),
            delivery: self,
            ended: false,
        })
    }

    /// The response body ended (`ended`) or was dropped.
    fn settle(&self, ended: bool) {
        let carried = {
            let mut carried = self.carried();
            carried.settled = true;
            Carried {
                frames: carried.frames,
                calls: std::mem::take(&mut carried.calls),
                settled: true,
            }
        };
        let slot = &self.0;
        let mut delivered = Vec::new();
        for (id, claimed, before) in carried.calls {
            if ended && carried.frames > before {
                delivered.push(id);
            } else if claimed {
                logged("release", slot.journal.release(id));
            }
        }
        if !delivered.is_empty() {
            self.deliver_after_grace(delivered);
        }
    }

    /// Marks `ids` delivered once the grace has passed ([`DEFAULT_DELIVERY_GRACE`] by
    /// default; at once if the bridge is stopping, or off a runtime).
    fn deliver_after_grace(&self, ids: Vec<i64>) {
        let slot = self.0.clone();
        let runtime = tokio::runtime::Handle::try_current();
        let grace = &slot.grace;
        match runtime {
            Ok(runtime) if !grace.stopping.load(Ordering::SeqCst) => {
                grace
                    .ids()
                    .extend(ids.iter().map(|&id| (id, slot.session.clone())));
                runtime.spawn(async move {
                    tokio::time::sleep(slot.grace.grace).await;
                    let now = slot.clock.now().0;
                    for id in ids {
                        // Unless a stop delivered it meanwhile.
                        if slot.grace.ids().remove(&id).is_some() {
                            logged("delivery", slot.journal.deliver(id, now));
                        }
                    }
                });
            }
            _ => {
                let now = slot.clock.now().0;
                for id in ids {
                    logged("delivery", slot.journal.deliver(id, now));
                }
            }
        }
    }
}

struct Carrying {
    body: axum::body::BodyDataStream,
    delivery: Delivery,
    ended: bool,
}

impl Stream for Carrying {
    type Item = Result<axum::body::Bytes, axum::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = Pin::new(&mut self.body).poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(chunk))) if carries_message(chunk) => {
                self.delivery.carried().frames += 1;
            }
            Poll::Ready(None) => self.ended = true,
            _ => {}
        }
        polled
    }
}

impl Drop for Carrying {
    fn drop(&mut self) {
        self.delivery.settle(self.ended);
    }
}

/// Whether `chunk` holds a JSON-RPC message (not an event stream's keep-alive comment
/// or priming event, which a closed stream may yield after the answer was handed).
fn carries_message(chunk: &[u8]) -> bool {
    const MARK: &[u8] = b"\"jsonrpc\"";
    chunk.windows(MARK.len()).any(|w| w == MARK)
}
