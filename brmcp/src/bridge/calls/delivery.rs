//! When an answer counts as delivered: once the HTTP response carrying it has been
//! written out. rmcp writes a response after the handler returns it; a stop or a kill
//! in between loses it, and an unkeyed agent's repeat never takes a delivered call
//! (the repeat may be a new call). So a paid result (or a held outcome handed to a
//! repeat) stays answered until its response body has ended after carrying it: one
//! the bridge stops (or dies) before then is handed to the agent's repeat in the next
//! run, not paid and run again.

use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use axum::body::Body;
use futures_util::Stream;
use rmcp::service::{RequestContext, RoleServer};

use super::journal::Journal;
use super::logged;
use crate::bridge::Inner;

/// The answers one HTTP request carries to its agent; in the request's extensions,
/// where the call's end finds it through rmcp's request context.
#[derive(Clone)]
pub(crate) struct Delivery(Arc<Slot>);

struct Slot {
    journal: Arc<Journal>,
    clock: Arc<dyn brmcp_adapters::Clock>,
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
    /// A delivery for one request to `inner`'s bridge.
    pub(crate) fn new(inner: &Inner) -> Self {
        let calls = &inner.calls;
        Self(Arc::new(Slot {
            journal: calls.journal.clone(),
            clock: calls.clock.clone(),
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
        for (id, claimed, before) in carried.calls {
            if ended && carried.frames > before {
                logged("delivery", slot.journal.deliver(id, slot.clock.now().0));
            } else if claimed {
                logged("release", slot.journal.release(id));
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
