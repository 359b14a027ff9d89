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
//! - A server that goes quiet while a request is open is asked whether the session is
//!   alive: after [`DEFAULT_SILENCE_PROBE`] (configurable) without a message from it,
//!   an MCP `ping` goes out on the session, and again each such interval while the
//!   silence lasts. An answer (any answer) says the session is there; a lost-session
//!   answer starts the recovery above at once, every open request replayed (the server
//!   that says so no longer runs any of them), instead of waiting out the request
//!   timeout. A server restarted mid-call is so found within one interval of its
//!   return. The ping's parts live one interval: a ping that waited for an offline
//!   peer is never delivered late.

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

/// Default silence of a server, while a request waits on it, after which the session
/// is probed with `ping`: 10 seconds. A server answers a ping in two PM hops (a second
/// or two on Bison Relay), so the probe costs little, and a server restarted mid-call
/// is found at most this long after it is back: the caller hears within seconds, not
/// at the request timeout. Progress, logs and answers all count as hearing from it.
pub const DEFAULT_SILENCE_PROBE: Duration = Duration::from_secs(10);

/// The id prefix of a probe `ping`: a string, as [`REINIT_ID_PREFIX`].
const PING_ID_PREFIX: &str = "brmcp-ping-";

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
    /// A cancellation notice for the server.
    Cancel(Arc<Vec<u8>>),
    /// A probe `ping`, living one probe interval.
    Ping(Arc<Vec<u8>>),
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

/// The silence probe: when to ping, and the ping whose answer counts.
struct Probe {
    /// Silence after which to ping; `None`: never.
    after: Option<Duration>,
    /// When the server was last heard from, or last pinged.
    since: Instant,
    /// Pings sent so far (their ids' serials).
    sent: u64,
    /// The latest ping's id and the recoveries completed when it was sent.
    latest: Option<(RequestId, u64)>,
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
    probe: Probe,
}

impl ClientState {
    /// Requests wait `timeout`; a silent server is probed after `probe_after`.
    pub(crate) fn new(
        timeout: Option<Duration>,
        probe_after: Option<Duration>,
        ttl: Duration,
    ) -> Self {
        Self {
            timeout,
            ttl,
            inflight: HashMap::new(),
            init: None,
            initialized: None,
            reinit: None,
            epoch: 0,
            ready: VecDeque::new(),
            probe: Probe {
                after: probe_after,
                since: Instant::now(),
                sent: 0,
                latest: None,
            },
        }
    }

    /// Seeds the handshake of a session an earlier service of ours initialized (a
    /// revived parked session sends no `initialize`): `init` is that `initialize` as
    /// sent, so a session the server loses can still be recovered.
    pub(crate) fn seed_handshake(&mut self, init: Arc<Vec<u8>>) {
        let Ok(JsonRpcMessage::Request(request)) =
            serde_json::from_slice::<ClientJsonRpcMessage>(&init)
        else {
            return;
        };
        let initialized =
            serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.initialized = serde_json::to_vec(&initialized).ok().map(Arc::new);
        self.init = Some((request.id, init));
    }

    /// When the silent server is next probed: while a request other than
    /// `initialize` waits on it and no recovery is under way.
    fn probe_due(&self) -> Option<Instant> {
        let after = self.probe.after?;
        let init = self.init.as_ref().map(|(id, _)| id);
        let waiting = self.inflight.keys().any(|id| Some(id) != init);
        (waiting && self.reinit.is_none()).then(|| self.probe.since + after)
    }

    /// [`exp_lifetime`](Self::exp_lifetime) of a probe `ping`: one probe interval.
    pub(crate) fn ping_exp_lifetime(&self) -> Duration {
        exp_lifetime(self.probe.after, self.ttl)
    }

    /// The probe `ping` due at `now`, if one is.
    fn ping(&mut self, now: Instant) -> Option<Resend> {
        if self.probe_due().is_none_or(|due| due > now) {
            return None;
        }
        self.probe.since = now;
        self.probe.sent += 1;
        // A nonce too: a previous run's late answer on a resumed session is not ours.
        let nonce = MessageId::random().ok()?;
        let nonce: String = nonce
            .as_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let id = RequestId::String(format!("{PING_ID_PREFIX}{nonce}-{}", self.probe.sent).into());
        let ping = serde_json::json!({"jsonrpc": "2.0", "id": &id, "method": "ping"});
        let payload = serde_json::to_vec(&ping).ok()?;
        self.probe.latest = Some((id, self.epoch));
        tracing::debug!("server silent while a request waits; pinging the session");
        Some(Resend::Ping(Arc::new(payload)))
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
        requests.chain(reinit).chain(self.probe_due()).min()
    }

