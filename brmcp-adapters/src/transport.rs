//! [`BrTransport`]: one brmcp session as an [`rmcp::transport::Transport`], in either role.
//!
//! `send` serializes the message and queues it for the session's writer, with its
//! deadline, before it returns its future, so PMs leave in the order rmcp called `send`
//! (rmcp polls send futures concurrently; a progress notification must not overtake its
//! response), and a host that stalls delays a message but never extends its deadline.
//! `receive` is a channel receive and so cancellation-safe.
//!
//! On a dialed (client) session the transport also times requests out and recovers a
//! session the server lost (see `recovery`).
//!
//! An accepted (server) session can be a resumed one: the router replays the recorded
//! `initialize` into it, and the transport swallows the answer (see the router).

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use brmcp_wire::{MessageId, SessionId, UnixTime};
use rmcp::model::{
    ClientRequest, JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerNotification,
    ServerResult,
};
use rmcp::service::{RoleClient, RoleServer, RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::Ctl;
use crate::error::AdapterError;
use crate::inbox::InboxRx;
use crate::peer::PeerId;
use crate::recovery::{ClientState, Resend};
use crate::session::{Outbound, Outlet, SessionShared};

/// How long a dialed session's requests wait, and after what silence of the server
/// it is probed (see `recovery`); nothing for an accepted session.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Waits {
    pub(crate) request_timeout: Option<Duration>,
    pub(crate) silence_probe: Option<Duration>,
}

/// What a caller waiting on a dialed session can see of it, to tell why an answer
/// does not come: whether the peer said anything lately, and whether the host has
/// taken what was sent (see [`BrTransport::watch`]).
#[derive(Clone)]
pub struct SessionWatch(Arc<SessionShared>);

impl std::fmt::Debug for SessionWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionWatch")
            .field("peer", &self.0.peer)
            .field("sid", &self.0.sid)
            .finish_non_exhaustive()
    }
}

impl SessionWatch {
    /// Whether any message came from the peer on the session at or after `at`
    /// (answers, notifications, and answers to the silence probe's pings).
    pub fn heard_since(&self, at: Instant) -> bool {
        self.0.heard_since(at)
    }

    /// Whether messages are still waiting for the host to take them (a host that lost
    /// its own connection holds them).
    pub fn unsent(&self) -> bool {
        self.0.has_outbound()
    }

    /// The host's error for the last send that failed, until one succeeds.
    pub fn send_error(&self) -> Option<String> {
        self.0.send_error()
    }
}

