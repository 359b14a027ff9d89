//! The router: one per Bison Relay identity. It turns inbound PMs into JSON-RPC
//! messages of sessions keyed by (peer, sid), opens sessions peers start, and closes
//! idle ones.
//!
//! One task (the driver) owns all mutable routing state: the reassembler and its
//! storage, the session map, and the timers. [`Router::handle_pm`] queues PMs to it.
//! Per PM it runs, in order:
//!
//! 1. parse: chat and other versions are ignored silently; malformed envelopes are
//!    counted and logged at debug;
//! 2. the allow gate, before any state exists for the part (replies on sessions we
//!    dialed pass it);
//! 3. reassembly (duplicates of messages already delivered are dropped first, and
//!    parts the reassembler refuses on their header are refused before their body is
//!    decoded);
//! 4. JSON-RPC decode (failures are counted and dropped);
//! 5. the session (peer, sid): its bounded inbox, or a new session from an allowed
//!    peer handed to [`Router::accept`], or a session it expired, resumed (see
//!    `resume`); any other request there is answered session-not-found. A peer at its
//!    session cap makes room by closing its least recently active idle session (kept
//!    resumable, as an expired one); only a peer whose sessions are all busy is refused.
//!
//! The driver sleeps until the earlier of the reassembler's next deadline and the next
//! possible idle expiry or parking. A parked server session
//! ([`RouterConfig::server_park_after`]) keeps its entry but runs no service; its next
//! message revives it through the resume path. A dialed session a
//! [`Client`](crate::Client) holds parks likewise
//! ([`RouterConfig::client_park_after`]); a lease or the server's next message revives
//! it, always here on the driver (`client_park`).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Weak};
use std::time::Duration;

use brmcp_wire::{
    Accepted, AssembleError, Assembler, MAX_PM_PAYLOAD_LEN, MessageId, SessionId, UnixTime,
    Verdict, parse,
};
use rmcp::ServiceExt;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::{RoleClient, RoleServer, Service};
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;

use crate::clock::sleep_until_opt;
use crate::config::{ASSEMBLER_SLOTS, RouterConfig};
use crate::error::AdapterError;
use crate::host::PmSender;
use crate::inbound_queue::{InboundPm, QueueRx, QueueTx, inbound_queue};
use crate::inbox::{InboxTx, inbox};
use crate::peer::PeerId;
use crate::resume::Resumable;
use crate::session::{Outlet, SessionShared};
use crate::stats::{Counters, RouterStats};
use crate::transport::{BrTransport, Waits};
use crate::{Acceptor, Ctl, ServiceSlot};

mod at_rest;
mod client_park;
mod refusals;
mod sessions;
mod timers;
pub use refusals::{NOT_ALLOWED_MESSAGE, REFUSAL_PEERS, REFUSAL_REPLY_INTERVAL};

/// Completed message ids remembered per session, to drop duplicates of them.
const RECENT_MIDS: usize = 64;

/// Refused peers remembered, so each gets one info line, not one per part (a refused
/// peer's flood must not flood the log).
const REFUSED_LOGGED: usize = 64;

/// Router-level replies (errors for sessions that could not be opened) queued at most.
const REPLY_QUEUE: usize = 64;

/// Routes brmcp PMs of one Bison Relay identity to MCP sessions, in both roles.
///
/// Cheap to clone; every clone drives the same router. The router task runs until
/// [`close`](Self::close) or until every clone is dropped; either way it then closes
/// every session (no PM could reach them any more).
#[derive(Clone)]
pub struct Router {
    inner: Arc<Inner>,
}