    /// Times out what is due at `now`; returns the cancellation notices and the probe
    /// to send.
    pub(crate) fn on_deadline(&mut self, now: Instant, peer: &PeerId) -> Vec<Resend> {
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
                cancels.push(Resend::Cancel(Arc::new(payload)));
            }
        }
        cancels.extend(self.ping(now));
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
    /// it, those replayed already too if `all` (the server said it has no session now,
    /// so none of them runs there). Returns the repeated `initialize`; `None` if there
    /// is nothing to repeat.
    fn start_recovery(&mut self, now: Instant, all: bool) -> Option<Resend> {
        let (init_id, init) = self.init.as_ref()?;
        let mut message: serde_json::Value = serde_json::from_slice(init).ok()?;
        let id: RequestId =
            RequestId::String(format!("{REINIT_ID_PREFIX}{}", self.epoch + 1).into());
        *message.get_mut("id")? = serde_json::to_value(&id).ok()?;
        let payload = Arc::new(serde_json::to_vec(&message).ok()?);
        for (request_id, request) in &mut self.inflight {
            if request_id != init_id && (all || !request.replayed) {
                request.waiting = true;
            }
        }
        self.reinit = Some(Reinit {
            id,
            deadline: now + self.init_wait(),
        });
        Some(Resend::Initialize(payload))
    }

    /// A probe's answer: a lost session (to the latest ping, sent since the last
    /// recovery, with no recovery under way) is recovered at once, every open request
    /// replayed.
    fn on_ping_answer(
        &mut self,
        id: &RequestId,
        message: &ServerJsonRpcMessage,
        now: Instant,
    ) -> Vec<Resend> {
        let lost = matches!(message, JsonRpcMessage::Error(e) if is_session_lost(&e.error));
        let current = self
            .probe
            .latest
            .as_ref()
            .is_some_and(|(latest, epoch)| latest == id && *epoch == self.epoch);
        if !lost || !current || self.reinit.is_some() {
            return Vec::new();
        }
        self.probe.latest = None;
        tracing::debug!("the server lost the session (found by a ping); re-establishing");
        self.start_recovery(now, true).into_iter().collect()
    }

    /// Handles one message from the peer: what to hand to rmcp, and what to send.
    pub(crate) fn on_receive(
        &mut self,
        message: ServerJsonRpcMessage,
        now: Instant,
    ) -> (Option<ServerJsonRpcMessage>, Vec<Resend>) {
        self.probe.since = now;
        let Some(id) = answered_id(&message).cloned() else {
            return (Some(message), Vec::new());
        };

        // The answer to a probe: the session is there, unless the server says not.
        if let RequestId::String(s) = &id
            && s.starts_with(PING_ID_PREFIX)
        {
            return (None, self.on_ping_answer(&id, &message, now));
        }

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
        match self.start_recovery(now, false) {
            Some(init) => (None, vec![init]),
            None => {
                self.inflight.remove(&id);
                (Some(message), Vec::new())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const PROBE: Duration = Duration::from_secs(10);

    fn request(state: &mut ClientState, value: Value, now: Instant) {
        let message: ClientJsonRpcMessage = serde_json::from_value(value.clone()).unwrap();
        let JsonRpcMessage::Request(r) = message else {
            panic!("a request")
        };
        let payload = Arc::new(serde_json::to_vec(&value).unwrap());
        let mid = MessageId::random().unwrap();
        state.on_request(&r, &payload, mid, UnixTime(1), now);
    }

    fn from_server(value: Value) -> ServerJsonRpcMessage {
        serde_json::from_value(value).unwrap()
    }

    /// A state with its session initialized (request 0) and `tools/call` 1 open.
    fn calling(now: Instant) -> ClientState {
        let mut state = ClientState::new(None, Some(PROBE), Duration::from_secs(600));
        request(
            &mut state,
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "c", "version": "1"}}}),
            now,
        );
        let init = from_server(json!({"jsonrpc": "2.0", "id": 0, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "serverInfo": {"name": "s", "version": "1"}}}));
        assert!(state.on_receive(init, now).0.is_some());
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let payload = Arc::new(serde_json::to_vec(&initialized).unwrap());
        state.on_notification(&serde_json::from_value(initialized).unwrap(), &payload);
        request(
            &mut state,
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "slow"}}),
            now,
        );
        state
    }

    /// The id of the ping among `sends`.
    fn ping_id(sends: &[Resend]) -> Value {
        let [Resend::Ping(payload)] = sends else {
            panic!("one ping")
        };
        let ping: Value = serde_json::from_slice(payload).unwrap();
        assert_eq!(ping["method"], "ping");
        ping["id"].clone()
    }

    fn lost(id: &Value) -> ServerJsonRpcMessage {
        from_server(json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": SESSION_NOT_FOUND.0, "message": "session not found"}}))
    }

    #[test]
    fn a_silent_server_is_pinged_while_a_request_waits() {
        let t0 = Instant::now();
        let mut idle = ClientState::new(None, Some(PROBE), Duration::from_secs(600));
        assert_eq!(idle.next_deadline(), None, "nothing open: no probe");
        let mut state = calling(t0);
        assert_eq!(state.next_deadline(), Some(t0 + PROBE));
        assert!(
            state
                .on_deadline(t0 + PROBE / 2, &PeerId::from_bytes([1; 32]))
                .is_empty()
        );
        // Progress is hearing from the server.
        let progress = from_server(json!({"jsonrpc": "2.0", "method": "notifications/progress",
            "params": {"progressToken": 1, "progress": 1}}));
        let t1 = t0 + PROBE / 2;
        assert!(state.on_receive(progress, t1).0.is_some());
        assert_eq!(state.next_deadline(), Some(t1 + PROBE));
        let t2 = t1 + PROBE;
        let id = ping_id(&state.on_deadline(t2, &PeerId::from_bytes([1; 32])));
        assert_eq!(
            state.next_deadline(),
            Some(t2 + PROBE),
            "again while silent"
        );
        // The answer is swallowed; the call stays open.
        let pong = from_server(json!({"jsonrpc": "2.0", "id": id, "result": {}}));
        let (deliver, sends) = state.on_receive(pong, t2);
        assert!(deliver.is_none() && sends.is_empty());
        assert_eq!(state.inflight.len(), 1);
        // Once answered, no more probes.
        let done = from_server(json!({"jsonrpc": "2.0", "id": 1, "result": {"content": []}}));
        assert!(state.on_receive(done, t2).0.is_some());
        assert_eq!(state.next_deadline(), None);
        let _ = &mut idle;
    }

    #[test]
    fn a_ping_that_finds_the_session_lost_replays_every_open_request() {
        let t0 = Instant::now();
        let peer = PeerId::from_bytes([1; 32]);
        let mut state = calling(t0);
        for round in 0..2 {
            let at = t0 + PROBE * (2 * round + 1);
            let id = ping_id(&state.on_deadline(at, &peer));
            let (deliver, sends) = state.on_receive(lost(&id), at);
            assert!(deliver.is_none());
            let [Resend::Initialize(init)] = &sends[..] else {
                panic!("round {round}: initialize repeated")
            };
            let init: Value = serde_json::from_slice(init).unwrap();
            assert_eq!(
                state.next_deadline(),
                Some(at + INITIALIZE_TIMEOUT),
                "no probe meanwhile"
            );
            let back = from_server(json!({"jsonrpc": "2.0", "id": init["id"], "result": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "serverInfo": {"name": "s", "version": "1"}}}));
            let (deliver, sends) = state.on_receive(back, at);
            assert!(deliver.is_none());
            // `notifications/initialized`, then the call again, even the second time.
            assert!(
                matches!(&sends[..], [Resend::Notification(_), Resend::Replay { .. }]),
                "round {round}"
            );
        }
    }

    #[test]
    fn only_the_latest_pings_lost_answer_counts() {
        let t0 = Instant::now();
        let peer = PeerId::from_bytes([1; 32]);
        let mut state = calling(t0);
        let old = ping_id(&state.on_deadline(t0 + PROBE, &peer));
        let _new = ping_id(&state.on_deadline(t0 + PROBE * 2, &peer));
        let (deliver, sends) = state.on_receive(lost(&old), t0 + PROBE * 2);
        assert!(
            deliver.is_none() && sends.is_empty(),
            "a stale ping's answer"
        );
        // Nor does a ping's answer ever reach rmcp.
        let other = json!("brmcp-ping-elsewhere");
        let (deliver, sends) = state.on_receive(lost(&other), t0 + PROBE * 2);
        assert!(deliver.is_none() && sends.is_empty());
    }
}
