//! [`BrTransport`]: one brmcp session as an [`rmcp::transport::Transport`], in either role.
//!
//! `send` serializes the message and queues it for the session's writer before it
//! returns its future, so PMs leave in the order rmcp called `send` (rmcp polls send
//! futures concurrently; a progress notification must not overtake its response).
//! `receive` is a channel receive and so cancellation-safe.
//!
//! On a dialed (client) session the transport also
//! - fails a request that gets no answer within the configured timeout with a JSON-RPC
//!   error [`REQUEST_TIMEOUT`] (and tells the peer it is cancelled), and
//! - recovers from a server that forgot the session (idle expiry): when a request is
//!   answered with [`SESSION_NOT_FOUND`], it replays the session's `initialize` and
//!   `notifications/initialized`, swallows the replayed handshake's answer, and sends
//!   the request again, once. rmcp sees only the request's real answer.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use brmcp_wire::{MessageId, SessionId};
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::service::{RoleClient, RoleServer, RxJsonRpcMessage, ServiceRole, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::AdapterError;
use crate::inbox::InboxRx;
use crate::peer::PeerId;
use crate::protocol::{REQUEST_TIMEOUT, SESSION_NOT_FOUND};
use crate::router::Ctl;
use crate::session::{Outbound, SessionShared};

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
    client: ClientState,
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
        request_timeout: Option<Duration>,
        max_outbound: usize,
    ) -> Self {
        Self {
            session,
            outbox,
            inbox,
            ctl,
            client: ClientState::new(request_timeout),
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

    /// Queues an already serialized message as `mid` (fresh when `None`); the receiver
    /// tells when its PMs are sent. A queue over its byte bound closes the session, as
    /// an inbox overflow does: a peer cannot make us buffer without limit.
    fn enqueue(
        &mut self,
        payload: Arc<Vec<u8>>,
        mid: Option<MessageId>,
    ) -> Result<oneshot::Receiver<Result<(), AdapterError>>, AdapterError> {
        let (ack, done) = oneshot::channel();
        self.enqueue_with(payload, mid, Some(ack))?;
        Ok(done)
    }

    /// Queues a message nobody waits for (recovery and cancellation traffic).
    fn enqueue_quiet(&mut self, payload: Arc<Vec<u8>>, mid: Option<MessageId>) {
        let _ = self.enqueue_with(payload, mid, None);
    }

    fn enqueue_with(
        &mut self,
        payload: Arc<Vec<u8>>,
        mid: Option<MessageId>,
        ack: Option<oneshot::Sender<Result<(), AdapterError>>>,
    ) -> Result<(), AdapterError> {
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
            .send(Outbound { payload, mid, ack })
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

impl Transport<RoleServer> for BrTransport<RoleServer> {
    type Error = AdapterError;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(id) = answered_id(&item) {
            self.session.request_ended(id);
        }
        let queued = serde_json::to_vec(&item)
            .map_err(AdapterError::from)
            .and_then(|payload| self.enqueue(Arc::new(payload), None));
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
                // A request keeps its message id for a replay (see `ClientState`).
                let mid = match &item {
                    JsonRpcMessage::Request(_) => {
                        Some(MessageId::random().map_err(|e| AdapterError::Entropy(Box::new(e)))?)
                    }
                    _ => None,
                };
                self.client.on_send(&item, &payload, mid);
                self.enqueue(payload, mid)
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
            match event {
                Event::Deadline => {
                    let peer = self.session.peer;
                    for payload in self.client.on_deadline(Instant::now(), &peer) {
                        self.enqueue_quiet(payload, None);
                    }
                }
                Event::Message(None) => return None,
                Event::Message(Some(message)) => {
                    let (deliver, resend) = self.client.on_receive(*message);
                    for (payload, mid) in resend {
                        self.enqueue_quiet(payload, mid);
                    }
                    if let Some(message) = deliver {
                        self.answered(&message);
                        return Some(message);
                    }
                }
            }
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

/// A message to send again, under the message id it first had (if any).
type Resend = (Arc<Vec<u8>>, Option<MessageId>);

/// A request sent on a dialed session and not answered yet.
struct Inflight {
    payload: Arc<Vec<u8>>,
    /// The message id it was sent under; a replay reuses it, so the server drops a late
    /// copy of the first send instead of running the request twice.
    mid: Option<MessageId>,
    /// `None` while it waits for the session to be re-established.
    deadline: Option<Instant>,
    replayed: bool,
}

/// A re-establishment in progress: the replayed `initialize` and who waits for it.
struct Reinit {
    deadline: Option<Instant>,
    /// Requests to send again once the session is back, with the error to deliver if
    /// it does not come back.
    waiting: Vec<(RequestId, ServerJsonRpcMessage)>,
}

/// What a dialed session tracks to time requests out and to recover a lost session.
struct ClientState {
    timeout: Option<Duration>,
    inflight: HashMap<RequestId, Inflight>,
    /// The session's `initialize` request as sent, and its id.
    init: Option<(RequestId, Arc<Vec<u8>>)>,
    initialized: Option<Arc<Vec<u8>>>,
    reinit: Option<Reinit>,
    /// Messages made up locally (timeouts, failed recoveries) for rmcp to receive.
    ready: VecDeque<ServerJsonRpcMessage>,
}

impl ClientState {
    fn new(timeout: Option<Duration>) -> Self {
        Self {
            timeout,
            inflight: HashMap::new(),
            init: None,
            initialized: None,
            reinit: None,
            ready: VecDeque::new(),
        }
    }

    fn deadline_from(&self, now: Instant) -> Option<Instant> {
        // A timeout too large to add is no timeout.
        self.timeout.and_then(|t| now.checked_add(t))
    }

    fn on_send(
        &mut self,
        item: &ClientJsonRpcMessage,
        payload: &Arc<Vec<u8>>,
        mid: Option<MessageId>,
    ) {
        match item {
            JsonRpcMessage::Request(request) => {
                if matches!(request.request, ClientRequest::InitializeRequest(_)) {
                    self.init = Some((request.id.clone(), payload.clone()));
                }
                let deadline = self.deadline_from(Instant::now());
                self.inflight.insert(
                    request.id.clone(),
                    Inflight {
                        payload: payload.clone(),
                        mid,
                        deadline,
                        replayed: false,
                    },
                );
            }
            JsonRpcMessage::Notification(n) => match &n.notification {
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
            },
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        let requests = self.inflight.values().filter_map(|r| r.deadline);
        let reinit = self.reinit.as_ref().and_then(|r| r.deadline);
        requests.chain(reinit).min()
    }

    /// Times out what is due at `now`; returns cancellation notices to send.
    fn on_deadline(&mut self, now: Instant, peer: &PeerId) -> Vec<Arc<Vec<u8>>> {
        let mut cancels = Vec::new();
        if self
            .reinit
            .as_ref()
            .is_some_and(|r| r.deadline.is_some_and(|d| d <= now))
            && let Some(reinit) = self.reinit.take()
        {
            for (id, error) in reinit.waiting {
                self.inflight.remove(&id);
                self.ready.push_back(error);
            }
        }
        let due: Vec<RequestId> = self
            .inflight
            .iter()
            .filter(|(_, r)| r.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| id.clone())
            .collect();
        let timeout = self.timeout.unwrap_or_default();
        for id in due {
            self.inflight.remove(&id);
            let message = format!("no answer from {peer} within {timeout:?}");
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

    /// Handles one message from the peer: what to hand to rmcp, and what to send.
    fn on_receive(
        &mut self,
        message: ServerJsonRpcMessage,
    ) -> (Option<ServerJsonRpcMessage>, Vec<Resend>) {
        let Some(id) = answered_id(&message).cloned() else {
            return (Some(message), Vec::new());
        };
        let init_id = self.init.as_ref().map(|(id, _)| id.clone());

        // The answer to a replayed initialize: the session is back (or is not).
        if self.reinit.is_some() && init_id.as_ref() == Some(&id) {
            let Some(reinit) = self.reinit.take() else {
                return (None, Vec::new());
            };
            let mut resend = Vec::new();
            if matches!(message, JsonRpcMessage::Response(_)) {
                resend.extend(self.initialized.clone().map(|n| (n, None)));
                let deadline = self.deadline_from(Instant::now());
                for (waiting, _) in reinit.waiting {
                    if let Some(request) = self.inflight.get_mut(&waiting) {
                        request.deadline = deadline;
                        request.replayed = true;
                        resend.push((request.payload.clone(), request.mid));
                    }
                }
            } else {
                for (waiting, error) in reinit.waiting {
                    self.inflight.remove(&waiting);
                    self.ready.push_back(error);
                }
            }
            return (None, resend);
        }

        // A duplicate of an answer we already hold for a replay.
        if self
            .reinit
            .as_ref()
            .is_some_and(|r| r.waiting.iter().any(|(waiting, _)| *waiting == id))
        {
            return (None, Vec::new());
        }
        let lost_session =
            matches!(&message, JsonRpcMessage::Error(e) if e.error.code == SESSION_NOT_FOUND);
        // A late refusal of a request already replayed (the first send was duplicated on
        // the way): the replay's answer is what counts.
        if lost_session && self.inflight.get(&id).is_some_and(|r| r.replayed) {
            return (None, Vec::new());
        }
        let replayable = self
            .inflight
            .get(&id)
            .is_some_and(|r| !r.replayed && Some(&id) != init_id.as_ref());
        if lost_session
            && replayable
            && let Some((_, init)) = &self.init
        {
            let mut resend = Vec::new();
            let deadline = self.deadline_from(Instant::now());
            let reinit = self.reinit.get_or_insert_with(|| {
                resend.push((init.clone(), None));
                Reinit {
                    deadline,
                    waiting: Vec::new(),
                }
            });
            reinit.waiting.push((id.clone(), message));
            if let Some(request) = self.inflight.get_mut(&id) {
                request.deadline = None;
            }
            tracing::debug!(%id, "session lost at the server; re-establishing");
            return (None, resend);
        }
        self.inflight.remove(&id);
        (Some(message), Vec::new())
    }
}
