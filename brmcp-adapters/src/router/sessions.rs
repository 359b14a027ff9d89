//! The driver's session side: a completed message to its session's inbox, or a new
//! session opened, resumed or refused (the cap, session-not-found).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use brmcp_wire::{MessageId, SessionId};
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorCode, ErrorData, GetMeta,
    JsonRpcMessage, RequestId, ServerJsonRpcMessage, ServerNotification,
};

use tokio::time::Instant;

use super::{CloseReason, Driver, Entry, Inbox, RECENT_MIDS};
use crate::inbox::{InboxTx, Refused, inbox};
use crate::peer::PeerId;
use crate::protocol::{SESSION_NOT_FOUND, TOO_MANY_SESSIONS};
use crate::resume::{replay, resumed_init_id};
use crate::session::{Resume, SessionShared};
use crate::stats::Counters;
use crate::transport::{BrTransport, Waits};

impl Driver {
    pub(super) fn at_cap(&self, peer: &PeerId) -> bool {
        self.inbound_per_peer.get(peer).map_or(0, Vec::len) >= self.config.max_sessions_per_peer
    }

    /// The session `peer` opened that a new one of its may displace: its least recently
    /// active idle one (no request in progress); `None` when every one is busy.
    pub(super) fn displaceable(&self, peer: &PeerId) -> Option<(PeerId, SessionId)> {
        self.inbound_per_peer
            .get(peer)?
            .iter()
            .filter_map(|sid| Some((*sid, self.sessions.get(&(*peer, *sid))?)))
            .filter(|(_, entry)| !entry.shared.is_busy())
            // The router-unique id breaks ties in opening order.
            .min_by_key(|(_, entry)| (entry.shared.last_active(), entry.shared.id))
            .map(|(sid, _)| (*peer, sid))
    }

    /// Makes room for a new session of `peer`: nothing to do below its cap; at it, closes
    /// its least recently active idle session. `false` when every one is busy.
    fn make_room(&mut self, peer: &PeerId) -> bool {
        if !self.at_cap(peer) {
            return true;
        }
        let Some(key) = self.displaceable(peer) else {
            return false;
        };
        self.close(key, CloseReason::Displaced);
        true
    }

    pub(super) fn on_message(
        &mut self,
        peer: PeerId,
        sid: SessionId,
        mid: MessageId,
        payload: &[u8],
    ) {
        let key = (peer, sid);
        let Some(entry) = self.sessions.get_mut(&key) else {
            self.open(peer, sid, mid, payload);
            return;
        };
        if entry.recent.len() == RECENT_MIDS {
            entry.recent.pop_front();
        }
        entry.recent.push_back(mid);
        if matches!(entry.inbox, Inbox::Parked) {
            match serde_json::from_slice::<ClientJsonRpcMessage>(payload) {
                // A revived service gets the handshake replayed, `initialized` with it,
                // and has no request a cancellation or progress report could be about.
                Ok(message) if needs_no_service(&message) => {
                    Counters::bump(&self.counters.messages_delivered);
                }
                Ok(message) => self.revive(key, message, payload),
                Err(e) => {
                    Counters::bump(&self.counters.dropped_json);
                    tracing::debug!(%peer, %sid, error = %e, "not a JSON-RPC message");
                }
            }
            return;
        }
        if matches!(entry.inbox, Inbox::ClientParked) {
            match serde_json::from_slice::<ServerJsonRpcMessage>(payload) {
                // No request of ours waits on a parked session, and it serves none of
                // the server's: an answer, a progress report or a cancellation is late
                // (or forged) and not worth a service.
                Ok(message) if concerns_no_parked(&message) => {
                    Counters::bump(&self.counters.dropped_parked_answer);
                    tracing::debug!(%peer, %sid, "a message on a parked session dropped");
                }
                Ok(message) => {
                    if self.revive_client(key, Some((message, payload.len()))) {
                        Counters::bump(&self.counters.messages_delivered);
                    }
                }
                Err(e) => {
                    // Junk leaves the session parked.
                    Counters::bump(&self.counters.dropped_json);
                    tracing::debug!(%peer, %sid, error = %e, "not a JSON-RPC message");
                }
            }
            return;
        }
        let result = match &entry.inbox {
            Inbox::Server(tx) => match serde_json::from_slice::<ClientJsonRpcMessage>(payload) {
                Ok(message) => {
                    entry.shared.track_client_message(&message);
                    if is_initialize(&message) {
                        entry.shared.record_initialize(payload);
                    }
                    deliver(tx, message, payload.len())
                }
                Err(e) => Delivery::Invalid(e),
            },
            Inbox::Client(tx) => match serde_json::from_slice::<ServerJsonRpcMessage>(payload) {
                Ok(message) => deliver(tx, message, payload.len()),
                Err(e) => Delivery::Invalid(e),
            },
            Inbox::Parked | Inbox::ClientParked => return,
        };
        match result {
            Delivery::Queued => {
                entry.shared.touch();
                Counters::bump(&self.counters.messages_delivered);
            }
            Delivery::Invalid(e) => {
                Counters::bump(&self.counters.dropped_json);
                tracing::debug!(%peer, %sid, error = %e, "not a JSON-RPC message");
            }
            Delivery::Full => {
                tracing::debug!(%peer, %sid, "inbox overflow");
                self.close(key, CloseReason::Overflow);
            }
            Delivery::Gone => self.close(key, CloseReason::Transport),
        }
    }

