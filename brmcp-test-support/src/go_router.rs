//! A test double of the Go implementation's session behaviour: its Router (transport.go)
//! in the server role with one go-sdk v1.6.1 server session per (peer, sid), written from
//! the Go reference inventory (router semantics, section 3) and go-sdk's
//! `ServerSession.handle`, not from this crate's router:
//!
//! - any message on an unknown (peer, sid) opens a fresh session, counted against the
//!   peer's cap; at the cap the new session is dropped silently (no answer at all);
//! - a fresh session refuses every request but `initialize` and `ping` with JSON-RPC code
//!   0 and `method "<m>" is invalid during session initialization`, until `initialize`
//!   arrives (go-sdk marks the session initialized when it handles `initialize`);
//! - sessions idle longer than the idle timeout are forgotten (activity: creation, each
//!   complete inbound message, each reply), swept every timeout/4 clamped to 100 ms..1 min;
//! - every reply is stamped `exp = now + 10 min`; a restart forgets everything.
//!
//! It serves two tools: `echo`, and `slow`, which answers after `secs` seconds unless
//! the double restarted meanwhile (the call died with the process). The Rust side talks to it through [`GoRouter::link`], a
//! router whose PMs go straight to the double, in order, and whose replies come back in
//! order.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use brmcp_adapters::wire::{Chunks, MessageId, SessionId, encode_part, parse};
use brmcp_adapters::{Clock, PeerId, PmSender, Router, RouterConfig, TokioClock};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// The Go router's default idle timeout in the server role.
pub const GO_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// The Go router's default per-peer session cap.
pub const GO_MAX_SESSIONS: usize = 8;

/// The TTL the Go router stamps on every part it writes.
const GO_TTL_SECS: u64 = 600;

/// Protocol versions go-sdk v1.6.1 accepts, newest first.
const GO_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// What the double saw.
#[derive(Debug, Default)]
pub struct GoProbe {
    /// `initialize` requests handled.
    pub initializes: AtomicUsize,
    /// Requests refused with go-sdk's "invalid during session initialization".
    pub refusals: AtomicUsize,
    /// `tools/call` requests that ran.
    pub calls: AtomicUsize,
    /// `ping` requests answered.
    pub pings: AtomicUsize,
    /// Messages dropped because the peer was at its session cap.
    pub dropped_at_cap: AtomicUsize,
    /// Sessions closed by the idle sweep.
    pub expired: AtomicUsize,
}

impl GoProbe {
    pub fn get(counter: &AtomicUsize) -> usize {
        counter.load(SeqCst)
    }
}

/// A message being reassembled: its part count and the parts so far.
type Partial = (u16, BTreeMap<u16, Vec<u8>>);

struct GoSession {
    initialized: bool,
    last_active: Instant,
}

#[derive(Default)]
struct GoState {
    sessions: HashMap<(PeerId, SessionId), GoSession>,
    partials: HashMap<(PeerId, SessionId, MessageId), Partial>,
    /// Bumped by a restart, so the old sweeper stops.
    generation: u64,
}

struct GoInner {
    id: PeerId,
    idle_timeout: Duration,
    max_sessions: usize,
    clock: TokioClock,
    state: Mutex<GoState>,
    replies: OnceLock<mpsc::UnboundedSender<(PeerId, String)>>,
    probe: Arc<GoProbe>,
}

/// The Go router double. Cheap to clone.
#[derive(Clone)]
pub struct GoRouter {
    inner: Arc<GoInner>,
}

impl GoRouter {
    /// A Go server at identity `id` with the given idle timeout and session cap.
    pub fn new(id: PeerId, idle_timeout: Duration, max_sessions: usize) -> Self {
        let this = Self {
            inner: Arc::new(GoInner {
                id,
                idle_timeout,
                max_sessions,
                clock: TokioClock::new(),
                state: Mutex::new(GoState::default()),
                replies: OnceLock::new(),
                probe: Arc::new(GoProbe::default()),
            }),
        };
        this.spawn_sweeper(0);
        this
    }

    /// The Go server's identity.
    pub fn id(&self) -> PeerId {
        self.inner.id
    }

    pub fn probe(&self) -> Arc<GoProbe> {
        self.inner.probe.clone()
    }

