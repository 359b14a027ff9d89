//! The fake's state, its accept loop, what tests read back from it and the items they
//! push into its replay logs.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp_adapters::PeerId;
use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

use super::conn::serve;
use super::{
    Certs, PM_STREAM, TIP_PROGRESS, TIP_STREAM, b64, frame, lock, seq_of, split_suffix, uid,
};

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Which connection (1 for the first).
    pub conn: usize,
    /// The whole request as received.
    pub raw: Value,
    pub method: String,
    pub params: Value,
}

impl Recorded {
    pub fn id(&self) -> Value {
        self.raw.get("id").cloned().unwrap_or(Value::Null)
    }
}

type ReplyFuture = Pin<Box<dyn Future<Output = Reply> + Send>>;

/// How the fake answers a request.
pub enum Reply {
    Result(Value),
    Error(i64, String),
    /// Answer once the future resolves (out-of-order and held answers).
    Later(ReplyFuture),
}

impl Reply {
    pub fn later(f: impl Future<Output = Self> + Send + 'static) -> Self {
        Self::Later(Box::pin(f))
    }
}

/// One request as the handler sees it.
pub struct Call {
    pub conn: usize,
    pub id: Value,
    pub method: String,
    pub params: Value,
}

pub(super) type HandlerFn = dyn Fn(&Call) -> Reply + Send + Sync;

/// The fake's default answers.
pub fn default_reply(call: &Call) -> Reply {
    match call.method.as_str() {
        "VersionService.Version" => Reply::Result(
            json!({"appVersion": "0.2.5", "goRuntime": "go1.23", "appName": "brclient"}),
        ),
        "ChatService.UserPublicIdentity" => Reply::Result(json!({
            "name": "bot", "nick": "bot", "identity": b64(&uid(0x42))
        })),
        "ChatService.PM" | "PaymentsService.TipUser" => Reply::Result(json!({})),
        _ => Reply::Error(-32603, "unknown method".into()),
    }
}

/// One stream type's replay log; ids are independent per stream type.
pub(super) struct Log {
    pub(super) entries: Vec<(u64, Value)>,
    pub(super) cleared: u64,
    pub(super) next: u64,
}

impl Log {
    pub(super) const fn new(next: u64) -> Self {
        Self {
            entries: Vec::new(),
            cleared: 0,
            next,
        }
    }
}

pub(super) struct ConnEntry {
    pub(super) out: mpsc::UnboundedSender<Message>,
    pub(super) close: watch::Sender<bool>,
    pub(super) stall: watch::Sender<bool>,
    /// (stream base method, suffixed method, request id).
    pub(super) streams: Vec<(String, String, Value)>,
    pub(super) in_flight: usize,
}

#[derive(Default)]
pub(super) struct State {
    pub(super) conns: HashMap<usize, ConnEntry>,
    pub(super) connections: usize,
    pub(super) requests: Vec<Recorded>,
    pub(super) logs: HashMap<String, Log>,
    pub(super) next_seq: u64,
    pub(super) refuse: usize,
    pub(super) accepts: Vec<Instant>,
    pub(super) auth_headers: Vec<Option<String>>,
    pub(super) paths: Vec<String>,
    pub(super) max_in_flight: usize,
    pub(super) fail_acks: usize,
    /// Stream opens to refuse, per base method: (how many more, code, message).
    pub(super) refuse_streams: HashMap<String, (usize, i64, String)>,
    /// Items stored but not yet sent live, per base method (a goroutine running late).
    pub(super) held: HashMap<String, Vec<Value>>,
    pub(super) pongs: Vec<Vec<u8>>,
    pub(super) pings_sent: usize,
}

/// Options of a [`Fake`].
#[derive(Clone, Default)]
pub struct FakeOptions {
    /// Require a client certificate signed by the certs' client CA (brclient's default).
    pub no_client_auth: bool,
    /// `rpcauthmode = basic` with these credentials.
    pub basic_auth: Option<(String, String)>,
    /// Send pings of 16 bytes this often.
    pub ping_interval: Option<Duration>,
}

pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    pub(super) handler: Mutex<Arc<HandlerFn>>,
    pub(super) options: FakeOptions,
    /// Shared with tests that assert an order of events across client and server.
    pub(super) timeline: Arc<Mutex<Vec<String>>>,
}

/// A running fake server on 127.0.0.1.
pub struct Fake {
    pub addr: SocketAddr,
    pub(super) shared: Arc<Shared>,
    pub(super) accept: JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.accept.abort();
        self.drop_connections();
    }
}

impl Fake {
    pub async fn start(certs: &Certs, options: FakeOptions) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(certs.server_cert.as_bytes())
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(certs.server_key.as_bytes()).unwrap();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap();
        let builder = if options.no_client_auth {
            builder.with_no_client_auth()
        } else {
            let mut roots = RootCertStore::empty();
            for ca in CertificateDer::pem_slice_iter(certs.client_ca.as_bytes()) {
                roots.add(ca.unwrap()).unwrap();
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .unwrap();
            builder.with_client_cert_verifier(verifier)
        };
        let tls = Arc::new(builder.with_single_cert(chain, key).unwrap());
        let acceptor = tokio_rustls::TlsAcceptor::from(tls);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                next_seq: FIRST_SEQ,
                ..State::default()
            }),
            handler: Mutex::new(Arc::new(default_reply)),
            options,
            timeline: Arc::new(Mutex::new(Vec::new())),
        });
        let accept = tokio::spawn({
            let shared = shared.clone();
            async move {
                loop {
                    let Ok((tcp, _)) = listener.accept().await else {
                        return;
                    };
                    {
                        let mut state = lock(&shared.state);
                        state.accepts.push(Instant::now());
                        if state.refuse > 0 {
                            state.refuse -= 1;
                            drop(tcp);
                            continue;
                        }
                    }
                    tokio::spawn(serve(shared.clone(), acceptor.clone(), tcp));
                }
            }
        });
        Self {
            addr,
            shared,
            accept,
        }
    }

    /// brclient's certificates and a fake using them with default options: the set-up
    /// of most tests.
    pub async fn brclient() -> (Certs, Self) {
        let certs = Certs::brclient();
        let fake = Self::start(&certs, FakeOptions::default()).await;
        (certs, fake)
    }

    pub fn url(&self) -> String {
        format!("wss://127.0.0.1:{}/ws", self.addr.port())
    }

    /// Replaces the handler of ordinary (non-stream, non-ack) requests.
    pub fn set_handler(&self, handler: impl Fn(&Call) -> Reply + Send + Sync + 'static) {
        *lock(&self.shared.handler) = Arc::new(handler);
    }

    pub fn timeline(&self) -> Arc<Mutex<Vec<String>>> {
        self.shared.timeline.clone()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        lock(&self.shared.state).requests.clone()
    }

    pub fn requests_of(&self, method: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| r.method == method)
            .collect()
    }

    /// Stream opens: (connection, suffixed method, params).
    pub fn opens(&self, base: &str) -> Vec<Recorded> {
        self.requests()
            .into_iter()
            .filter(|r| split_suffix(&r.method).is_some_and(|(b, _)| b == base))
            .collect()
    }

    /// Ids the client acknowledged with `method`, in arrival order.
    pub fn acks(&self, method: &str) -> Vec<u64> {
        self.requests_of(method)
            .iter()
            .map(|r| seq_of(&r.params["sequenceId"]))
            .collect()
    }

    /// Ids in a stream's log not yet cleared by an ack.
    pub fn unacked(&self, base: &str) -> Vec<u64> {
        let state = lock(&self.shared.state);
        state.logs.get(base).map_or_else(Vec::new, |log| {
            log.entries
                .iter()
                .map(|(id, _)| *id)
                .filter(|id| *id > log.cleared)
                .collect()
        })
    }

    pub fn connections(&self) -> usize {
        lock(&self.shared.state).connections
    }

    pub fn live_connections(&self) -> usize {
        lock(&self.shared.state).conns.len()
    }

    pub fn accepts(&self) -> Vec<Instant> {
        lock(&self.shared.state).accepts.clone()
    }

    pub fn auth_headers(&self) -> Vec<Option<String>> {
        lock(&self.shared.state).auth_headers.clone()
    }

    pub fn paths(&self) -> Vec<String> {
        lock(&self.shared.state).paths.clone()
    }

    pub fn max_in_flight(&self) -> usize {
        lock(&self.shared.state).max_in_flight
    }

    pub fn pongs(&self) -> Vec<Vec<u8>> {
        lock(&self.shared.state).pongs.clone()
    }

    pub fn pings_sent(&self) -> usize {
        lock(&self.shared.state).pings_sent
    }

    pub(super) fn store(&self, base: &str, mut params: Value) -> (u64, Value) {
        let mut state = lock(&self.shared.state);
        let first = state.next_seq;
        let log = state
            .logs
            .entry(base.to_owned())
            .or_insert_with(|| Log::new(first));
        let id = log.next;
        // Like brclient's fid<<32|endOffset: grows by the entry's length.
        log.next += params.to_string().len() as u64 + 1;
        params["sequenceId"] = Value::String(id.to_string());
        log.entries.push((id, params.clone()));
        (id, params)
    }

    /// Appends an item to a stream's log and sends it to every live stream of that
    /// kind; returns its sequence id.
    pub fn push(&self, base: &str, params: Value) -> u64 {
        let (id, params) = self.store(base, params);
        send_live(&lock(&self.shared.state), base, &params);
        id
    }

    /// The PM params brclient sends for a PM from `from`.
    pub fn pm_params(from: &PeerId, text: &str) -> Value {
        json!({
            "uid": b64(from), "nick": "alice", "msg": {"message": text},
            "timestampMs": "1765900000123"
        })
    }

    /// The tip params brclient sends for a tip received from `from`.
    pub fn tip_params(from: &PeerId, matoms: u64) -> Value {
        json!({"uid": b64(from), "amountMatoms": matoms.to_string()})
    }

    pub fn push_pm(&self, from: &PeerId, text: &str) -> u64 {
        self.push(PM_STREAM, Self::pm_params(from, text))
    }

    pub fn push_tip(&self, from: &PeerId, matoms: u64) -> u64 {
        self.push(TIP_STREAM, Self::tip_params(from, matoms))
    }

    /// A TipProgress event; zero values omitted as protojson does.
    pub fn push_progress(
        &self,
        to: &PeerId,
        matoms: u64,
        completed: bool,
        will_retry: bool,
        attempt: i32,
        attempt_err: &str,
    ) -> u64 {
        let mut event = json!({
            "uid": b64(to), "nick": "bob", "amountMatoms": matoms.to_string(), "attempt": attempt
        });
        if completed {
            event["completed"] = json!(true);
        }
        if will_retry {
            event["willRetry"] = json!(true);
        }
        if !attempt_err.is_empty() {
            event["attemptErr"] = json!(attempt_err);
        }
        self.push(TIP_PROGRESS, event)
    }
}

/// The first sequence id of a fresh log: file index 1, a little past the start.
pub const FIRST_SEQ: u64 = (1 << 32) + 97;

/// Sends a stored item to every live stream of its kind.
pub(super) fn send_live(state: &State, base: &str, params: &Value) {
    for conn in state.conns.values() {
        for (b, method, _) in &conn.streams {
            if b == base {
                let _ = conn.out.send(frame(&json!({
                    "jsonrpc": "2.0", "params": params, "method": method
                })));
            }
        }
    }
}