    /// A message for a session we do not have: open a server session if it may.
    fn open(&mut self, peer: PeerId, sid: SessionId, mid: MessageId, payload: &[u8]) {
        let message = match serde_json::from_slice::<ClientJsonRpcMessage>(payload) {
            Ok(message) => message,
            Err(e) => {
                Counters::bump(&self.counters.dropped_json);
                tracing::debug!(%peer, %sid, error = %e, "not a JSON-RPC message");
                return;
            }
        };
        let JsonRpcMessage::Request(request) = &message else {
            // A late notification or answer for a session that is gone.
            Counters::bump(&self.counters.dropped_unknown_session);
            return;
        };
        let request_id = request.id.clone();
        let key = (peer, sid);
        // A session we expired comes back already initialized; a request that cannot
        // open a session anywhere else is told the session is gone, so the client can
        // re-establish it instead of talking to an uninitialized one.
        let opens = opens_session(&request.request);
        let resumed = if opens {
            self.resumable.remove(&key);
            None
        } else {
            let Some(record) = self.resumable.take(&key, Instant::now()) else {
                Counters::bump(&self.counters.dropped_unknown_session);
                self.reply_error(
                    peer,
                    sid,
                    request_id,
                    SESSION_NOT_FOUND,
                    "session not found",
                );
                return;
            };
            Some(record)
        };
        // Room is made before the session is set up: should that still fail (a full
        // accept backlog), the displaced session is resumable all the same.
        if !self.make_room(&peer) {
            Counters::bump(&self.counters.dropped_session_cap);
            if let Some((record, at)) = resumed {
                self.resumable.insert(key, record, at);
            }
            self.reply_error(
                peer,
                sid,
                request_id,
                TOO_MANY_SESSIONS,
                "too many sessions",
            );
            return;
        }
        let id = self.next_id.fetch_add(1, Relaxed);
        let shared = Arc::new(SessionShared::new(peer, sid, id, self.epoch));
        let record = resumed.as_ref().map(|(record, _)| record);
        let inbox_tx = match self.start(&shared, message, payload, record) {
            Ok(inbox_tx) => inbox_tx,
            Err(Unstarted::Stopping) => return,
            Err(Unstarted::Lost) => {
                self.reply_error(
                    peer,
                    sid,
                    request_id,
                    SESSION_NOT_FOUND,
                    "session not found",
                );
                return;
            }
            Err(Unstarted::Busy) => {
                if let Some((record, at)) = resumed {
                    self.resumable.insert(key, record, at);
                }
                self.reply_error(peer, sid, request_id, TOO_MANY_SESSIONS, "server busy");
                return;
            }
        };
        let idle = self.config.server_idle_timeout;
        let mut recent = VecDeque::new();
        recent.push_back(mid);
        self.sessions.insert(
            (peer, sid),
            Entry {
                inbox: Inbox::Server(inbox_tx),
                shared,
                inbound: true,
                idle,
                recent,
                slot: None,
            },
        );
        self.inbound_per_peer.entry(peer).or_default().push(sid);
        Counters::bump(&self.counters.sessions_accepted);
        Counters::bump(&self.counters.messages_delivered);
        self.counters.sessions_open.fetch_add(1, Relaxed);
        self.schedule_idle(idle);
        self.schedule_idle(self.config.park_scan_after());
    }

