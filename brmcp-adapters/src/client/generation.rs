//! One service's share of a session's JSON-RPC ids.
//!
//! rmcp numbers a service's requests and progress tokens from 0, and a revived session
//! gets a new service: its ids would repeat those of the services before it, and a late
//! answer to an earlier service's timed-out request would complete a new one. So each
//! service of a session (its generation) sends its numbers moved into a range of its
//! own, `generation · 2^32` up, and answers and progress outside that range are
//! dropped: they belong to an earlier service.

use std::future::Future;

use rmcp::model::{
    ClientNotification, GetMeta, JsonRpcMessage, NumberOrString, ServerJsonRpcMessage,
    ServerNotification,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use crate::error::AdapterError;
use crate::transport::BrTransport;

/// Width of one generation's id range: rmcp draws ids from a 64-bit counter starting at
/// 0, and no service sends anywhere near 2^32 requests.
pub(crate) const GENERATION_SPAN: i64 = 1 << 32;

/// Generations a session may have: as many as fit in the positive `i64` ids. At one
/// revival a second that is 68 years.
pub(crate) const MAX_GENERATION: u64 = (i64::MAX / GENERATION_SPAN) as u64;

/// A dialed session's transport for its service of generation `base / 2^32`.
pub(crate) struct Generation {
    pub(crate) inner: BrTransport<RoleClient>,
    /// `generation · 2^32`.
    base: i64,
}

impl Generation {
    /// The transport of generation `generation` (at most [`MAX_GENERATION`]).
    pub(crate) fn new(inner: BrTransport<RoleClient>, generation: u64) -> Self {
        let generation = i64::try_from(generation.min(MAX_GENERATION)).unwrap_or(0);
        Self {
            inner,
            base: generation.saturating_mul(GENERATION_SPAN),
        }
    }

    /// A number of the service to the wire's.
    fn out(&self, n: &mut NumberOrString) {
        if let NumberOrString::Number(n) = n {
            *n = n.saturating_add(self.base);
        }
    }

    /// A wire number back to the service's; `false` if it is not this generation's.
    fn back(&self, n: &mut NumberOrString) -> bool {
        match n {
            NumberOrString::Number(v) if (self.base..self.base + GENERATION_SPAN).contains(v) => {
                *v -= self.base;
                true
            }
            NumberOrString::Number(_) => false,
            // rmcp draws numbers only: a string is none of our ids. The first
            // generation passes it on as an unshifted session would.
            NumberOrString::String(_) => self.base == 0,
        }
    }

    fn shift_out(&self, item: &mut TxJsonRpcMessage<RoleClient>) {
        match item {
            JsonRpcMessage::Request(r) => {
                self.out(&mut r.id);
                let meta = r.request.get_meta_mut();
                if let Some(mut token) = meta.get_progress_token() {
                    self.out(&mut token.0);
                    meta.set_progress_token(token);
                }
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &mut n.notification
                    && let Some(id) = &mut c.params.request_id
                {
                    self.out(id);
                }
            }
            // Answers to the server's requests carry the server's ids.
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
        }
    }

    /// `false` for an answer or progress of an earlier generation.
    fn shift_back(&self, message: &mut ServerJsonRpcMessage) -> bool {
        match message {
            JsonRpcMessage::Response(r) => self.back(&mut r.id),
            JsonRpcMessage::Error(e) => e.id.as_mut().is_none_or(|id| self.back(id)),
            JsonRpcMessage::Notification(n) => match &mut n.notification {
                ServerNotification::ProgressNotification(p) => {
                    self.back(&mut p.params.progress_token.0)
                }
                _ => true,
            },
            // The server's requests carry its own ids.
            JsonRpcMessage::Request(_) => true,
        }
    }
}

impl Transport<RoleClient> for Generation {
    type Error = AdapterError;

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if self.base != 0 {
            self.shift_out(&mut item);
        }
        Transport::<RoleClient>::send(&mut self.inner, item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let mut message = Transport::<RoleClient>::receive(&mut self.inner).await?;
            if self.base == 0 || self.shift_back(&mut message) {
                return Some(message);
            }
            tracing::debug!(
                peer = %self.inner.peer(),
                sid = %self.inner.sid(),
                "an earlier service's answer dropped"
            );
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Transport::<RoleClient>::close(&mut self.inner).await
    }
}
