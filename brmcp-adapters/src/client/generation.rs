//! One service's share of a session's JSON-RPC ids: each service of a parked and
//! revived session (its generation) sends and takes its ids in an [`IdRange`] of its
//! own.

use std::future::Future;

use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use crate::error::AdapterError;
use crate::id_range::{IdRange, MAX_ID_RANGE};
use crate::transport::BrTransport;

/// Generations a session may have: one id range each.
pub(crate) const MAX_GENERATION: u64 = MAX_ID_RANGE;

/// A dialed session's transport for its service of one generation.
pub(crate) struct Generation {
    pub(crate) inner: BrTransport<RoleClient>,
    shift: IdRange,
}

impl Generation {
    /// The transport of generation `generation` (at most [`MAX_GENERATION`]).
    pub(crate) fn new(inner: BrTransport<RoleClient>, generation: u64) -> Self {
        Self {
            inner,
            shift: IdRange::new(generation),
        }
    }
}

impl Transport<RoleClient> for Generation {
    type Error = AdapterError;

    fn send(
        &mut self,
        mut item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.shift.shift_out(&mut item);
        Transport::<RoleClient>::send(&mut self.inner, item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let mut message = Transport::<RoleClient>::receive(&mut self.inner).await?;
            if self.shift.shift_back(&mut message) {
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