struct Inner {
    inbound: QueueTx,
    ctl_tx: mpsc::UnboundedSender<Ctl>,
    counters: Arc<Counters>,
    /// The driver's peers refused, shared for [`Router::refused`].
    refused: Refused,
    accept_rx: Mutex<mpsc::Receiver<BrTransport<RoleServer>>>,
    outlet: Arc<Outlet>,
    next_id: Arc<AtomicU64>,
    epoch: Instant,
    inbox_capacity: usize,
    max_inbox_bytes: usize,
    waits: Waits,
    max_outbound_bytes: usize,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Router {
    /// A router sending through `sender`, with its task spawned on the current tokio
    /// runtime.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn new(sender: impl PmSender, config: RouterConfig) -> Self {
        let counters = Arc::new(Counters::default());
        let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
        let outlet = Arc::new(Outlet {
            sender: Arc::new(sender),
            clock: config.clock.clone(),
            counters: counters.clone(),
            chunk_len: config.chunk_len,
            ttl: config.ttl,
            at_rest: (config.accept_inbound && config.server_park_after.is_some())
                .then(|| ctl_tx.downgrade()),
        });
        let (inbound, pm_rx) = inbound_queue(
            config.inbound_queue,
            config.max_inbound_bytes,
            counters.clone(),
        );
        let (accept_tx, accept_rx) = mpsc::channel(config.accept_backlog.max(1));
        let (reply_tx, reply_rx) = mpsc::channel(REPLY_QUEUE);
        let next_id = Arc::new(AtomicU64::new(1));
        let epoch = Instant::now();
        let refused = Refused::default();
        tokio::spawn(reply_writer(outlet.clone(), reply_rx));
        let driver = Driver {
            next_idle_check: None,
            sessions: HashMap::new(),
            inbound_per_peer: HashMap::new(),
            resumable: Resumable::default(),
            counters: counters.clone(),
            outlet: outlet.clone(),
            ctl_weak: ctl_tx.downgrade(),
            accept_tx,
            acceptor: None,
            reply_tx,
            next_id: next_id.clone(),
            epoch,
            config: config.clone(),
            refused: refused.clone(),
            refusal_replies: refusals::RefusalReplies::default(),
            resting: at_rest::Resting::default(),
        };
        tokio::spawn(driver.run(pm_rx, ctl_rx));
        Self {
            inner: Arc::new(Inner {
                inbound,
                ctl_tx,
                counters,
                refused,
                accept_rx: Mutex::new(accept_rx),
                outlet,
                next_id,
                epoch,
                inbox_capacity: config.inbox_capacity,
                max_inbox_bytes: config.max_inbox_bytes,
                waits: Waits {
                    request_timeout: config.request_timeout,
                    silence_probe: config.silence_probe,
                },
                max_outbound_bytes: config.max_outbound_bytes,
            }),
        }
    }

    /// Hands the router one PM the host received from `from`, chat included. Waits
    /// while the router's inbound queue, or this peer's share of it, is full (bounded
    /// in PMs and bytes, served round robin per peer).
    ///
    /// # Errors
    /// [`AdapterError::RouterClosed`] once the router has stopped.
    pub async fn handle_pm(
        &self,
        from: PeerId,
        body: impl Into<String>,
    ) -> Result<(), AdapterError> {
        let pm = InboundPm {
            from,
            body: body.into(),
        };
        self.inner
            .inbound
            .push(pm)
            .await
            .map_err(|_| AdapterError::RouterClosed)
    }

    /// Opens a client session to `peer` with a fresh random session id. Nothing is sent
    /// until the MCP client sends its first message.
    ///
    /// # Errors
    /// [`AdapterError::RouterClosed`], or [`AdapterError::Entropy`] if no random id can
    /// be drawn.
    pub fn dial(&self, peer: PeerId) -> Result<BrTransport<RoleClient>, AdapterError> {
        let sid = SessionId::random().map_err(|e| AdapterError::Entropy(Box::new(e)))?;
        self.dial_on(peer, sid)
    }

    /// A client session to `peer` on a sid this host chose before, in an earlier run
    /// (WIRE.md §8: the peer serves it if open, resumes it if it expired it, and
    /// otherwise answers `-32010`). The caller does not dial one sid twice at once.
    ///
    /// # Errors
    /// [`AdapterError::RouterClosed`] once the router has stopped.
    pub fn dial_on(
        &self,
        peer: PeerId,
        sid: SessionId,
    ) -> Result<BrTransport<RoleClient>, AdapterError> {
        let id = self.inner.next_id.fetch_add(1, Relaxed);
        let shared = Arc::new(SessionShared::new(peer, sid, id, self.inner.epoch));
        let (inbox_tx, inbox_rx) = inbox(self.inner.inbox_capacity, self.inner.max_inbox_bytes);
        // Registered before the first PM can leave, so the first reply finds it.
        self.inner
            .ctl_tx
            .send(Ctl::Dialed {
                shared: shared.clone(),
                inbox: inbox_tx,
            })
            .map_err(|_| AdapterError::RouterClosed)?;
        Ok(BrTransport::new(
            shared,
            inbox_rx,
            self.inner.ctl_tx.clone(),
            self.inner.outlet.clone(),
            self.inner.waits,
            self.inner.max_outbound_bytes,
        ))
    }

