//! A dialed session's requests: their timeouts, and the recovery of a session the
//! server lost.
//!
//! - A request that gets no answer within the configured timeout fails with a JSON-RPC
//!   error [`REQUEST_TIMEOUT`] (and the peer is told it is cancelled). Its parts carry a
//!   deadline that passes no later than that, so a request the caller gave up on never
//!   starts at the peer. `initialize` waits at most [`INITIALIZE_TIMEOUT`]: a peer that
//!   drops new sessions silently (the Go router at its session limit) is reported
//!   quickly.
//! - A server that lost the session is recognised whatever its implementation
//!   ([`is_session_lost`]: our [`SESSION_NOT_FOUND`], or go-sdk's refusal on the fresh
//!   session the Go router opens for a forgotten one). The session's `initialize` is
//!   repeated on the same sid (under an id of its own; its answer is swallowed), then
//!   `notifications/initialized`, then every request still outstanding is sent again,
//!   once each, under its first message id and deadline: the server drops whichever copy
//!   of a request arrives second, and rmcp sees only the requests' real answers.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use brmcp_wire::{MessageId, UnixTime};
use rmcp::model::{
    CancelledNotification, CancelledNotificationParam, ClientJsonRpcMessage, ClientNotification,
    ClientRequest, ErrorData, JsonRpcMessage, JsonRpcRequest, RequestId, ServerJsonRpcMessage,
};
use tokio::time::Instant;

use crate::peer::PeerId;
use crate::protocol::{REQUEST_TIMEOUT, SESSION_NOT_FOUND, is_session_lost};
use crate::transport::answered_id;

/// The longest a dialed session waits for the answer to an `initialize`, its own or a
/// repeated one: 30 seconds. A server answers `initialize` at once (the Go serving
/// harness in tens of milliseconds, plus two PM hops), while the Go router drops a new
/// session silently at its per-peer limit: without this bound the client would wait the
/// whole request timeout (10 minutes) for an answer that never comes. Long enough for a
/// slow relay.
pub const INITIALIZE_TIMEOUT: Duration = Duration::from_secs(30);

/// The id prefix of a repeated `initialize`: a string, so it never collides with the
/// numeric ids rmcp draws, and its answer is recognised as ours.
const REINIT_ID_PREFIX: &str = "brmcp-reinit-";

/// See [`ClientState::exp_lifetime`].
fn exp_lifetime(wait: Option<Duration>, ttl: Duration) -> Duration {
    let lifetime = wait.map_or(ttl, |w| w.min(ttl));
    Duration::from_secs(lifetime.as_secs().saturating_sub(1))
}

/// Recovery traffic to send.
pub(crate) enum Resend {
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
    /// When the caller gives up on it (never for `None`); a replay does not move it.
    deadline: Option<Instant>,
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
pub(crate) struct ClientState {
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
    pub(crate) fn new(timeout: Option<Duration>, ttl: Duration) -> Self {
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

    /// How long the caller waits for a request: the request timeout (`None`: for
    /// ever), and for `initialize` at most [`INITIALIZE_TIMEOUT`].
    fn wait(&self, request: &ClientRequest) -> Option<Duration> {
        if matches!(request, ClientRequest::InitializeRequest(_)) {
            Some(self.init_wait())
        } else {
            self.timeout
        }
    }

    fn init_wait(&self) -> Duration {
        self.timeout
            .map_or(INITIALIZE_TIMEOUT, |t| t.min(INITIALIZE_TIMEOUT))
    }

    /// The lifetime to stamp on a request (its parts' `exp = now + lifetime`): the part
    /// TTL, cut so the parts expire by the time the caller gives up. A receiver accepts
    /// a part during the whole second its `exp` names (WIRE.md §4.5), so the stamp is a
    /// second shorter than the wait; a wait under two seconds is honoured to the second.
    pub(crate) fn exp_lifetime(&self, request: &ClientRequest) -> Duration {
        exp_lifetime(self.wait(request), self.ttl)
    }

    /// [`exp_lifetime`](Self::exp_lifetime) of a repeated `initialize`.
    pub(crate) fn init_exp_lifetime(&self) -> Duration {
        exp_lifetime(Some(self.init_wait()), self.ttl)
    }

    /// A message made up locally for rmcp, if one is ready.
    pub(crate) fn pop_ready(&mut self) -> Option<ServerJsonRpcMessage> {
        self.ready.pop_front()
    }

    /// A request sent now, under `mid` with deadline `exp`.
    pub(crate) fn on_request(
        &mut self,
        request: &JsonRpcRequest<ClientRequest>,
        payload: &Arc<Vec<u8>>,
        mid: MessageId,
        exp: UnixTime,
        now: Instant,
    ) {
        if matches!(request.request, ClientRequest::InitializeRequest(_)) {
            self.init = Some((request.id.clone(), payload.clone()));
        }
        // A wait too long to add to the clock is no timeout.
        let deadline = self.wait(&request.request).and_then(|w| now.checked_add(w));
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

    /// A notification sent now.
    pub(crate) fn on_notification(&mut self, item: &ClientJsonRpcMessage, payload: &Arc<Vec<u8>>) {
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

    /// When the next request or recovery times out.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let requests = self.inflight.values().filter_map(|r| r.deadline);
        let reinit = self.reinit.as_ref().map(|r| r.deadline);
        requests.chain(reinit).min()
    }

    /// Times out what is due at `now`; returns cancellation notices to send.
    pub(crate) fn on_deadline(&mut self, now: Instant, peer: &PeerId) -> Vec<Arc<Vec<u8>>> {
        if self.reinit.as_ref().is_some_and(|r| r.deadline <= now) {
            let waited = self.init_wait();
            self.fail_recovery(&format!(
                "session lost at {peer}; no answer to initialize within {waited:?}"
            ));
        }
        let due: Vec<RequestId> = self
            .inflight
            .iter()
            .filter(|(_, r)| r.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| id.clone())
            .collect();
        let mut cancels = Vec::new();
        for id in due {
            self.inflight.remove(&id);
            let is_init = self.init.as_ref().is_some_and(|(init, _)| *init == id);
            let waited = if is_init {
                self.init_wait()
            } else {
                self.timeout.unwrap_or_default()
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
            deadline: now + self.init_wait(),
        });
        Some(Resend::Initialize(payload))
    }

    /// Handles one message from the peer: what to hand to rmcp, and what to send.
    pub(crate) fn on_receive(
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
        if self.reinit.is_some() {
            request.waiting = true;
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
