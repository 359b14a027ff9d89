//! [`Client`]: a session we dialed, held by its user and parked while idle.
//!
//! An rmcp service costs about 23 KB even when nothing happens on it (rmcp allocates the
//! first 32-slot blocks of its two channels up front), most of what an idle session
//! holds. So a [`Client`] does not keep one: after
//! [`RouterConfig::client_park_after`](crate::RouterConfig::client_park_after) of
//! idleness the router parks the session (its entry, sid, caps and timers stay; the
//! service goes), and brings it back with no traffic on the wire:
//!
//! - [`Client::lease`] on a parked session asks the router to revive it;
//! - a request or notification from the server on a parked session (a ping, a roots
//!   request, a list change) revives it too, the message queued first. An answer does
//!   not: no request of ours waits on a parked session, so it is late (or forged) and
//!   dropped.
//!
//! Every revival happens on the router's task, so a session has one service at a time
//! however many leases and messages race. A revived service skips the handshake
//! (`serve_directly`, with the server's info kept from the first one) and numbers its
//! requests in a range of its own (see `generation`).

use std::ops::Deref;
use std::sync::{Arc, Mutex, Weak};

use brmcp_wire::SessionId;
use rmcp::model::ServerPeerInfo;
use rmcp::service::{ClientInitializeError, Peer, RoleClient, RunningService, serve_directly};
use rmcp::{ClientHandler, ClientLifecycleMode, ClientServiceExt};
use tokio::sync::{mpsc, oneshot};

use crate::Ctl;
use crate::ServiceSlot;
use crate::error::AdapterError;
use crate::peer::PeerId;
use crate::router::Router;
use crate::session::SessionShared;
use crate::transport::BrTransport;

mod generation;

use generation::{Generation, MAX_GENERATION};

/// Times [`Client::lease`] asks the router to revive its session before giving up: 4.
/// One is enough unless the session is parked again between the revival and the
/// lease, which takes a whole park delay; the bound only keeps a pathological
/// configuration (a zero delay) from spinning.
const MAX_REVIVE_ATTEMPTS: usize = 4;

/// Why [`Router::connect`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The session could not be opened (the router stopped, no entropy).
    #[error("dial: {0}")]
    Dial(#[from] AdapterError),
    /// The MCP handshake failed (boxed: rmcp's error holds a whole message).
    #[error("handshake: {0}")]
    Handshake(#[from] Box<ClientInitializeError>),
}

/// Why [`Client::lease`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// The session is closed, or its router stopped.
    #[error("session closed")]
    Closed,
    /// The session was parked again each time it was revived.
    #[error("session kept parking")]
    Parking,
}

/// A session we dialed and hold, parked while idle (see the module docs).
///
/// Made by [`Router::connect`]. Requests go through a [`Lease`]: hold it while you use
/// the session, drop it when done (a held lease keeps the session from parking).
/// Dropping the client, or [`close`](Self::close), closes the session.
pub struct Client<H: ClientHandler + Clone> {
    slot: Arc<Slot<H>>,
}

/// The session's state the client and its leases share.
struct Slot<H: ClientHandler + Clone> {
    peer: PeerId,
    sid: SessionId,
    handler: H,
    /// The server's info from the handshake, given to every revived service.
    info: Option<ServerPeerInfo>,
    ctl: mpsc::UnboundedSender<Ctl>,
    state: Mutex<State<H>>,
}

struct State<H: ClientHandler + Clone> {
    run: Run<H>,
    leases: usize,
    /// Services started on the session so far, less one.
    generation: u64,
}

enum Run<H: ClientHandler + Clone> {
    Live {
        service: RunningService<RoleClient, H>,
        shared: Arc<SessionShared>,
    },
    Parked,
    Closed,
}

/// A running session leased from a [`Client`]: it dereferences to the rmcp
/// [`Peer`] to send requests on. The session does not park while a lease is held.
///
/// A `Peer` cloned out of it stops working once the session parks.
pub struct Lease<H: ClientHandler + Clone> {
    peer: Peer<RoleClient>,
    slot: Arc<Slot<H>>,
}