    /// The next session a peer opened with us; `None` once the router has stopped.
    ///
    /// The session's first message is already queued in it.
    pub async fn accept(&self) -> Option<BrTransport<RoleServer>> {
        self.inner.accept_rx.lock().await.recv().await
    }

    /// Hands every session peers open from now on to `acceptor` instead of
    /// [`accept`](Self::accept). It runs on the router task: it must return quickly
    /// (spawn work, do not wait on it).
    pub fn set_acceptor(&self, acceptor: impl FnMut(BrTransport<RoleServer>) + Send + 'static) {
        let _ = self.inner.ctl_tx.send(Ctl::Acceptor(Box::new(acceptor)));
    }

    /// Serves every session peers open from now on with an rmcp service from `factory`
    /// (called with the peer), each in its own task.
    ///
    /// Must be called within a tokio runtime; the services run on it.
    pub fn serve<S, F>(&self, factory: F)
    where
        S: Service<RoleServer>,
        F: Fn(&PeerId) -> S + Send + 'static,
    {
        self.serve_sessions(move |peer, _| factory(peer));
    }

    /// As [`serve`](Self::serve), with the factory told the session id too (a server
    /// that must reach the session again, say after a restart, keeps it).
    pub fn serve_sessions<S, F>(&self, factory: F)
    where
        S: Service<RoleServer>,
        F: Fn(&PeerId, SessionId) -> S + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::current();
        self.set_acceptor(move |transport: BrTransport<RoleServer>| {
            let service = factory(&transport.peer(), transport.sid());
            // Not awaited inline: under the stateless lifecycle `serve` returns only at
            // the first real request.
            runtime.spawn(async move {
                match service.serve(transport).await {
                    Ok(running) => {
                        let _ = running.waiting().await;
                    }
                    Err(e) => tracing::debug!(error = %e, "session did not start"),
                }
            });
        });
    }

    /// Sends one server message to `peer` on session `sid`, whether or not this router
    /// has that session: an answer owed to a request an earlier process received (the
    /// peer's dialed session still waits for it, and routes it by its id). Returns once
    /// its PMs are sent. Not ordered with the messages of a live session on that sid.
    ///
    /// # Errors
    /// [`AdapterError::Json`] if it does not serialize, or the send's error.
    pub async fn send_on(
        &self,
        peer: PeerId,
        sid: SessionId,
        message: &ServerJsonRpcMessage,
    ) -> Result<(), AdapterError> {
        let payload = serde_json::to_vec(message)?;
        let outlet = &self.inner.outlet;
        outlet
            .send_message(&peer, sid, None, outlet.exp(), &payload)
            .await
    }

    /// A snapshot of the router's counters.
    pub fn stats(&self) -> RouterStats {
        self.inner.counters.snapshot()
    }

    /// The last peers (at most 64) whose parts the authorizer refused, oldest first:
    /// callers who tried and are not allowed, for an operator's page.
    pub fn refused(&self) -> Vec<PeerId> {
        self.inner
            .refused
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .copied()
            .collect()
    }

    /// Closes every session and stops the router task.
    pub fn close(&self) {
        let _ = self.inner.ctl_tx.send(Ctl::Shutdown);
    }

    /// The driver's command queue, for a [`Client`](crate::Client).
    pub(crate) fn ctl(&self) -> mpsc::UnboundedSender<Ctl> {
        self.inner.ctl_tx.clone()
    }

    #[cfg(feature = "test-util")]
    pub(crate) fn downgrade(&self) -> WeakRouter {
        WeakRouter {
            inner: Arc::downgrade(&self.inner),
        }
    }
}

