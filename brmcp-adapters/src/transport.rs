//! [`BrTransport`]: one brmcp session as an [`rmcp::transport::Transport`], in either role.
//!
//! `send` serializes the message and queues it for the session's writer, with its
//! deadline, before it returns its future, so PMs leave in the order rmcp called `send`
//! (rmcp polls send futures concurrently; a progress notification must not overtake its
//! response), and a host that stalls delays a message but never extends its deadline.
//! `receive` is a channel receive and so cancellation-safe.
//!
//! On a dialed (client) session the transport also
//! - fails a request that gets no answer within the configured timeout with a JSON-RPC
//!   error [`REQUEST_TIMEOUT`] (and tells the peer it is cancelled); the request's
//!   parts carry a deadline that passes no later than that, so a request the caller gave
//!   up on never starts at the peer. `initialize` waits at most [`INITIALIZE_TIMEOUT`]:
//!   a peer that drops new sessions silently (the Go router at its session limit) is
//!   reported quickly;
//! - recovers from a server that lost the session, whatever its implementation
//!   ([`is_session_lost`]: our [`SESSION_NOT_FOUND`], or go-sdk's refusal on the fresh
//!   session the Go router opens for a forgotten one): it repeats the session's
//!   `initialize` (under an id of its own, and swallows the answer) and
//!   `notifications/initialized`, then sends every request still outstanding again,
//!   once each, under its first message id and deadline. rmcp sees only the requests'
//!   real answers.
//!
//! An accepted (server) session can be a resumed one: the router replays the recorded
//! `initialize` into it, and the transport swallows the answer (see the router).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use brmcp_wire::{MessageId, SessionId, UnixTime};
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerResult,
};
use rmcp::service::{RoleClient, RoleServer, RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::AdapterError;
use crate::inbox::InboxRx;
use crate::peer::PeerId;
use crate::protocol::{REQUEST_TIMEOUT, SESSION_NOT_FOUND, is_session_lost};
use crate::router::Ctl;
use crate::session::{Outbound, Outlet, SessionShared};

/// The longest a dialed session waits for the answer to an `initialize`, its own or a
/// repeated one: 30 seconds. A server answers `initialize` at once (the Go serving
/// harness in tens of milliseconds plus two PM hops), while the Go router drops a new
/// session silently at its per-peer limit: without this bound the client would wait the
/// whole request timeout (10 minutes) for an answer that never comes. Shorter than any
/// sensible request timeout, long enough for a slow relay.
pub const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// The id prefix of a repeated `initialize`: a string, so it never collides with the
/// numeric ids rmcp draws, and its answer is recognised as ours.
const REINIT_ID_PREFIX: &str = "brmcp-reinit-";

/// One brmcp session (peer, sid) as an rmcp transport.
///
/// Made by [`Router::dial`](crate::Router::dial) (`RoleClient`) or handed out by
/// [`Router::accept`](crate::Router::accept) (`RoleServer`). Dropping it closes the
/// session; messages already queued are still sent.
pub struct BrTransport<R: ServiceRole> {
    session: Arc<SessionShared>,
    outbox: mpsc::UnboundedSender<Outbound>,
    inbox: InboxRx<RxJsonRpcMessage<R>>,
    ctl: mpsc::UnboundedSender<Ctl>,
    outlet: Arc<Outlet>,
    client: ClientState,
    /// On a resumed server session: the id of the replayed `initialize`, whose answer
    /// is not sent.
    swallow: Option<RequestId>,
    /// Bytes the outbound queue may hold before the session is closed.
    max_outbound: usize,
    _role: PhantomData<fn() -> R>,
}

impl<R: ServiceRole> std::fmt::Debug for BrTransport<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrTransport")
            .field("peer", &self.session.peer)
            .field("sid", &self.session.sid)
            .field("role", &std::any::type_name::<R>())
            .finish_non_exhaustive()
    }
}

