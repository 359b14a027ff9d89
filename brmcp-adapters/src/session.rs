//! One session's outbound side: a writer task, running while messages are queued, that
//! chunks each message and sends its PMs in order, under the deadline fixed when the message was queued; and the state a
//! session shares with the router.
//!
//! A message's deadline (`exp`) is chosen by whoever queues it, at that moment (WIRE.md
//! §8): a host that stalls delays the PMs, never their deadline, and a message whose
//! deadline passed while it waited is not sent at all.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use brmcp_wire::{Chunks, MessageId, SessionId, UnixTime, encode_part};
use rmcp::model::{ClientJsonRpcMessage, ClientNotification, JsonRpcMessage, RequestId};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::Ctl;
use crate::clock::Clock;
use crate::error::AdapterError;
use crate::host::DynSender;
use crate::peer::PeerId;
use crate::stats::Counters;

/// What every session's writer needs from its router.
pub(crate) struct Outlet {
    pub(crate) sender: Arc<dyn DynSender>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) chunk_len: usize,
    pub(crate) ttl: Duration,
    /// Told when a session's writer drained its queue with no request in progress, if
    /// sessions a peer opened are parked; weak, so it never keeps the router running.
    pub(crate) at_rest: Option<mpsc::WeakUnboundedSender<Ctl>>,
}

impl Outlet {
    /// The deadline of a message queued now that lives `lifetime`: `now + lifetime`, in
    /// whole seconds, at least 1 (0 would mean "no deadline").
    pub(crate) fn exp_after(&self, lifetime: Duration) -> UnixTime {
        UnixTime(self.clock.now().saturating_add(lifetime.as_secs()).0.max(1))
    }

    /// The deadline of an ordinary message queued now: `now + TTL`.
    pub(crate) fn exp(&self) -> UnixTime {
        self.exp_after(self.ttl)
    }

    /// Whether a message with deadline `exp` can no longer be accepted by its receiver
    /// (WIRE.md §4.5), so sending it would be wasted, or worse, late.
    pub(crate) fn is_past(&self, exp: UnixTime) -> bool {
        exp.0 > 0 && self.clock.now().0 > exp.0
    }

    /// Sends one serialized message to `peer` in session `sid` as message `mid` (a fresh
    /// one when `None`) with deadline `exp`: one `String` per PM, the parts in order,
    /// stopping at the first failed send. Nothing is sent once `exp` has passed.
    pub(crate) async fn send_message(
        &self,
        peer: &PeerId,
        sid: SessionId,
        mid: Option<MessageId>,
        exp: UnixTime,
        payload: &[u8],
    ) -> Result<(), AdapterError> {
        if self.is_past(exp) {
            return Err(AdapterError::Expired);
        }
        let mid = match mid {
            Some(mid) => mid,
            None => MessageId::random().map_err(|e| AdapterError::Entropy(Box::new(e)))?,
        };
        let exp = exp.0;
        let chunks = Chunks::new(sid, mid, exp, payload, self.chunk_len)?;
        for (header, chunk) in chunks {
            let mut pm = vec![0u8; header.encoded_len(chunk.len())];
            let n = encode_part(&header, chunk, &mut pm)?;
            pm.truncate(n);
            // The encoder writes ASCII only.
            let body = String::from_utf8(pm).map_err(|e| AdapterError::Send {
                peer: *peer,
                source: Box::new(e),
            })?;
            if let Err(source) = self.sender.send_pm_dyn(peer, body).await {
                Counters::bump(&self.counters.send_errors);
                return Err(AdapterError::Send {
                    peer: *peer,
                    source,
                });
            }
            Counters::bump(&self.counters.pms_sent);
        }
        Ok(())
    }
}