/// One brmcp session (peer, sid) as an rmcp transport.
///
/// Made by [`Router::dial`](crate::Router::dial) (`RoleClient`) or handed out by
/// [`Router::accept`](crate::Router::accept) (`RoleServer`). Dropping it closes the
/// session; messages already queued are still sent.
pub struct BrTransport<R: ServiceRole> {
    session: Arc<SessionShared>,
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
        inbox: InboxRx<RxJsonRpcMessage<R>>,
        ctl: mpsc::UnboundedSender<Ctl>,
        outlet: Arc<Outlet>,
        waits: Waits,
        max_outbound: usize,
    ) -> Self {
        Self {
            session,
            inbox,
            ctl,
            client: ClientState::new(waits.request_timeout, waits.silence_probe, outlet.ttl),
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

    /// A view of the session for a caller waiting on it.
    pub fn watch(&self) -> SessionWatch {
        SessionWatch(self.session.clone())
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
        if self.session.is_closed() {
            // Closed, or the state a park retired (a `Peer` cloned out of a lease can
            // outlive its service by a message): nothing more leaves under it.
            return Err(AdapterError::Closed);
        }
        if !self
            .session
            .reserve_outbound(payload.len(), self.max_outbound)
        {
            tracing::debug!(peer = %self.session.peer, sid = %self.session.sid, "outbound queue full; closing the session");
            self.close_session();
            return Err(AdapterError::OutboundFull(self.max_outbound));
        }
        self.session.push_outbound(
            &self.outlet,
            Outbound {
                payload,
                mid,
                exp,
                ack,
            },
        );
        Ok(())
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
        if let JsonRpcMessage::Response(r) = &item
            && let ServerResult::InitializeResult(init) = &r.result
        {
            self.session.record_negotiated(&init.protocol_version);
        }
        if let Some(id) = answered_id(&item)
            && self.swallow.as_ref() == Some(id)
        {
            // The answer to the replayed `initialize` of a resumed session: the
            // client has had its answer long ago.
            self.session.request_ended(id);
            self.swallow = None;
            let (ack, done) = oneshot::channel();
            let _ = ack.send(Ok(()));
            return acked(Ok(done));
        }
        let exp = self.outlet.exp();
        let queued = serde_json::to_vec(&item)
            .map_err(AdapterError::from)
            .and_then(|payload| self.enqueue(Arc::new(payload), None, exp));
        // The request ends once its answer is queued: until then the session is busy,
        // so it is never taken to be at rest (and parked) with its answer unsent.
        if let Some(id) = answered_id(&item) {
            self.session.request_ended(id);
            self.session.tell_rest(&self.outlet);
        }
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
                // A request is in progress before it is queued; an answer or a
                // cancellation ends one once it is queued (below), so the session is
                // never taken to be at rest with it unsent.
                let request = matches!(item, JsonRpcMessage::Request(_));
                if request {
                    self.session.track_client_message(&item);
                }
                let (mid, exp) = match &item {
                    // A request keeps its message id and deadline for a replay (see
                    // `ClientState`).
                    JsonRpcMessage::Request(request) => {
                        if matches!(request.request, ClientRequest::InitializeRequest(_)) {
                            self.session.record_sent_initialize(&payload);
                        }
                        let mid =
                            MessageId::random().map_err(|e| AdapterError::Entropy(Box::new(e)))?;
                        let exp = self
                            .outlet
                            .exp_after(self.client.exp_lifetime(&request.request));
                        self.client
                            .on_request(request, &payload, mid, exp, Instant::now());
                        (Some(mid), exp)
                    }
                    _ => {
                        self.client.on_notification(&item, &payload);
                        (None, self.outlet.exp())
                    }
                };
                let queued = self.enqueue(payload, mid, exp);
                if !request {
                    self.session.track_client_message(&item);
                    if let Some(id) = answered_id(&item) {
                        self.session.serving_ended(id);
                    }
                    self.report_rest();
                }
                queued
            });
        acked(queued)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        enum Event {
            Message(Option<Box<ServerJsonRpcMessage>>),
            Deadline,
        }
        loop {
            if let Some(message) = self.client.pop_ready() {
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
                    let due = self.client.on_deadline(Instant::now(), &peer);
                    self.stamp(due)
                }
                Event::Message(None) => return None,
                Event::Message(Some(message)) => {
                    self.session.heard();
                    let (deliver, resend) = self.client.on_receive(*message, Instant::now());
                    let sends = self.stamp(resend);
                    if let Some(message) = deliver {
                        self.enqueue_quiet(sends);
                        self.answered(&message);
                        match &message {
                            JsonRpcMessage::Request(r) => {
                                self.session.serving_started(r.id.clone());
                            }
                            JsonRpcMessage::Notification(n) => {
                                if let ServerNotification::CancelledNotification(c) =
                                    &n.notification
                                    && let Some(id) = &c.params.request_id
                                {
                                    self.session.cancelled_by_server(id);
                                    self.report_rest();
                                }
                            }
                            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
                        }
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
    /// The session's state, for the router's parking of it.
    pub(crate) fn shared(&self) -> &Arc<SessionShared> {
        &self.session
    }

    /// A later service of a session an earlier one initialized: recovery repeats that
    /// `initialize` should the server lose the session.
    pub(crate) fn seed_handshake(&mut self) {
        if let Some(init) = self.session.sent_initialize() {
            self.client.seed_handshake(init);
        }
    }

    /// A request of ours got its answer (or its local failure): no longer in progress.
    fn answered(&self, message: &ServerJsonRpcMessage) {
        if let Some(id) = answered_id(message) {
            self.session.request_ended(id);
            self.report_rest();
        }
    }

    /// With no request of either side in progress, the session came to rest: told to
    /// the router once until it looked (it parks a [`Client`](crate::Client)'s session
    /// a park delay later, see `router::at_rest`).
    fn report_rest(&self) {
        if !self.session.is_busy() && self.session.claim_rest_report() {
            let _ = self.ctl.send(Ctl::AtRest {
                peer: self.session.peer,
                sid: self.session.sid,
                id: self.session.id,
            });
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
                    self.outlet.exp_after(self.client.init_exp_lifetime()),
                ),
                Resend::Notification(payload) | Resend::Cancel(payload) => {
                    Queued::quiet(payload, None, self.outlet.exp())
                }
                Resend::Ping(payload) => Queued::quiet(
                    payload,
                    None,
                    self.outlet.exp_after(self.client.ping_exp_lifetime()),
                ),
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

/// The request a response or error answers; `None` for requests, notifications and
/// errors without an id.
pub(crate) fn answered_id<Req, Resp, Not>(
    message: &JsonRpcMessage<Req, Resp, Not>,
) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(r) => Some(&r.id),
        JsonRpcMessage::Error(e) => e.id.as_ref(),
        JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
    }
}