impl<R: ServiceRole> BrTransport<R> {
    pub(crate) fn new(
        session: Arc<SessionShared>,
        outbox: mpsc::UnboundedSender<Outbound>,
        inbox: InboxRx<RxJsonRpcMessage<R>>,
        ctl: mpsc::UnboundedSender<Ctl>,
        outlet: Arc<Outlet>,
        request_timeout: Option<Duration>,
        max_outbound: usize,
    ) -> Self {
        Self {
            session,
            outbox,
            inbox,
            ctl,
            client: ClientState::new(request_timeout, outlet.ttl),
            outlet,
            swallow: None,
            max_outbound,
            _role: PhantomData,
        }
    }

    /// The peer at the other end.
    pub fn peer(&self) -> PeerId {
        self.session.peer
    }

    /// The session id.
    pub fn sid(&self) -> SessionId {
        self.session.sid
    }

    /// Queues an already serialized message as `mid` (fresh when `None`) with deadline
    /// `exp`; the receiver tells when its PMs are sent. A queue over its byte bound
    /// closes the session, as an inbox overflow does: a peer cannot make us buffer
    /// without limit.
    fn enqueue(
        &mut self,
        payload: Arc<Vec<u8>>,
        mid: Option<MessageId>,
        exp: UnixTime,
    ) -> Result<oneshot::Receiver<Result<(), AdapterError>>, AdapterError> {
        let (ack, done) = oneshot::channel();
        self.enqueue_with(Queued {
            payload,
            mid,
            exp,
            ack: Some(ack),
        })?;
        Ok(done)
    }

    /// Queues messages nobody waits for (recovery and cancellation traffic).
    fn enqueue_quiet(&mut self, sends: Vec<Queued>) {
        for send in sends {
            let _ = self.enqueue_with(send);
        }
    }

    fn enqueue_with(&mut self, send: Queued) -> Result<(), AdapterError> {
        let Queued {
            payload,
            mid,
            exp,
            ack,
        } = send;
        if !self
            .session
            .reserve_outbound(payload.len(), self.max_outbound)
        {
            tracing::debug!(peer = %self.session.peer, sid = %self.session.sid, "outbound queue full; closing the session");
            self.close_session();
            return Err(AdapterError::OutboundFull(self.max_outbound));
        }
        let len = payload.len();
        self.outbox
            .send(Outbound {
                payload,
                mid,
                exp,
                ack,
            })
            .map_err(|_| {
                self.session.release_outbound(len);
                AdapterError::Closed
            })
    }

    fn close_session(&mut self) {
        if self.session.mark_closed() {
            let _ = self.ctl.send(Ctl::Close {
                peer: self.session.peer,
                sid: self.session.sid,
                id: self.session.id,
            });
        }
        self.inbox.close();
    }
}

impl<R: ServiceRole> Drop for BrTransport<R> {
    fn drop(&mut self) {
        self.close_session();
    }
}

/// The future `send` returns: it waits for the writer's acknowledgement only.
async fn acked(
    queued: Result<oneshot::Receiver<Result<(), AdapterError>>, AdapterError>,
) -> Result<(), AdapterError> {
    queued?.await.unwrap_or(Err(AdapterError::Closed))
}

impl BrTransport<RoleServer> {
    /// The answer to request `id` is not sent (the replayed `initialize` of a resumed
    /// session).
    pub(crate) fn swallow_answer(&mut self, id: RequestId) {
        self.swallow = Some(id);
    }
}