    /// Starts the service of a server session on `shared`: its inbox gets the recorded
    /// handshake first when `record` is given (a resumed or revived session), then
    /// `message`; the transport goes to the acceptor. Returns the inbox's sending end.
    fn start(
        &mut self,
        shared: &Arc<SessionShared>,
        message: ClientJsonRpcMessage,
        payload: &[u8],
        record: Option<&Resume>,
    ) -> Result<InboxTx<ClientJsonRpcMessage>, Unstarted> {
        let ctl = self.ctl_weak.upgrade().ok_or(Unstarted::Stopping)?;
        let (inbox_tx, inbox_rx) = inbox(self.config.inbox_capacity, self.config.max_inbox_bytes);
        let mut first = Vec::with_capacity(3);
        if let Some(record) = record {
            first.extend(replay(record).ok_or(Unstarted::Lost)?);
            if let Some(initialize) = &record.initialize {
                shared.record_initialize(initialize);
            }
        } else if is_initialize(&message) {
            shared.record_initialize(payload);
        }
        first.push((message, payload.len()));
        for (message, len) in first {
            shared.track_client_message(&message);
            // An inbox too small for the replayed handshake: the client re-establishes
            // the session itself.
            inbox_tx
                .try_send(message, len)
                .map_err(|_| Unstarted::Lost)?;
        }
        let mut transport = BrTransport::new(
            shared.clone(),
            inbox_rx,
            ctl,
            self.outlet.clone(),
            Waits::default(),
            self.config.max_outbound_bytes,
        );
        if record.is_some() {
            transport.swallow_answer(resumed_init_id());
        }
        if let Some(acceptor) = &mut self.acceptor {
            acceptor(transport);
        } else if self.accept_tx.try_send(transport).is_err() {
            Counters::bump(&self.counters.dropped_accept_backlog);
            return Err(Unstarted::Busy);
        }
        if record.is_some() {
            Counters::bump(&self.counters.sessions_resumed);
        }
        Ok(inbox_tx)
    }

    /// Parks the idle server session `key`: its inbox sender goes, so its service and
    /// handler end; the entry keeps its place, caps and timers, and its resume record.
    /// A session that cannot be resumed (no recorded handshake) is left running, and so
    /// is one whose writer still has bytes to send (a stalled host): a revived session
    /// would get a second writer on the same key, interleaving with the first.
    pub(super) fn park(&mut self, key: (PeerId, SessionId)) {
        let id = self.next_id.fetch_add(1, Relaxed);
        let Some(entry) = self.sessions.get_mut(&key) else {
            return;
        };
        // A message delivered and not yet taken by the service (a notification) would
        // be lost with the inbox.
        let untaken = matches!(&entry.inbox, Inbox::Server(inbox) if !inbox.is_empty());
        if !entry.inbound
            || untaken
            || entry.shared.is_busy()
            || entry.shared.has_outbound()
            || entry.shared.resume_record().is_none()
        {
            return;
        }
        let parked = Arc::new(entry.shared.parked(id));
        // The old state goes with its transport, whose close need not reach us.
        std::mem::replace(&mut entry.shared, parked).mark_closed();
        entry.inbox = Inbox::Parked;
        tracing::debug!(peer = %key.0, sid = %key.1, "session parked");
    }