/// A router handle that does not keep the router alive.
#[cfg(feature = "test-util")]
#[derive(Clone)]
pub(crate) struct WeakRouter {
    inner: Weak<Inner>,
}

#[cfg(feature = "test-util")]
impl WeakRouter {
    pub(crate) fn upgrade(&self) -> Option<Router> {
        self.inner.upgrade().map(|inner| Router { inner })
    }
}

/// Sends router-level replies, one after another.
async fn reply_writer(outlet: Arc<Outlet>, mut rx: mpsc::Receiver<Reply>) {
    while let Some((peer, sid, exp, payload)) = rx.recv().await {
        if let Err(e) = outlet.send_message(&peer, sid, None, exp, &payload).await {
            tracing::debug!(%peer, error = %e, "reply not sent");
        }
    }
}

/// A router-level reply: to whom, on which session, its deadline and its JSON.
type Reply = (PeerId, SessionId, UnixTime, Vec<u8>);

/// Where a session's decoded inbound messages go, by the local role.
enum Inbox {
    /// We serve: the peer sends client messages.
    Server(InboxTx<ClientJsonRpcMessage>),
    /// We dialed: the peer sends server messages.
    Client(InboxTx<ServerJsonRpcMessage>),
    /// We serve, and the session is parked: no service runs; its next message revives
    /// it (see [`RouterConfig::server_park_after`]).
    Parked,
    /// We dialed, and the [`Client`](crate::Client) holding the session parked it (see
    /// [`RouterConfig::client_park_after`]): a lease or the server's next message
    /// revives it.
    ClientParked,
}

struct Entry {
    inbox: Inbox,
    shared: Arc<SessionShared>,
    /// Opened by the peer (counts against its cap).
    inbound: bool,
    idle: Option<Duration>,
    recent: VecDeque<MessageId>,
    /// On a dialed session held by a [`Client`](crate::Client) or another
    /// [`ServiceSlot`]: its holder, which parks and revives its service.
    slot: Option<Weak<dyn ServiceSlot>>,
}

/// Why the driver closes a session.
#[derive(Debug, Clone, Copy)]
enum CloseReason {
    Transport,
    Idle,
    /// The least recently active idle session of a peer at its cap, closed to make room
    /// for the peer's new one.
    Displaced,
    Overflow,
    Shutdown,
}

struct Driver {
    config: RouterConfig,
    counters: Arc<Counters>,
    outlet: Arc<Outlet>,
    /// Weak, so the driver stops once no router handle or session is left.
    ctl_weak: mpsc::WeakUnboundedSender<Ctl>,
    accept_tx: mpsc::Sender<BrTransport<RoleServer>>,
    acceptor: Option<Acceptor>,
    reply_tx: mpsc::Sender<Reply>,
    sessions: HashMap<(PeerId, SessionId), Entry>,
    /// The sessions each peer opened (bounded by the per-peer cap), so the cap check and
    /// the choice of a session to close scan one peer's few, not the whole map.
    inbound_per_peer: HashMap<PeerId, Vec<SessionId>>,
    /// Sessions peers opened that expired idle or were displaced at the cap, kept
    /// resumable.
    resumable: Resumable,
    /// No session can be idle before this instant.
    next_idle_check: Option<Instant>,
    next_id: Arc<AtomicU64>,
    epoch: Instant,
    /// The last [`REFUSED_LOGGED`] peers refused, newest last.
    refused: Refused,
    /// When each refused peer was last told so.
    refusal_replies: refusals::RefusalReplies,
    /// Sessions peers opened that came to rest, by when they are due to park.
    resting: at_rest::Resting,
}

/// The last [`REFUSED_LOGGED`] peers refused, newest last; the driver writes it, the
/// router's handle reads it.
type Refused = Arc<std::sync::Mutex<VecDeque<PeerId>>>;

type PeerKey = [u8; 32];