impl Transport<RoleServer> for BrTransport<RoleServer> {
    type Error = AdapterError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(id) = answered_id(&item) {
            self.session.request_ended(id);
            if self.swallow.as_ref() == Some(id) {
                // The answer to the replayed `initialize` of a resumed session: the
                // client has had its answer long ago.
                self.swallow = None;
                let (ack, done) = oneshot::channel();
                let _ = ack.send(Ok(()));
                return acked(Ok(done));
            }
        }
        if let JsonRpcMessage::Response(r) = &item
            && let ServerResult::InitializeResult(init) = &r.result
        {
            self.session.record_negotiated(&init.protocol_version);
        }
        let exp = self.outlet.exp();
        let queued = serde_json::to_vec(&item)
            .map_err(AdapterError::from)
            .and_then(|payload| self.enqueue(Arc::new(payload), None, exp));
        acked(queued)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleServer>>> + Send {
        self.inbox.recv()
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.close_session();
        Ok(())
    }
}

impl Transport<RoleClient> for BrTransport<RoleClient> {
    type Error = AdapterError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let queued = serde_json::to_vec(&item)
            .map_err(AdapterError::from)
            .and_then(|payload| {
                let payload = Arc::new(payload);
                self.session.track_client_message(&item);
                let (mid, exp) = match &item {
                    // A request keeps its message id and deadline for a replay (see
                    // `ClientState`).
                    JsonRpcMessage::Request(request) => {
                        let mid =
                            MessageId::random().map_err(|e| AdapterError::Entropy(Box::new(e)))?;
                        let lifetime = self.client.lifetime(&request.request);
                        let exp = self.outlet.exp_after(request_exp_lifetime(lifetime));
                        self.client.on_request(
                            request,
                            &payload,
                            mid,
                            exp,
                            Instant::now() + lifetime,
                        );
                        (Some(mid), exp)
                    }
                    _ => {
                        self.client.on_notification(&item, &payload);
                        (None, self.outlet.exp())
                    }
                };
                self.enqueue(payload, mid, exp)
            });
        acked(queued)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        enum Event {
            Message(Option<Box<ServerJsonRpcMessage>>),
            Deadline,
        }
        loop {
            if let Some(message) = self.client.ready.pop_front() {
                self.answered(&message);
                return Some(message);
            }
            // Both branches are cancellation-safe; state changes only after one completes.
            let event = match self.client.next_deadline() {
                Some(deadline) => tokio::select! {
                    m = self.inbox.recv() => Event::Message(m.map(Box::new)),
                    () = tokio::time::sleep_until(deadline) => Event::Deadline,
                },
                None => Event::Message(self.inbox.recv().await.map(Box::new)),
            };
            let sends = match event {
                Event::Deadline => {
                    let peer = self.session.peer;
                    let cancels = self.client.on_deadline(Instant::now(), &peer);
                    let exp = self.outlet.exp();
                    cancels
                        .into_iter()
                        .map(|payload| Queued::quiet(payload, None, exp))
                        .collect()
                }
                Event::Message(None) => return None,
                Event::Message(Some(message)) => {
                    let (deliver, resend) = self.client.on_receive(*message, Instant::now());
                    let sends = self.stamp(resend);
                    if let Some(message) = deliver {
                        self.enqueue_quiet(sends);
                        self.answered(&message);
                        return Some(message);
                    }
                    sends
                }
            };
            self.enqueue_quiet(sends);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.close_session();
        Ok(())
    }
}

impl BrTransport<RoleClient> {
    /// A request of ours got its answer (or its local failure): no longer in progress.
    fn answered(&self, message: &ServerJsonRpcMessage) {
        if let Some(id) = answered_id(message) {
            self.session.request_ended(id);
        }
    }

    /// Gives the recovery traffic its deadlines: a replay keeps its request's, the
    /// rest gets one now.
    fn stamp(&self, resend: Vec<Resend>) -> Vec<Queued> {
        resend
            .into_iter()
            .map(|r| match r {
                Resend::Replay { payload, mid, exp } => Queued::quiet(payload, Some(mid), exp),
                Resend::Initialize(payload) => Queued::quiet(
                    payload,
                    None,
                    self.outlet
                        .exp_after(request_exp_lifetime(self.client.init_lifetime())),
                ),
                Resend::Notification(payload) => Queued::quiet(payload, None, self.outlet.exp()),
            })
            .collect()
    }
}