impl<H: ClientHandler + Clone> std::fmt::Debug for Client<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("peer", &self.slot.peer)
            .field("sid", &self.slot.sid)
            .field("parked", &self.is_parked())
            .finish_non_exhaustive()
    }
}

impl<H: ClientHandler + Clone> std::fmt::Debug for Lease<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("peer", &self.slot.peer)
            .field("sid", &self.slot.sid)
            .finish_non_exhaustive()
    }
}

impl Router {
    /// Opens a client session to `peer` (as [`dial`](Self::dial)) and runs the MCP
    /// `initialize` handshake with `handler` serving the server's requests and
    /// notifications. The session parks when idle and revives on use; `handler` is
    /// cloned for each service, so it keeps no per-service state.
    ///
    /// # Errors
    /// [`ConnectError::Dial`] if the session cannot be opened,
    /// [`ConnectError::Handshake`] if the server does not complete the handshake.
    pub async fn connect<H: ClientHandler + Clone>(
        &self,
        peer: PeerId,
        handler: H,
    ) -> Result<Client<H>, ConnectError> {
        self.connect_with(peer, handler, ClientLifecycleMode::Initialize)
            .await
    }

    /// As [`connect`](Self::connect), with the given lifecycle (the stateless
    /// 2026-07-28 protocol's `server/discover`, say); a revived service goes on with the
    /// one negotiated.
    ///
    /// # Errors
    /// As [`connect`](Self::connect).
    pub async fn connect_with<H: ClientHandler + Clone>(
        &self,
        peer: PeerId,
        handler: H,
        lifecycle: ClientLifecycleMode,
    ) -> Result<Client<H>, ConnectError> {
        let transport = self.dial(peer)?;
        let shared = transport.shared().clone();
        let service = handler
            .clone()
            .serve_with_lifecycle(Generation::new(transport, 0), lifecycle)
            .await
            .map_err(Box::new)?;
        let info = service.peer_info().map(|info| (*info).clone());
        let slot = Arc::new(Slot {
            peer,
            sid: shared.sid,
            handler,
            info,
            ctl: self.ctl(),
            state: Mutex::new(State {
                run: Run::Live {
                    service,
                    shared: shared.clone(),
                },
                leases: 0,
                generation: 0,
            }),
        });
        let weak = slot.weak();
        // Gone with the router: the lease then says closed.
        let _ = slot.ctl.send(Ctl::Parkable {
            peer,
            sid: shared.sid,
            id: shared.id,
            slot: weak,
        });
        Ok(Client { slot })
    }
}

impl<H: ClientHandler + Clone> Client<H> {
    /// The running session, revived first if it was parked (nothing is sent).
    ///
    /// # Errors
    /// [`LeaseError::Closed`] once the session is closed (by us, by the router, for an
    /// inbound overflow, or by a dial that took its sid); [`LeaseError::Parking`] if it
    /// parked again each time.
    pub async fn lease(&self) -> Result<Lease<H>, LeaseError> {
        for _ in 0..MAX_REVIVE_ATTEMPTS {
            {
                let mut state = crate::lock(&self.slot.state);
                match &state.run {
                    Run::Live { service, shared } => {
                        if shared.is_closed() || service.is_closed() {
                            return Err(LeaseError::Closed);
                        }
                        let peer = service.peer().clone();
                        state.leases += 1;
                        return Ok(Lease {
                            peer,
                            slot: self.slot.clone(),
                        });
                    }
                    Run::Closed => return Err(LeaseError::Closed),
                    Run::Parked => {}
                }
            }
            let (done, revived) = oneshot::channel();
            self.slot
                .ctl
                .send(Ctl::Revive {
                    peer: self.slot.peer,
                    sid: self.slot.sid,
                    slot: self.slot.weak(),
                    done,
                })
                .map_err(|_| LeaseError::Closed)?;
            revived.await.map_err(|_| LeaseError::Closed)?;
        }
        Err(LeaseError::Parking)
    }