impl Driver {
    async fn run(mut self, pm_rx: QueueRx, mut ctl_rx: mpsc::UnboundedReceiver<Ctl>) {
        // The reassembler borrows its storage, so both live in this task's frame. The
        // arena is zeroed by the allocator lazily: untouched pages cost no memory.
        let limits = self.config.limits;
        let mut arena = vec![0u8; limits.max_total_bytes].into_boxed_slice();
        let mut scratch =
            vec![0u8; limits.max_message_bytes.min(MAX_PM_PAYLOAD_LEN)].into_boxed_slice();
        let mut assembler: Assembler<'_, PeerKey, ASSEMBLER_SLOTS> =
            Assembler::new(&mut arena, &mut scratch, limits);
        loop {
            let wake = self.next_wake(&assembler);
            // Due timers first: a steady stream of PMs must not starve idle expiry and
            // reassembly clean-up.
            if wake.is_some_and(|at| at <= Instant::now()) {
                self.on_timer(&mut assembler);
                continue;
            }
            tokio::select! {
                biased;
                ctl = ctl_rx.recv() => match ctl {
                    None | Some(Ctl::Shutdown) => break,
                    Some(ctl) => self.on_ctl(ctl),
                },
                pm = pm_rx.pop() => match pm {
                    Some(pm) => self.on_pm(&mut assembler, pm),
                    // Every router handle is gone: no PM can arrive, so no session
                    // can make progress. Close them all and stop.
                    None => break,
                },
                () = sleep_until_opt(wake) => self.on_timer(&mut assembler),
            }
        }
        let keys: Vec<_> = self.sessions.keys().copied().collect();
        for key in keys {
            self.close(key, CloseReason::Shutdown);
        }
    }

    fn update_buffered(&self, assembler: &Assembler<'_, PeerKey, ASSEMBLER_SLOTS>) {
        let stats = assembler.stats();
        self.counters
            .bytes_buffered
            .store(stats.bytes as u64, Relaxed);
        self.counters
            .messages_buffered
            .store(stats.messages as u64, Relaxed);
    }

    fn on_ctl(&mut self, ctl: Ctl) {
        match ctl {
            Ctl::Dialed { shared, inbox } => {
                let key = (shared.peer, shared.sid);
                let idle = self.config.client_idle_timeout;
                let entry = Entry {
                    inbox: Inbox::Client(inbox),
                    shared,
                    inbound: false,
                    idle,
                    recent: VecDeque::new(),
                    slot: None,
                };
                if let Some(old) = self.sessions.insert(key, entry) {
                    // A 64-bit random sid collided with a live session: keep the new one.
                    self.forget(key, &old);
                }
                Counters::bump(&self.counters.sessions_dialed);
                self.counters.sessions_open.fetch_add(1, Relaxed);
                self.schedule_idle(idle);
            }
            Ctl::Close { peer, sid, id } => {
                let key = (peer, sid);
                if self.sessions.get(&key).is_some_and(|e| e.shared.id == id) {
                    self.close(key, CloseReason::Transport);
                }
            }
            Ctl::AtRest { peer, sid, id } => self.at_rest((peer, sid), id),
            Ctl::Parkable {
                peer,
                sid,
                id,
                slot,
            } => self.parkable((peer, sid), id, slot),
            Ctl::Revive {
                peer,
                sid,
                slot,
                done,
            } => self.revive_for_lease((peer, sid), &slot, done),
            Ctl::Unslot { peer, sid, slot } => self.unslot((peer, sid), &slot),
            Ctl::Acceptor(acceptor) => self.acceptor = Some(acceptor),
            Ctl::Shutdown => {}
        }
    }

    /// Bookkeeping for an entry leaving the map.
    fn forget(&mut self, key: (PeerId, SessionId), entry: &Entry) {
        entry.shared.mark_closed();
        if entry.inbound
            && let Some(sids) = self.inbound_per_peer.get_mut(&key.0)
        {
            sids.retain(|sid| *sid != key.1);
            if sids.is_empty() {
                self.inbound_per_peer.remove(&key.0);
            }
        }
        Counters::bump(&self.counters.sessions_closed);
        self.counters.sessions_open.fetch_sub(1, Relaxed);
    }