/// One message for the writer, as [`BrTransport::enqueue`] takes it.
struct Queued {
    payload: Arc<Vec<u8>>,
    mid: Option<MessageId>,
    exp: UnixTime,
    ack: Option<oneshot::Sender<Result<(), AdapterError>>>,
}

impl Queued {
    fn quiet(payload: Arc<Vec<u8>>, mid: Option<MessageId>, exp: UnixTime) -> Self {
        Self {
            payload,
            mid,
            exp,
            ack: None,
        }
    }
}

/// The lifetime to stamp on a request the caller waits `lifetime` for: one second less
/// (at least 0). A receiver accepts a part during the whole second its `exp` names
/// (WIRE.md §4.5), so `exp = now + lifetime - 1` is refused by the time the caller gives
/// up; a lifetime under two seconds can only be honoured to the second.
fn request_exp_lifetime(lifetime: Duration) -> Duration {
    Duration::from_secs(lifetime.as_secs().saturating_sub(1))
}

/// The request a response or error answers; `None` for requests, notifications and
/// errors without an id.
fn answered_id<Req, Resp, Not>(message: &JsonRpcMessage<Req, Resp, Not>) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(r) => Some(&r.id),
        JsonRpcMessage::Error(e) => e.id.as_ref(),
        JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
    }
}

/// Recovery traffic to send.
enum Resend {
    /// A request again, under its first message id and deadline.
    Replay {
        payload: Arc<Vec<u8>>,
        mid: MessageId,
        exp: UnixTime,
    },
    /// The session's `initialize`, under a recovery id.
    Initialize(Arc<Vec<u8>>),
    /// `notifications/initialized`.
    Notification(Arc<Vec<u8>>),
}

/// A request sent on a dialed session and not answered yet.
struct Inflight {
    payload: Arc<Vec<u8>>,
    /// The message id it was sent under; a replay reuses it, so the server drops a late
    /// copy of the first send instead of running the request twice.
    mid: MessageId,
    /// Its deadline on the wire, fixed when it was sent.
    exp: UnixTime,
    /// When the caller gives up on it; a replay does not move it.
    deadline: Instant,
    /// Recoveries completed before it was sent: a refusal of a request sent before the
    /// last recovery needs no new one.
    epoch: u64,
    /// Held until the session is re-established.
    waiting: bool,
    /// Sent a second time; it is not replayed again.
    replayed: bool,
}

/// A re-establishment in progress: the repeated `initialize`.
struct Reinit {
    id: RequestId,
    deadline: Instant,
}

/// What a dialed session tracks to time requests out and to recover a lost session.
struct ClientState {
    timeout: Option<Duration>,
    ttl: Duration,
    inflight: HashMap<RequestId, Inflight>,
    /// The session's `initialize` request as sent, and its id.
    init: Option<(RequestId, Arc<Vec<u8>>)>,
    initialized: Option<Arc<Vec<u8>>>,
    reinit: Option<Reinit>,
    /// Recoveries completed so far.
    epoch: u64,
    /// Messages made up locally (timeouts, failed recoveries) for rmcp to receive.
    ready: VecDeque<ServerJsonRpcMessage>,
}

impl ClientState {
    fn new(timeout: Option<Duration>, ttl: Duration) -> Self {
        Self {
            timeout,
            ttl,
            inflight: HashMap::new(),
            init: None,
            initialized: None,
            reinit: None,
            epoch: 0,
            ready: VecDeque::new(),
        }
    }

    /// How long the caller waits for a request: the request timeout, bounded by the
    /// part TTL (a request cannot run once its parts have expired) and, for
    /// `initialize`, by [`INITIALIZE_TIMEOUT`].
    fn lifetime(&self, request: &ClientRequest) -> Duration {
        if matches!(request, ClientRequest::InitializeRequest(_)) {
            self.init_lifetime()
        } else {
            self.request_lifetime()
        }
    }