/// State a session shares between its transport, its writer and the router task.
#[derive(Debug)]
pub(crate) struct SessionShared {
    pub(crate) peer: PeerId,
    pub(crate) sid: SessionId,
    /// Unique per router, so a stale close never removes a newer session on the same key.
    pub(crate) id: u64,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last inbound or outbound message.
    last_active: AtomicU64,
    /// Milliseconds since `epoch` of the last message from the peer; `u64::MAX`: none.
    last_heard: AtomicU64,
    /// The host's error for the last send that failed, until one succeeds.
    send_error: Mutex<Option<String>>,
    closed: AtomicBool,
    /// The writer reported the session at rest and the router has not looked at it
    /// since (see `router::at_rest`).
    rest_reported: AtomicBool,
    /// Requests not answered yet: the peer's (server role) or ours (client role), and
    /// on a dialed session the server's to us too, tagged `true` (their ids are the
    /// server's, so they are kept apart from ours; one set, so an idle session pays
    /// for one). A session with a call in progress, or serving one (an elicitation
    /// waiting for its user), is not idle.
    unanswered: Mutex<HashSet<(bool, RequestId)>>,
    /// Bytes of serialized messages queued for the writer and not yet sent.
    queued: AtomicUsize,
    /// On a session a peer opened: what it takes to resume it after it is forgotten. On a
    /// dialed one: our `initialize` as sent, for recovering the session in a later
    /// service of it (see `client`).
    resume: Mutex<Resume>,
    /// Messages queued for sending.
    outbox: Mutex<OutQueue>,
}

/// The `initialize` of a session a peer opened, as received, and the protocol version
/// the server answered it with: enough to re-create the session already initialized.
#[derive(Debug, Clone, Default)]
pub(crate) struct Resume {
    pub(crate) initialize: Option<Arc<Vec<u8>>>,
    pub(crate) negotiated: Option<serde_json::Value>,
}

/// Bytes of an `initialize` kept for resuming its session: 4 KiB. A client's info and
/// capabilities take a few hundred bytes; a larger handshake is not kept (its session
/// is not resumable), so the records of expired sessions stay small.
pub(crate) const MAX_RESUME_RECORD_BYTES: usize = 4 << 10;

impl SessionShared {
    pub(crate) fn new(peer: PeerId, sid: SessionId, id: u64, epoch: Instant) -> Self {
        let this = Self {
            peer,
            sid,
            id,
            epoch,
            last_active: AtomicU64::new(0),
            last_heard: AtomicU64::new(u64::MAX),
            send_error: Mutex::new(None),
            closed: AtomicBool::new(false),
            rest_reported: AtomicBool::new(false),
            unanswered: Mutex::new(HashSet::new()),
            queued: AtomicUsize::new(0),
            resume: Mutex::new(Resume::default()),
            outbox: Mutex::new(OutQueue::default()),
        };
        this.touch();
        this
    }

    /// A session's state for it to live on parked under the router-unique `id`: the same
    /// key, activity and resume record, nothing in progress. The old state stays with
    /// the transport being dropped, whose close is then stale.
    pub(crate) fn parked(&self, id: u64) -> Self {
        Self {
            peer: self.peer,
            sid: self.sid,
            id,
            epoch: self.epoch,
            last_active: AtomicU64::new(self.last_active.load(Ordering::Relaxed)),
            last_heard: AtomicU64::new(self.last_heard.load(Ordering::Relaxed)),
            send_error: Mutex::new(None),
            closed: AtomicBool::new(false),
            rest_reported: AtomicBool::new(false),
            unanswered: Mutex::new(HashSet::new()),
            queued: AtomicUsize::new(0),
            resume: Mutex::new(crate::lock(&self.resume).clone()),
            outbox: Mutex::new(OutQueue::default()),
        }
    }

    pub(crate) fn touch(&self) {
        self.last_active.store(self.ms_now(), Ordering::Relaxed);
    }