    /// Sessions the double has now.
    pub fn sessions(&self) -> usize {
        self.inner.state.lock().unwrap().sessions.len()
    }

    /// `peer` opens another session here (say, a second client of the same identity),
    /// taking one of its places until it idles out.
    pub fn occupy(&self, peer: PeerId) {
        let sid = SessionId::random().unwrap();
        self.inner.state.lock().unwrap().sessions.insert(
            (peer, sid),
            GoSession {
                initialized: false,
                last_active: Instant::now(),
            },
        );
    }

    /// The process restarts: every session and partial message is forgotten.
    pub fn restart(&self) {
        let generation = {
            let mut state = self.inner.state.lock().unwrap();
            state.sessions.clear();
            state.partials.clear();
            state.generation += 1;
            state.generation
        };
        self.spawn_sweeper(generation);
    }

    /// A Rust router at identity `client` (with `config`) whose PMs go to this double.
    /// One client router per double.
    pub fn link(&self, client: PeerId, config: RouterConfig) -> Router {
        let router = Router::new(
            ToGo {
                go: self.clone(),
                from: client,
            },
            config.with_clock(self.inner.clock),
        );
        let (tx, mut rx) = mpsc::unbounded_channel::<(PeerId, String)>();
        assert!(self.inner.replies.set(tx).is_ok(), "one link per double");
        let back = router.clone();
        let from = self.inner.id;
        tokio::spawn(async move {
            while let Some((_to, body)) = rx.recv().await {
                if back.handle_pm(from, body).await.is_err() {
                    return;
                }
            }
        });
        router
    }