    fn request_lifetime(&self) -> Duration {
        self.timeout.map_or(self.ttl, |t| t.min(self.ttl))
    }

    fn init_lifetime(&self) -> Duration {
        self.request_lifetime().min(INITIALIZE_TIMEOUT)
    }

    fn on_request(
        &mut self,
        request: &rmcp::model::JsonRpcRequest<ClientRequest>,
        payload: &Arc<Vec<u8>>,
        mid: MessageId,
        exp: UnixTime,
        deadline: Instant,
    ) {
        if matches!(request.request, ClientRequest::InitializeRequest(_)) {
            self.init = Some((request.id.clone(), payload.clone()));
        }
        self.inflight.insert(
            request.id.clone(),
            Inflight {
                payload: payload.clone(),
                mid,
                exp,
                deadline,
                epoch: self.epoch,
                waiting: false,
                replayed: false,
            },
        );
    }

    fn on_notification(&mut self, item: &ClientJsonRpcMessage, payload: &Arc<Vec<u8>>) {
        let JsonRpcMessage::Notification(n) = item else {
            return;
        };
        match &n.notification {
            ClientNotification::InitializedNotification(_) => {
                self.initialized = Some(payload.clone());
            }
            // A cancelled request gets no answer; stop timing it.
            ClientNotification::CancelledNotification(c) => {
                if let Some(id) = &c.params.request_id {
                    self.inflight.remove(id);
                }
            }
            _ => {}
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let requests = self.inflight.values().map(|r| r.deadline);
        let reinit = self.reinit.as_ref().map(|r| r.deadline);
        requests.chain(reinit).min()
    }

    /// Times out what is due at `now`; returns cancellation notices to send.
    fn on_deadline(&mut self, now: Instant, peer: &PeerId) -> Vec<Arc<Vec<u8>>> {
        if self.reinit.as_ref().is_some_and(|r| r.deadline <= now) {
            let lifetime = self.init_lifetime();
            self.fail_recovery(&format!(
                "session lost at {peer}; no answer to initialize within {lifetime:?}"
            ));
        }
        let due: Vec<RequestId> = self
            .inflight
            .iter()
            .filter(|(_, r)| r.deadline <= now)
            .map(|(id, _)| id.clone())
            .collect();
        let mut cancels = Vec::new();
        for id in due {
            self.inflight.remove(&id);
            let is_init = self.init.as_ref().is_some_and(|(init, _)| *init == id);
            let waited = if is_init {
                self.init_lifetime()
            } else {
                self.request_lifetime()
            };
            let message = if is_init {
                format!("no answer to initialize from {peer} within {waited:?}")
            } else {
                format!("no answer from {peer} within {waited:?}")
            };
            self.ready.push_back(ServerJsonRpcMessage::error(
                ErrorData::new(REQUEST_TIMEOUT, message, None),
                Some(id.clone()),
            ));
            let cancel = ClientJsonRpcMessage::notification(
                ClientNotification::CancelledNotification(CancelledNotification::new(
                    CancelledNotificationParam::new(Some(id), Some("request timed out".into())),
                )),
            );
            if let Ok(payload) = serde_json::to_vec(&cancel) {
                cancels.push(Arc::new(payload));
            }
        }
        cancels
    }

    /// The recovery failed: every request waiting for it fails with a lost-session
    /// error, so a caller that retries on a fresh session (the bridge) does.
    fn fail_recovery(&mut self, why: &str) {
        self.reinit = None;
        let waiting: Vec<RequestId> = self
            .inflight
            .iter()
            .filter(|(_, r)| r.waiting)
            .map(|(id, _)| id.clone())
            .collect();
        for id in waiting {
            self.inflight.remove(&id);
            self.ready.push_back(ServerJsonRpcMessage::error(
                ErrorData::new(SESSION_NOT_FOUND, why.to_owned(), None),
                Some(id),
            ));
        }
    }

    /// Starts re-establishing the session: every request still outstanding waits for
    /// it. Returns the repeated `initialize`; `None` if there is nothing to repeat.
    fn start_recovery(&mut self, now: Instant) -> Option<Resend> {
        let (init_id, init) = self.init.as_ref()?;
        let mut message: serde_json::Value = serde_json::from_slice(init).ok()?;
        let id: RequestId =
            RequestId::String(format!("{REINIT_ID_PREFIX}{}", self.epoch + 1).into());
        *message.get_mut("id")? = serde_json::to_value(&id).ok()?;
        let payload = Arc::new(serde_json::to_vec(&message).ok()?);
        for (request_id, request) in &mut self.inflight {
            if request_id != init_id && !request.replayed {
                request.waiting = true;
            }
        }
        self.reinit = Some(Reinit {
            id,
            deadline: now + self.init_lifetime(),
        });
        Some(Resend::Initialize(payload))
    }

    /// Handles one message from the peer: what to hand to rmcp, and what to send.
    fn on_receive(
        &mut self,
        message: ServerJsonRpcMessage,
        now: Instant,
    ) -> (Option<ServerJsonRpcMessage>, Vec<Resend>) {
        let Some(id) = answered_id(&message).cloned() else {
            return (Some(message), Vec::new());
        };

        // The answer to a repeated initialize: the session is back (or is not).
        if let RequestId::String(s) = &id
            && s.starts_with(REINIT_ID_PREFIX)
        {
            if self.reinit.as_ref().is_none_or(|r| r.id != id) {
                // A late or duplicated answer to an earlier recovery.
                return (None, Vec::new());
            }
            let JsonRpcMessage::Response(_) = &message else {
                let why = match &message {
                    JsonRpcMessage::Error(e) => {
                        format!("session not re-established: {}", e.error.message)
                    }
                    _ => "session not re-established".to_owned(),
                };
                self.fail_recovery(&why);
                return (None, Vec::new());
            };
            self.reinit = None;
            self.epoch += 1;
            let mut resend: Vec<Resend> = self
                .initialized
                .iter()
                .cloned()
                .map(Resend::Notification)
                .collect();
            for request in self.inflight.values_mut().filter(|r| r.waiting) {
                request.waiting = false;
                request.replayed = true;
                resend.push(Resend::Replay {
                    payload: request.payload.clone(),
                    mid: request.mid,
                    exp: request.exp,
                });
            }
            tracing::debug!(epoch = self.epoch, "session re-established");
            return (None, resend);
        }

        let lost = matches!(&message, JsonRpcMessage::Error(e) if is_session_lost(&e.error));
        let is_init = self.init.as_ref().is_some_and(|(init, _)| *init == id);
        let Some(request) = self.inflight.get_mut(&id) else {
            // Not ours any more (answered, timed out, cancelled): rmcp drops it.
            return (Some(message), Vec::new());
        };
        if !lost || is_init {
            self.inflight.remove(&id);
            return (Some(message), Vec::new());
        }
        // A refusal of a request already replayed (a late copy of the first send's
        // refusal), or waiting for the recovery in progress: the replay's answer counts.
        if request.replayed || request.waiting {
            return (None, Vec::new());
        }
        if request.epoch < self.epoch {
            // Sent before the last recovery, refused late: the session is back already.
            request.replayed = true;
            let replay = Resend::Replay {
                payload: request.payload.clone(),
                mid: request.mid,
                exp: request.exp,
            };
            return (None, vec![replay]);
        }
        if self.reinit.is_some() {
            request.waiting = true;
            return (None, Vec::new());
        }
        tracing::debug!(%id, "session lost at the server; re-establishing");
        match self.start_recovery(now) {
            Some(init) => (None, vec![init]),
            None => {
                self.inflight.remove(&id);
                (Some(message), Vec::new())
            }
        }
    }
}