    fn ms_now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1)
    }

    /// A message from the peer arrived.
    pub(crate) fn heard(&self) {
        self.last_heard.store(self.ms_now(), Ordering::Relaxed);
    }

    /// Whether the peer was heard from at or after `at`.
    pub(crate) fn heard_since(&self, at: Instant) -> bool {
        let heard = self.last_heard.load(Ordering::Relaxed);
        heard != u64::MAX && self.epoch + Duration::from_millis(heard) >= at
    }

    /// The host's error for the last send that failed, until one succeeds.
    pub(crate) fn send_error(&self) -> Option<String> {
        crate::lock(&self.send_error).clone()
    }

    fn sent(&self, result: &Result<(), AdapterError>) {
        *crate::lock(&self.send_error) = result.as_ref().err().map(ToString::to_string);
    }

    pub(crate) fn last_active(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_active.load(Ordering::Relaxed))
    }

    fn unanswered(&self) -> MutexGuard<'_, HashSet<(bool, RequestId)>> {
        crate::lock(&self.unanswered)
    }

    /// A request is in progress (the peer's, or one we sent).
    pub(crate) fn request_started(&self, id: RequestId) {
        self.unanswered().insert((false, id));
    }

    /// A request was answered, failed or cancelled.
    pub(crate) fn request_ended(&self, id: &RequestId) {
        self.unanswered().remove(&(false, id.clone()));
    }

    /// On a dialed session: the server's request `id` reached our service.
    pub(crate) fn serving_started(&self, id: RequestId) {
        self.unanswered().insert((true, id));
    }

    /// On a dialed session: our service answered the server's request `id`.
    pub(crate) fn serving_ended(&self, id: &RequestId) {
        self.unanswered().remove(&(true, id.clone()));
    }

    /// On a dialed session: the server cancelled request `id`, which nobody answers
    /// (rmcp drops a cancelled handler's answer). On the legacy lifecycle it is the
    /// server's own request; on 2026-07-28, which sends us no requests, our listen. The
    /// server's is taken first, so ours with the same number stays in progress.
    pub(crate) fn cancelled_by_server(&self, id: &RequestId) {
        let mut unanswered = self.unanswered();
        if !unanswered.remove(&(true, id.clone())) {
            unanswered.remove(&(false, id.clone()));
        }
    }

    /// Tracks a client message crossing the session, in either role: a request starts,
    /// a cancellation ends the request it names (the server sends no answer to it).
    pub(crate) fn track_client_message(&self, message: &ClientJsonRpcMessage) {
        match message {
            JsonRpcMessage::Request(r) => self.request_started(r.id.clone()),
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &n.notification
                    && let Some(id) = &c.params.request_id
                {
                    self.request_ended(id);
                }
            }
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
        }
    }

    /// Keeps a peer's `initialize` (as received) for resuming the session, if it is
    /// small enough.
    pub(crate) fn record_initialize(&self, payload: &[u8]) {
        let mut resume = crate::lock(&self.resume);
        resume.initialize =
            (payload.len() <= MAX_RESUME_RECORD_BYTES).then(|| Arc::new(payload.to_vec()));
        resume.negotiated = None;
    }

    /// On a dialed session: keeps our `initialize` as sent, so a later service of the
    /// session can still recover it (see `recovery`), if it is small enough.
    pub(crate) fn record_sent_initialize(&self, payload: &Arc<Vec<u8>>) {
        crate::lock(&self.resume).initialize =
            (payload.len() <= MAX_RESUME_RECORD_BYTES).then(|| payload.clone());
    }

    /// On a dialed session: our `initialize` as sent, if kept.
    pub(crate) fn sent_initialize(&self) -> Option<Arc<Vec<u8>>> {
        crate::lock(&self.resume).initialize.clone()
    }

    /// Keeps the protocol version the server answered `initialize` with.
    pub(crate) fn record_negotiated(&self, version: &rmcp::model::ProtocolVersion) {
        if let Ok(version) = serde_json::to_value(version) {
            crate::lock(&self.resume).negotiated = Some(version);
        }
    }

    /// What it takes to resume the session: `None` unless it was initialized.
    pub(crate) fn resume_record(&self) -> Option<Resume> {
        let resume = crate::lock(&self.resume);
        (resume.initialize.is_some() && resume.negotiated.is_some()).then(|| resume.clone())
    }

    /// Whether a request is still in progress on the session.
    pub(crate) fn is_busy(&self) -> bool {
        !self.unanswered().is_empty()
    }

    /// Whether bytes are still queued for (or being sent by) the writer.
    pub(crate) fn has_outbound(&self) -> bool {
        self.queued.load(Ordering::Acquire) > 0
    }

    /// Returns `len` bytes reserved for a message that was not queued after all.
    pub(crate) fn release_outbound(&self, len: usize) {
        self.queued.fetch_sub(len, Ordering::AcqRel);
    }

    /// Reserves `len` bytes of the outbound queue; `false` (nothing reserved) when that
    /// would exceed `max`.
    pub(crate) fn reserve_outbound(&self, len: usize, max: usize) -> bool {
        let before = self.queued.fetch_add(len, Ordering::AcqRel);
        if before.saturating_add(len) > max {
            self.queued.fetch_sub(len, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Whether the session is closed (or, on a parked session, this state retired).
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether the writer is to report the session at rest now: `true` once until
    /// [`rest_unreported`](Self::rest_unreported).
    pub(crate) fn claim_rest_report(&self) -> bool {
        !self.rest_reported.swap(true, Ordering::AcqRel)
    }

    /// Whether a rest was reported and the router has not looked at it yet (a hint:
    /// [`claim_rest_report`](Self::claim_rest_report) decides).
    pub(crate) fn rest_report_outstanding(&self) -> bool {
        self.rest_reported.load(Ordering::Relaxed)
    }

    /// Tells the router the session came to rest, if it parks sessions at rest and
    /// the session did: no request of either side in progress, nothing queued or
    /// being sent; once until the router looked. A report still outstanding skips the
    /// upgrade and the busy lock; the claim stays after the checks, so a busy session
    /// never holds the flag with nothing reported. Both the writer (its queue drained)
    /// and the end of a request (answered after it was queued) call it, so whichever
    /// comes last reports.
    pub(crate) fn tell_rest(&self, outlet: &Outlet) {
        if let Some(weak) = outlet.at_rest.as_ref()
            && !self.rest_report_outstanding()
            && let Some(at_rest) = weak.upgrade()
            && !self.has_outbound()
            && !self.is_busy()
            && self.claim_rest_report()
        {
            let _ = at_rest.send(Ctl::AtRest {
                peer: self.peer,
                sid: self.sid,
                id: self.id,
            });
        }
    }

    /// The router looked at the session's rest: the writer reports the next one.
    pub(crate) fn rest_unreported(&self) {
        self.rest_reported.store(false, Ordering::Release);
    }

    /// Marks the session closed; `true` the first time.
    pub(crate) fn mark_closed(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }
}

/// One message queued for the writer.
pub(crate) struct Outbound {
    pub(crate) payload: Arc<Vec<u8>>,
    /// The message id to send it under; a fresh one when `None`. A replayed request
    /// keeps its first id, so the peer drops whichever copy arrives second.
    pub(crate) mid: Option<MessageId>,
    /// Its deadline, fixed when it was queued (a replayed request keeps its first one).
    pub(crate) exp: UnixTime,
    /// Told the outcome once every part is sent (or the first send failed).
    pub(crate) ack: Option<oneshot::Sender<Result<(), AdapterError>>>,
}

/// A session's outbound messages, and whether a writer is draining them. The writer
/// runs only while there are messages: an idle session holds no task and no channel
/// (which would keep a block of 32 slots allocated), just this empty queue.
#[derive(Default)]
pub(crate) struct OutQueue {
    messages: VecDeque<Outbound>,
    writing: bool,
}

impl std::fmt::Debug for OutQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutQueue")
            .field("messages", &self.messages.len())
            .field("writing", &self.writing)
            .finish()
    }
}

