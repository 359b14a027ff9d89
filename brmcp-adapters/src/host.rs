//! What the adapter needs from a Bison Relay host: a way to send one PM, and a gate
//! deciding which peers may talk to us. Inbound PMs are pushed with
//! [`Router::handle_pm`](crate::Router::handle_pm).

use std::future::Future;
use std::pin::Pin;

use crate::error::BoxError;
use crate::peer::PeerId;

/// Sends one private message body to a peer.
///
/// The router calls it from one writer task per session, so PMs of one session are
/// sent one after the other, in order.
pub trait PmSender: Send + Sync + 'static {
    /// The host's error.
    type Error: std::error::Error + Send + Sync + 'static;

    /// Sends `body` as one PM to `to`.
    fn send_pm(
        &self,
        to: &PeerId,
        body: String,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// Decides whether a peer may talk to this router at all.
///
/// Called for every brmcp part before any reassembly or session state exists for it,
/// except parts on sessions this router dialed: dialing a peer authorizes its replies.
pub trait Authorizer: Send + Sync + 'static {
    /// `true` if `peer` may talk to us.
    fn allow(&self, peer: &PeerId) -> bool;
}

impl<F> Authorizer for F
where
    F: Fn(&PeerId) -> bool + Send + Sync + 'static,
{
    fn allow(&self, peer: &PeerId) -> bool {
        self(peer)
    }
}

/// Lets every peer in.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllowAll;

impl Authorizer for AllowAll {
    fn allow(&self, _peer: &PeerId) -> bool {
        true
    }
}

pub(crate) type SendFuture<'a> = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send + 'a>>;

/// Object-safe form of [`PmSender`], so the router is not generic over the host.
pub(crate) trait DynSender: Send + Sync + 'static {
    fn send_pm_dyn<'a>(&'a self, to: &'a PeerId, body: String) -> SendFuture<'a>;
}

impl<S: PmSender> DynSender for S {
    fn send_pm_dyn<'a>(&'a self, to: &'a PeerId, body: String) -> SendFuture<'a> {
        Box::pin(async move { self.send_pm(to, body).await.map_err(BoxError::from) })
    }
}
