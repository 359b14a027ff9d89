//! The transport to the bot, with progress and log messages taken off in arrival
//! order and, on a resumed session, request ids moved into its epoch's range.

use std::sync::Arc;

use brmcp_adapters::{AdapterError, BrTransport};
use rmcp::model::{
    ClientNotification, GetMeta, JsonRpcMessage, NumberOrString, ServerJsonRpcMessage,
    ServerNotification,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use super::hub::Hub;
use crate::bridge::session_store::EPOCH_SPAN;

/// The transport to the bot with progress taken off in arrival order.
///
/// On a resumed session it also moves this run's request ids and progress tokens into
/// its epoch's range (`base`, see `session_store`), and drops answers and progress
/// outside it: they are a previous run's.
pub(super) struct Tap {
    pub(super) inner: BrTransport<RoleClient>,
    pub(super) hub: Arc<Hub>,
    /// The connection's serial in its link, which keys its progress in the hub.
    pub(super) serial: u64,
    /// `epoch · 2^32`; 0 on a session this run opened.
    pub(super) base: i64,
}

impl Tap {
    /// A local number to the wire's.
    fn out(&self, n: &mut NumberOrString) {
        if let NumberOrString::Number(n) = n {
            *n = n.saturating_add(self.base);
        }
    }

    /// A wire number back to the local one; `false` if it is not this run's.
    fn back(&self, n: &mut NumberOrString) -> bool {
        match n {
            NumberOrString::Number(v) if (self.base..self.base + EPOCH_SPAN).contains(v) => {
                *v -= self.base;
                true
            }
            NumberOrString::Number(_) => false,
            // rmcp draws numbers only: a string is not one of our ids.
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
            // Answers to the bot's requests carry the bot's ids.
            _ => {}
        }
    }

    /// `false` for a message of a previous run on this session.
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
            _ => true,
        }
    }
}

impl Transport<RoleClient> for Tap {
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
            let mut message: ServerJsonRpcMessage =
                Transport::<RoleClient>::receive(&mut self.inner).await?;
            if self.base != 0 && !self.shift_back(&mut message) {
                tracing::debug!("a previous run's message on a resumed session dropped");
                continue;
            }
            if let JsonRpcMessage::Notification(n) = &message
                && let ServerNotification::ProgressNotification(p) = &n.notification
            {
                self.hub.on_progress(self.serial, p.params.clone());
                continue;
            }
            if let JsonRpcMessage::Notification(n) = &message
                && let ServerNotification::LoggingMessageNotification(l) = &n.notification
            {
                self.hub.on_log(l.params.clone());
                continue;
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        Transport::<RoleClient>::close(&mut self.inner).await
    }
}