impl SessionShared {
    /// Queues `message` for the session's writer, starting one if none runs: messages
    /// are sent one after another, in the order queued, each under its own deadline.
    pub(crate) fn push_outbound(self: &Arc<Self>, outlet: &Arc<Outlet>, message: Outbound) {
        let mut queue = crate::lock(&self.outbox);
        queue.messages.push_back(message);
        if !queue.writing {
            queue.writing = true;
            tokio::spawn(write(outlet.clone(), self.clone()));
        }
    }

    /// The next message for the writer; `None` (and the writer marked gone, the queue's
    /// storage freed) when the queue is empty.
    fn pop_outbound(&self) -> Option<Outbound> {
        let mut queue = crate::lock(&self.outbox);
        let next = queue.messages.pop_front();
        if next.is_none() {
            *queue = OutQueue::default();
        }
        next
    }
}

/// The writer of one session: sends its queued messages until the queue is empty.
async fn write(outlet: Arc<Outlet>, session: Arc<SessionShared>) {
    while let Some(Outbound {
        payload,
        mid,
        exp,
        ack,
    }) = session.pop_outbound()
    {
        session.touch();
        let result = outlet
            .send_message(&session.peer, session.sid, mid, exp, &payload)
            .await;
        session.release_outbound(payload.len());
        session.sent(&result);
        if let Err(e) = &result {
            tracing::debug!(peer = %session.peer, sid = %session.sid, error = %e, "send failed");
        }
        if let Some(ack) = ack {
            let _ = ack.send(result);
        }
    }
    // At rest: the router may park the session until its next message.
    session.tell_rest(&outlet);
}
