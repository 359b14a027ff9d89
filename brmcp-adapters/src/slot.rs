//! [`ServiceSlot`]: the holder of a dialed session's rmcp service, which the router
//! parks while idle and revives on use or on the server's message, as it does a
//! [`Client`](crate::Client)'s (one implementation of it). For a client that keeps
//! state of its own around the service (the bridge's link to a bot, say): it registers
//! its session with [`Router::park_idle`], revives it with [`Router::unpark`] before
//! use, and lets it go with [`Router::release`].

use std::sync::Weak;

use brmcp_wire::SessionId;
use rmcp::service::RoleClient;
use tokio::sync::oneshot;

use crate::Ctl;
use crate::peer::PeerId;
use crate::router::Router;
use crate::transport::BrTransport;

/// What the router asks of the holder of a dialed session it may park. Both methods run
/// on the router's task: they must return at once (no waiting, no I/O).
pub trait ServiceSlot: Send + Sync {
    /// The session has been idle for
    /// [`RouterConfig::client_park_after`](crate::RouterConfig::client_park_after):
    /// takes its running service out, for the router to drop once it has swapped the
    /// session's state (so the dropped transport's close is stale); `None` leaves it
    /// running (its holder still uses it), to be asked again a park delay later.
    fn park(&self) -> Option<Box<dyn Send>>;

    /// Runs a new service on `transport`, the parked session's, whose inbox already
    /// holds the server's message that revived it, if one did. The service skips the
    /// handshake (`serve_directly` with the server's info kept) and numbers its
    /// requests in an [`IdRange`](crate::IdRange) no earlier service of the session
    /// used. `false` if the holder no longer wants the session: the router closes it.
    fn revive(&self, transport: BrTransport<RoleClient>) -> bool;
}

impl Router {
    /// Lets the router park the session of `transport` (one [`dial`](Self::dial)ed)
    /// while idle, `slot` holding its service. Idle means as for a
    /// [`Client`](crate::Client): no request of either side in progress, nothing left
    /// to send, and `slot` willing.
    pub fn park_idle(&self, transport: &BrTransport<RoleClient>, slot: Weak<dyn ServiceSlot>) {
        let shared = transport.shared();
        // Gone with the router: nothing is parked then.
        let _ = self.ctl().send(Ctl::Parkable {
            peer: shared.peer,
            sid: shared.sid,
            id: shared.id,
            slot,
        });
    }

    /// Revives the session (`peer`, `sid`) that `slot` holds if it is parked, on the
    /// router's task (nothing is sent); `true` once it runs, `false` if the session is
    /// gone (the router stopped, or another dial took its sid).
    pub async fn unpark(&self, peer: PeerId, sid: SessionId, slot: &Weak<dyn ServiceSlot>) -> bool {
        let (done, revived) = oneshot::channel();
        let asked = self.ctl().send(Ctl::Revive {
            peer,
            sid,
            slot: slot.clone(),
            done,
        });
        asked.is_ok() && revived.await.is_ok()
    }

    /// `slot` lets its session (`peer`, `sid`) go: closed, if `slot` still holds it (a
    /// parked session has no transport whose drop would close it).
    pub fn release(&self, peer: PeerId, sid: SessionId, slot: &Weak<dyn ServiceSlot>) {
        let _ = self.ctl().send(Ctl::Unslot {
            peer,
            sid,
            slot: slot.clone(),
        });
    }
}