    /// Removes a session; dropping its inbox sender ends its transport's `receive`.
    fn close(&mut self, key: (PeerId, SessionId), reason: CloseReason) {
        if let Some(entry) = self.sessions.remove(&key) {
            tracing::debug!(peer = %key.0, sid = %key.1, ?reason, "session closed");
            // Its client did nothing wrong when the session idled out or made room for
            // another: its next request resumes it.
            let resumable = match reason {
                CloseReason::Idle => {
                    Counters::bump(&self.counters.sessions_expired);
                    true
                }
                CloseReason::Displaced => true,
                CloseReason::Overflow => {
                    Counters::bump(&self.counters.sessions_overflowed);
                    false
                }
                CloseReason::Transport | CloseReason::Shutdown => false,
            };
            if resumable
                && entry.inbound
                && let Some(record) = entry.shared.resume_record()
            {
                self.resumable.insert(key, record, Instant::now());
            }
            self.forget(key, &entry);
        }
    }

    fn on_pm(&mut self, assembler: &mut Assembler<'_, PeerKey, ASSEMBLER_SLOTS>, pm: InboundPm) {
        Counters::bump(&self.counters.pms_received);
        // Borrowed, not moved out of the result: a move copies the whole part, a
        // copy the decode then waits on.
        let parsed = parse(&pm.body);
        let part = match &parsed {
            Ok(part) => part,
            Err(e) if e.is_foreign() => {
                Counters::bump(&self.counters.dropped_foreign);
                return;
            }
            Err(e) => {
                Counters::bump(&self.counters.dropped_malformed);
                tracing::debug!(peer = %pm.from, error = %e, "malformed part");
                return;
            }
        };
        let peer = pm.from;
        let key = (peer, *part.sid());
        let session = self.sessions.get(&key);
        // Replies on sessions we dialed pass: dialing the peer authorized it.
        let dialed = session.is_some_and(|e| !e.inbound);
        if !dialed && !self.config.authorizer.allow(&peer) {
            Counters::bump(&self.counters.dropped_disallowed);
            let mut refused = self
                .refused
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if refused.contains(&peer) {
                tracing::debug!(%peer, "part from a peer not allowed");
            } else {
                tracing::info!(%peer, "refused a caller that is not allowed");
                if refused.len() == REFUSED_LOGGED {
                    refused.pop_front();
                }
                refused.push_back(peer);
            }
            drop(refused);
            self.tell_refused(peer, part);
            return;
        }
        Counters::bump(&self.counters.parts_received);
        match session {
            Some(entry) if entry.recent.contains(part.mid()) => {
                Counters::bump(&self.counters.dropped_duplicate);
                return;
            }
            Some(_) => {}
            None if !self.config.accept_inbound => {
                Counters::bump(&self.counters.dropped_unknown_session);
                return;
            }
            // A capped peer with no idle session to give up gets no reassembly storage
            // for new sessions.
            None if part.total() > 1
                && self.at_cap(&peer)
                && self.displaceable(&peer).is_none() =>
            {
                Counters::bump(&self.counters.dropped_session_cap);
                return;
            }
            None => {}
        }
        let mid = *part.mid();
        let now = self.config.clock.now();
        // Refusals the header decides cost no decode.
        let added = match assembler.check(peer.as_bytes(), part, now) {
            Ok(Verdict::Undecided) => assembler.add(*peer.as_bytes(), part, now),
            Ok(Verdict::Duplicate) => Ok(Accepted::Duplicate),
            Err(e) => Err(e),
        };
        match added {
            Ok(Accepted::Complete(payload)) => self.on_message(peer, key.1, mid, payload),
            Ok(Accepted::Pending) => {}
            Ok(Accepted::Duplicate) => Counters::bump(&self.counters.dropped_duplicate),
            Err(AssembleError::Expired) => {
                Counters::bump(&self.counters.dropped_expired);
                tracing::debug!(%peer, "part past its deadline");
            }
            Err(e) if e.is_malformed() => {
                Counters::bump(&self.counters.dropped_malformed);
                tracing::debug!(%peer, error = %e, "malformed part body");
            }
            Err(e) => {
                Counters::bump(&self.counters.dropped_reassembly);
                tracing::debug!(%peer, error = %e, "part refused by reassembly");
            }
        }
        self.update_buffered(assembler);
    }
}