    fn spawn_sweeper(&self, generation: u64) {
        let inner = Arc::downgrade(&self.inner);
        let interval = (self.inner.idle_timeout / 4)
            .clamp(Duration::from_millis(100), Duration::from_secs(60));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(inner) = inner.upgrade() else { return };
                let mut state = inner.state.lock().unwrap();
                if state.generation != generation {
                    return;
                }
                let now = Instant::now();
                let before = state.sessions.len();
                let idle = inner.idle_timeout;
                state
                    .sessions
                    .retain(|_, s| now.duration_since(s.last_active) <= idle);
                let gone = before - state.sessions.len();
                inner.probe.expired.fetch_add(gone, SeqCst);
            }
        });
    }

    /// `Router.HandlePM`: parse, reassemble, decode, find or open the session, serve.
    fn handle_pm(&self, from: PeerId, body: &str) {
        let Ok(part) = parse(body) else { return };
        if part.header().is_expired(self.inner.clock.now()) {
            return;
        }
        let mut chunk = vec![0u8; part.decoded_len_max()];
        let Ok(n) = part.decode_body(&mut chunk) else {
            return;
        };
        chunk.truncate(n);
        let (sid, mid) = (*part.sid(), *part.mid());
        let payload = {
            let mut state = self.inner.state.lock().unwrap();
            let entry = state
                .partials
                .entry((from, sid, mid))
                .or_insert_with(|| (part.total(), BTreeMap::new()));
            entry.1.insert(part.seq(), chunk);
            if entry.1.len() < usize::from(entry.0) {
                return;
            }
            let (_, parts) = state.partials.remove(&(from, sid, mid)).unwrap();
            parts.into_values().flatten().collect::<Vec<u8>>()
        };
        let Ok(message) = serde_json::from_slice::<Value>(&payload) else {
            return;
        };
        if message.get("jsonrpc") != Some(&json!("2.0")) {
            return;
        }
        let initialized = {
            let mut state = self.inner.state.lock().unwrap();
            let of_peer = state.sessions.keys().filter(|(p, _)| *p == from).count();
            let session = match state.sessions.get_mut(&(from, sid)) {
                Some(session) => session,
                None if of_peer >= self.inner.max_sessions => {
                    // "peer is at the session limit; dropping new session"
                    self.inner.probe.dropped_at_cap.fetch_add(1, SeqCst);
                    return;
                }
                None => state.sessions.entry((from, sid)).or_insert(GoSession {
                    initialized: false,
                    last_active: Instant::now(),
                }),
            };
            session.last_active = Instant::now();
            let method = message.get("method").and_then(Value::as_str);
            if method == Some("initialize") {
                session.initialized = true;
            }
            session.initialized
        };
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            return; // a response: the double sends no requests
        };
        let Some(id) = message.get("id").cloned() else {
            return; // a notification
        };
        if initialized
            && method == "tools/call"
            && message["params"]["name"] == "slow"
            && let Some(secs) = message["params"]["arguments"]["secs"].as_u64()
        {
            self.inner.probe.calls.fetch_add(1, SeqCst);
            let this = self.clone();
            let generation = self.inner.state.lock().unwrap().generation;
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(secs)).await;
                if this.inner.state.lock().unwrap().generation != generation {
                    return;
                }
                let reply = json!({"jsonrpc": "2.0", "id": id,
                    "result": {"content": [{"type": "text", "text": "slept"}]}});
                this.write(from, sid, &reply);
            });
            return;
        }
        let reply = self.serve(method, &message, initialized);
        let reply = match reply {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, text)) => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text}})
            }
        };
        self.write(from, sid, &reply);
    }

    /// go-sdk's `ServerSession.handle` and the harness's tools.
    fn serve(
        &self,
        method: &str,
        message: &Value,
        initialized: bool,
    ) -> Result<Value, (i64, String)> {
        let probe = &self.inner.probe;
        if !initialized && method != "initialize" && method != "ping" {
            probe.refusals.fetch_add(1, SeqCst);
            return Err((
                0,
                format!("method \"{method}\" is invalid during session initialization"),
            ));
        }
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match method {
            "initialize" => {
                probe.initializes.fetch_add(1, SeqCst);
                let asked = params["protocolVersion"].as_str().unwrap_or_default();
                let version = GO_VERSIONS
                    .iter()
                    .find(|v| **v == asked)
                    .copied()
                    .unwrap_or(GO_VERSIONS[0]);
                Ok(json!({
                    "protocolVersion": version,
                    "capabilities": {"logging": {}, "tools": {"listChanged": true}},
                    "serverInfo": {"name": "brmcp-serve", "version": "v1.6.1"}
                }))
            }
            "ping" => {
                probe.pings.fetch_add(1, SeqCst);
                Ok(json!({}))
            }
            "tools/list" => Ok(json!({"tools": [{
                "name": "echo",
                "description": "Echo the text back",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                                "required": ["text"], "additionalProperties": false},
                "_meta": {"brmcp/priceAtoms": 0}
            }]})),
            "tools/call" => {
                let name = params["name"].as_str().unwrap_or_default();
                if name != "echo" {
                    return Err((-32602, format!("unknown tool \"{name}\"")));
                }
                probe.calls.fetch_add(1, SeqCst);
                let text = params["arguments"]["text"].as_str().unwrap_or_default();
                Ok(json!({"content": [{"type": "text", "text": text}]}))
            }
            _ => Err((-32601, "method not found".into())),
        }
    }

    /// `Conn.Write`: touch, encode with `exp = now + TTL`, send the parts in order.
    fn write(&self, to: PeerId, sid: SessionId, message: &Value) {
        if let Some(session) = self
            .inner
            .state
            .lock()
            .unwrap()
            .sessions
            .get_mut(&(to, sid))
        {
            session.last_active = Instant::now();
        }
        let payload = serde_json::to_vec(message).unwrap();
        let exp = self.inner.clock.now().saturating_add(GO_TTL_SECS).0;
        let mid = MessageId::random().unwrap();
        let Some(replies) = self.inner.replies.get() else {
            return;
        };
        for (header, chunk) in Chunks::new(sid, mid, exp, &payload, 200 << 10).unwrap() {
            let mut pm = vec![0u8; header.encoded_len(chunk.len())];
            let n = encode_part(&header, chunk, &mut pm).unwrap();
            pm.truncate(n);
            let _ = replies.send((to, String::from_utf8(pm).unwrap()));
        }
    }
}

/// The Rust router's host: each PM goes straight into the double, in order.
struct ToGo {
    go: GoRouter,
    from: PeerId,
}

impl PmSender for ToGo {
    type Error = std::io::Error;

    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), Self::Error> {
        if *to == self.go.id() {
            self.go.handle_pm(self.from, &body);
        }
        Ok(())
    }
}
