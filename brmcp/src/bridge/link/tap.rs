//! The transport to the bot, with progress and log messages taken off in arrival
//! order and, on a resumed session, request ids moved into its epoch's range.

use std::sync::Arc;

use brmcp_adapters::{AdapterError, BrTransport, IdRange};
use rmcp::model::{JsonRpcMessage, ServerJsonRpcMessage, ServerNotification};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use super::hub::Hub;

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
}

impl Transport<RoleClient> for Tap {
    type Error = AdapterError;

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.range.shift_out(&mut item);
        Transport::<RoleClient>::send(&mut self.inner, item)
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
