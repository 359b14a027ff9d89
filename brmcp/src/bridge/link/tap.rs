//! The transport to the bot, with progress and log messages taken off in arrival
//! order and, on a resumed or revived session, request ids moved into its epoch's
//! range.

use std::sync::Arc;

use brmcp_adapters::{AdapterError, BrTransport, IdRange, PeerId};
use rmcp::model::{JsonRpcMessage, ServerJsonRpcMessage, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use super::hub::Hub;
use crate::bridge::session_store::{Saved, SessionStore};

/// The transport to the bot with progress taken off in arrival order.
///
/// On a resumed session it also moves this run's request ids and progress tokens into
/// its epoch's [`IdRange`] (see `session_store`), and drops answers and progress outside
/// it: they are a previous run's.
pub(super) struct Tap {
    pub(super) inner: BrTransport<RoleClient>,
    pub(super) hub: Arc<Hub>,
    /// The connection's serial in its link, which keys its progress in the hub.
    pub(super) serial: u64,
    /// This run's ids: the range of its epoch (0, which moves nothing, on a session
    /// this run opened).
    pub(super) range: IdRange,
    /// On a revived session: its epoch, saved before the first send (off the router's
    /// task, which revives it), so a run that dies after sending leaves it used.
    pub(super) save_first: Option<(SessionStore, PeerId, Saved)>,
    /// The epoch could not be saved: nothing is sent in it.
    pub(super) unsaved: bool,
}

impl Transport<RoleClient> for Tap {
    type Error = AdapterError;

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some((store, bot, saved)) = self.save_first.take()
            && let Err(e) = store.save(&bot, &saved)
        {
            tracing::warn!(%bot, error = %e, "revived session's epoch not saved; it sends nothing");
            self.unsaved = true;
        }
        self.range.shift_out(&mut item);
        let send = (!self.unsaved).then(|| Transport::<RoleClient>::send(&mut self.inner, item));
        async move {
            match send {
                Some(send) => send.await,
                None => Err(AdapterError::Closed),
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let mut message: ServerJsonRpcMessage =
                Transport::<RoleClient>::receive(&mut self.inner).await?;
            if !self.range.shift_back(&mut message) {
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
