//! MCP sessions over Bison Relay private messages, on the official Rust SDK (rmcp).
//!
//! Any Bison Relay host that can send a PM ([`PmSender`]) and hands every PM it receives
//! to [`Router::handle_pm`] gets MCP sessions in both roles:
//!
//! ```text
//! host PM in -> Router::handle_pm -> parse -> allow -> reassemble -> JSON-RPC decode
//!            -> session (peer, sid) -> BrTransport::receive -> rmcp service
//! rmcp service -> BrTransport::send (exp fixed) -> session writer: chunk -> PmSender
//! ```
//!
//! - [`Router`]: one per Bison Relay identity; [`Router::accept`] / [`Router::serve`] for
//!   the server role, [`Router::connect`] (a [`Client`], parked while idle) or
//!   [`Router::dial`] (a bare transport; [`Router::park_idle`] parks its service too,
//!   held by a [`ServiceSlot`] of yours) for the client role.
//! - [`BrTransport`]: one session as an [`rmcp::transport::Transport`] for
//!   [`RoleClient`](rmcp::RoleClient) and [`RoleServer`](rmcp::RoleServer). Both
//!   lifecycles rmcp speaks work: legacy `initialize` sessions and the stateless
//!   2026-07-28 protocol.
//! - `mem` (feature `test-util`): an in-memory PM fabric with seeded fault injection.
//!
//! # Example
//!
//! ```no_run
//! use brmcp_adapters::{PeerId, PmSender, Router, RouterConfig};
//! use rmcp::ServerHandler;
//!
//! /// The host: here it would hand the PM to brclient.
//! struct Host;
//!
//! impl PmSender for Host {
//!     type Error = std::io::Error;
//!     async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), Self::Error> {
//!         let _ = (to, body);
//!         Ok(())
//!     }
//! }
//!
//! #[derive(Clone)]
//! struct MyServer;
//! impl ServerHandler for MyServer {}
//!
//! async fn serve() {
//!     let router = Router::new(Host, RouterConfig::server());
//!     // The host calls `router.handle_pm(from, text)` for every PM it receives.
//!     router.serve(|_peer: &PeerId| MyServer);
//! }
//!
//! async fn call(server: PeerId) -> Result<(), Box<dyn std::error::Error>> {
//!     let router = Router::new(Host, RouterConfig::client());
//!     // Parked while idle (no rmcp service held), revived by the next lease.
//!     let client = router.connect(server, ()).await?;
//!     let tools = client.lease().await?.list_all_tools().await?;
//!     println!("{} tools", tools.len());
//!     Ok(())
//! }
//! # fn main() { let _ = (serve, call); }
//! ```

#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc(test(attr(deny(warnings))))]

mod client;
mod clock;
mod config;
mod error;
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
mod host;
mod id_range;
mod inbound_queue;
mod inbox;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod mem;
mod peer;
pub mod protocol;
mod recovery;
mod resume;
mod router;
mod session;
mod slot;
mod stats;
mod transport;

pub use brmcp_wire as wire;
pub use client::{Client, ConnectError, Lease, LeaseError};
pub use clock::{Clock, ManualClock, SystemClock, TokioClock};
pub use config::{
    ASSEMBLER_SLOTS, DEFAULT_ACCEPT_BACKLOG, DEFAULT_CLIENT_PARK_AFTER, DEFAULT_INBOUND_QUEUE,
    DEFAULT_INBOX_CAPACITY, DEFAULT_MAX_INBOUND_BYTES, DEFAULT_MAX_INBOX_BYTES,
    DEFAULT_MAX_OUTBOUND_BYTES, DEFAULT_MAX_SESSIONS_PER_PEER, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SERVER_IDLE_TIMEOUT, DEFAULT_TTL, RouterConfig,
};
pub use error::{AdapterError, BoxError};
pub use host::{AllowAll, Authorizer, PmSender};
pub use id_range::{ID_RANGE_SPAN, IdRange, MAX_ID_RANGE};
pub use peer::{PeerId, PeerIdError};
pub use protocol::{
    CALL_INTERRUPTED, REQUEST_TIMEOUT, SESSION_NOT_FOUND, TOO_MANY_SESSIONS, is_session_lost,
};
pub use recovery::{DEFAULT_SILENCE_PROBE, INITIALIZE_TIMEOUT};
pub use router::{NOT_ALLOWED_MESSAGE, REFUSAL_PEERS, REFUSAL_REPLY_INTERVAL, Router};
pub use slot::ServiceSlot;
pub use stats::RouterStats;
pub use transport::{BrTransport, SessionWatch};

/// Commands to the router's driver from routers and sessions: shared by the router and
/// its sessions' transports, so it lives above both.
pub(crate) enum Ctl {
    /// A session we dialed; replies on it are routed to `inbox`.
    Dialed {
        shared: std::sync::Arc<session::SessionShared>,
        inbox: inbox::InboxTx<rmcp::model::ServerJsonRpcMessage>,
    },
    /// A session's transport closed or was dropped.
    Close {
        peer: PeerId,
        sid: wire::SessionId,
        id: u64,
    },
    /// A dialed session held by a [`Client`] or another [`ServiceSlot`]: the router
    /// may park it.
    Parkable {
        peer: PeerId,
        sid: wire::SessionId,
        id: u64,
        slot: std::sync::Weak<dyn ServiceSlot>,
    },
    /// Revive the parked session `slot` holds; `done` is dropped if it is gone or no
    /// longer that slot's (another session took its sid).
    Revive {
        peer: PeerId,
        sid: wire::SessionId,
        slot: std::sync::Weak<dyn ServiceSlot>,
        done: tokio::sync::oneshot::Sender<()>,
    },
    /// A [`Client`] (or another slot) let its session go: closed, if it is still that
    /// slot's.
    Unslot {
        peer: PeerId,
        sid: wire::SessionId,
        slot: std::sync::Weak<dyn ServiceSlot>,
    },
    /// From now on, hand new sessions to this callback instead of the accept queue.
    Acceptor(Acceptor),
    /// A session's writer drained its queue with no request in progress, or a
    /// [`Client`]'s last lease ended: the session is parked its park delay
    /// ([`RouterConfig::server_park_after`], [`RouterConfig::client_park_after`]) later
    /// if it stays at rest (see `router::at_rest`).
    AtRest {
        peer: PeerId,
        sid: wire::SessionId,
        id: u64,
    },
    /// Close every session and stop.
    Shutdown,
}

/// Takes each new inbound session; runs on the router task, so it must not block.
pub(crate) type Acceptor = Box<dyn FnMut(BrTransport<rmcp::service::RoleServer>) + Send>;

/// Locks a std mutex, ignoring poisoning: no critical section in this crate leaves its
/// data half-updated.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