    /// A message on a parked session: a new service, given the recorded handshake (not
    /// for a new `initialize`) and then the message.
    fn revive(&mut self, key: (PeerId, SessionId), message: ClientJsonRpcMessage, payload: &[u8]) {
        let (peer, sid) = key;
        let Some(shared) = self.sessions.get(&key).map(|e| e.shared.clone()) else {
            return;
        };
        let request_id = match &message {
            JsonRpcMessage::Request(r) => Some(r.id.clone()),
            _ => None,
        };
        let record = if is_initialize(&message) {
            None
        } else {
            match shared.resume_record() {
                Some(record) => Some(record),
                None => {
                    self.close(key, CloseReason::Transport);
                    return;
                }
            }
        };
        match self.start(&shared, message, payload, record.as_ref()) {
            Ok(inbox_tx) => {
                if let Some(entry) = self.sessions.get_mut(&key) {
                    entry.inbox = Inbox::Server(inbox_tx);
                }
                shared.touch();
                Counters::bump(&self.counters.messages_delivered);
                tracing::debug!(%peer, %sid, "session revived");
                self.schedule_idle(self.config.park_scan_after());
            }
            Err(Unstarted::Stopping) => {}
            Err(Unstarted::Lost) => {
                self.close(key, CloseReason::Transport);
                if let Some(id) = request_id {
                    self.reply_error(peer, sid, id, SESSION_NOT_FOUND, "session not found");
                }
            }
            Err(Unstarted::Busy) => {
                // Parked again under a fresh id: the dropped transport's close is stale.
                let id = self.next_id.fetch_add(1, Relaxed);
                if let Some(entry) = self.sessions.get_mut(&key) {
                    entry.shared = Arc::new(shared.parked(id));
                }
                if let Some(id) = request_id {
                    self.reply_error(peer, sid, id, TOO_MANY_SESSIONS, "server busy");
                }
            }
        }
    }

    pub(super) fn reply_error(
        &mut self,
        peer: PeerId,
        sid: SessionId,
        id: RequestId,
        code: ErrorCode,
        message: &'static str,
    ) {
        // Every request is answered: a client with several requests outstanding on a
        // forgotten session must learn of each (one reply per request, so no
        // amplification). Only a full queue drops a reply, under a flood; the client's
        // request timeout covers it.
        let reply = ServerJsonRpcMessage::error(ErrorData::new(code, message, None), Some(id));
        if let Ok(payload) = serde_json::to_vec(&reply) {
            let _ = self
                .reply_tx
                .try_send((peer, sid, self.outlet.exp(), payload));
        }
    }
}

/// Whether a server's message can only be about a request in progress, which a parked
/// dialed session has none of: an answer, a progress report, a cancellation.
fn concerns_no_parked(message: &ServerJsonRpcMessage) -> bool {
    match message {
        JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => true,
        JsonRpcMessage::Notification(n) => matches!(
            n.notification,
            ServerNotification::ProgressNotification(_)
                | ServerNotification::CancelledNotification(_)
        ),
        JsonRpcMessage::Request(_) => false,
    }
}

/// Whether a client's message on a parked session needs no service: `initialized`
/// (a revival replays one), or a cancellation or progress report (a parked session has
/// no request in progress).
fn needs_no_service(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, JsonRpcMessage::Notification(n) if matches!(
        n.notification,
        ClientNotification::InitializedNotification(_)
            | ClientNotification::CancelledNotification(_)
            | ClientNotification::ProgressNotification(_)
    ))
}

/// Whether a message is the legacy handshake's `initialize`.
fn is_initialize(message: &ClientJsonRpcMessage) -> bool {
    matches!(message, JsonRpcMessage::Request(r) if matches!(r.request, ClientRequest::InitializeRequest(_)))
}

/// Whether a request may open a server session: the legacy handshake, discovery, or a
/// request carrying the stateless protocol's inline metadata.
fn opens_session(request: &ClientRequest) -> bool {
    matches!(
        request,
        ClientRequest::InitializeRequest(_) | ClientRequest::DiscoverRequest(_)
    ) || request.get_meta().protocol_version().is_some()
}

/// Why a server session's service did not start.
enum Unstarted {
    /// The router is stopping.
    Stopping,
    /// Its recorded handshake no longer replays: to the client, the session is gone.
    Lost,
    /// The accept backlog is full.
    Busy,
}

enum Delivery {
    Queued,
    Invalid(serde_json::Error),
    Full,
    Gone,
}

fn deliver<T>(tx: &InboxTx<T>, message: T, len: usize) -> Delivery {
    match tx.try_send(message, len) {
        Ok(()) => Delivery::Queued,
        Err(Refused::Full) => Delivery::Full,
        Err(Refused::Gone) => Delivery::Gone,
    }
}