    /// The server's peer id.
    pub fn peer_id(&self) -> PeerId {
        self.slot.peer
    }

    /// The session id.
    pub fn sid(&self) -> SessionId {
        self.slot.sid
    }

    /// What the server told of itself in the handshake.
    pub fn server_info(&self) -> Option<&ServerPeerInfo> {
        self.slot.info.as_ref()
    }

    /// Whether the session is parked now (no service runs).
    pub fn is_parked(&self) -> bool {
        matches!(crate::lock(&self.slot.state).run, Run::Parked)
    }

    /// Closes the session; a request in progress fails.
    pub async fn close(self) {
        if let Some(service) = self.slot.shut() {
            let _ = service.cancel().await;
        }
    }
}

impl<H: ClientHandler + Clone> Drop for Client<H> {
    fn drop(&mut self) {
        drop(self.slot.shut());
    }
}

impl<H: ClientHandler + Clone> Slot<H> {
    /// How the router's entry names this client, to tell it from another client's
    /// entry on the same sid.
    fn weak(self: &Arc<Self>) -> Weak<dyn ServiceSlot> {
        Arc::downgrade(self) as Weak<dyn ServiceSlot>
    }

    /// Marks the client closed: its service (if one runs) is returned, for the caller to
    /// end; a parked session is closed by the router.
    fn shut(self: &Arc<Self>) -> Option<RunningService<RoleClient, H>> {
        let run = std::mem::replace(&mut crate::lock(&self.state).run, Run::Closed);
        let _ = self.ctl.send(Ctl::Unslot {
            peer: self.peer,
            sid: self.sid,
            slot: self.weak(),
        });
        match run {
            Run::Live { service, .. } => Some(service),
            Run::Parked | Run::Closed => None,
        }
    }
}

impl<H: ClientHandler + Clone> ServiceSlot for Slot<H> {
    fn park(&self) -> Option<Box<dyn Send>> {
        let mut state = crate::lock(&self.state);
        // Past the last id range the session stays running: a revival would have none.
        if state.leases > 0
            || !matches!(state.run, Run::Live { .. })
            || state.generation >= MAX_GENERATION
        {
            return None;
        }
        match std::mem::replace(&mut state.run, Run::Parked) {
            Run::Live { service, .. } => Some(Box::new(service)),
            other => {
                state.run = other;
                None
            }
        }
    }

    fn revive(&self, transport: BrTransport<RoleClient>) -> bool {
        let mut state = crate::lock(&self.state);
        if !matches!(state.run, Run::Parked) || state.generation >= MAX_GENERATION {
            return false;
        }
        state.generation += 1;
        let shared = transport.shared().clone();
        let service = serve_directly(
            self.handler.clone(),
            Generation::new(transport, state.generation),
            self.info.clone(),
        );
        state.run = Run::Live { service, shared };
        true
    }
}

impl<H: ClientHandler + Clone> Deref for Lease<H> {
    type Target = Peer<RoleClient>;

    fn deref(&self) -> &Peer<RoleClient> {
        &self.peer
    }
}

impl<H: ClientHandler + Clone> Drop for Lease<H> {
    fn drop(&mut self) {
        let mut state = crate::lock(&self.slot.state);
        state.leases = state.leases.saturating_sub(1);
        // The park delay counts from the end of the last use; the last lease's end is
        // a rest, reported once until the router looked at it.
        if let Run::Live { shared, .. } = &state.run {
            shared.touch();
            if state.leases == 0 && shared.claim_rest_report() {
                let _ = self.slot.ctl.send(Ctl::AtRest {
                    peer: self.slot.peer,
                    sid: self.slot.sid,
                    id: shared.id,
                });
            }
        }
    }
}
