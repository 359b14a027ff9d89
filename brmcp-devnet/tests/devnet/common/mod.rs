//! A raw clientrpc client for the devnet tests: rustls with the node's client
//! certificate and a pinned server certificate, a WebSocket to `/ws`, JSON-RPC frames
//! out, every received frame in.
//!
//! One background task owns the socket; it reads continuously (so tungstenite
//! answers the server's pings) unless reading is paused, and forwards every frame.

#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use brmcp_devnet::{Devnet, DevnetConfig, NodeInfo, NodeSpec};
use futures_util::{SinkExt as _, StreamExt as _};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::HeaderValue;

/// How long to wait for something that should happen.
pub const WAIT: Duration = Duration::from_secs(5);
/// How long to watch for something that should not happen.
pub const QUIET: Duration = Duration::from_millis(300);

/// A devnet in a temporary directory.
pub struct Net {
    pub devnet: Devnet,
    pub dir: tempfile::TempDir,
}

impl Net {
    pub fn node(&self, nick: &str) -> NodeInfo {
        self.devnet.node_by_nick(nick).expect("node exists")
    }
}

/// A devnet with these nicks and this config.
pub async fn start(nicks: &[&str], cfg: DevnetConfig) -> Net {
    start_specs(nicks.iter().map(|n| NodeSpec::new(*n)).collect(), cfg).await
}

pub async fn start_specs(specs: Vec<NodeSpec>, cfg: DevnetConfig) -> Net {
    let dir = tempfile::tempdir().unwrap();
    let devnet = Devnet::start_with(dir.path(), specs, cfg).await.unwrap();
    Net { devnet, dir }
}

/// The devnet of alice and bob kept in `dir`, started (again, after a stop, on what it
/// kept): the devnet and the two nodes.
pub async fn alice_and_bob_in(dir: &Path) -> (Devnet, NodeInfo, NodeInfo) {
    let specs = vec![NodeSpec::new("alice"), NodeSpec::new("bob")];
    let devnet = Devnet::start_with(dir, specs, DevnetConfig::default())
        .await
        .unwrap();
    let alice = devnet.node_by_nick("alice").unwrap();
    let bob = devnet.node_by_nick("bob").unwrap();
    (devnet, alice, bob)
}

/// Accepts exactly the pinned certificate, checking handshake signatures with ring.
#[derive(Debug)]
struct Pinned {
    der: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.der.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Present this client certificate and key (default: the node's own).
    pub client: Option<(std::path::PathBuf, std::path::PathBuf)>,
    /// Pin this server certificate (default: the node's `rpc.cert`).
    pub pin: std::path::PathBuf,
    /// Send `Authorization: Basic` with these.
    pub auth: Option<(String, String)>,
    /// The request path.
    pub path: String,
}

impl Opts {
    pub fn for_node(info: &NodeInfo) -> Self {
        Self {
            client: Some((
                info.certs.client_cert.clone(),
                info.certs.client_key.clone(),
            )),
            pin: info.certs.server_cert.clone(),
            auth: None,
            path: "/ws".into(),
        }
    }
}

pub fn tls_config(pin: &Path, client: Option<(&Path, &Path)>) -> ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let der = CertificateDer::from_pem_file(pin).unwrap();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { der, provider }));
    match client {
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_file(cert).unwrap()],
                PrivateKeyDer::from_pem_file(key).unwrap(),
            )
            .unwrap(),
        None => builder.with_no_client_auth(),
    }
}

async fn tls_connect(info: &NodeInfo, opts: &Opts) -> std::io::Result<TlsStream<TcpStream>> {
    let cfg = tls_config(
        &opts.pin,
        opts.client
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path())),
    );
    let tcp = TcpStream::connect(info.addr).await?;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    TlsConnector::from(Arc::new(cfg)).connect(name, tcp).await
}

/// A frame received from the server.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Binary(Vec<u8>),
    Text(String),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Closed,
}

impl Frame {
    /// The JSON in a data frame.
    pub fn json(&self) -> Option<Value> {
        match self {
            Self::Binary(b) => serde_json::from_slice(b).ok(),
            Self::Text(t) => serde_json::from_str(t).ok(),
            _ => None,
        }
    }
}

/// A connected raw client.
pub struct Client {
    out: mpsc::UnboundedSender<Message>,
    frames: mpsc::UnboundedReceiver<Frame>,
    pending: VecDeque<Frame>,
    paused: watch::Sender<bool>,
    next_id: u64,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Client {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Why a connection failed.
#[derive(Debug)]
pub enum ConnectError {
    Io(std::io::Error),
    Ws(tokio_tungstenite::tungstenite::Error),
}

impl ConnectError {
    /// The HTTP status of a refused upgrade.
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Ws(tokio_tungstenite::tungstenite::Error::Http(resp)) => {
                Some(resp.status().as_u16())
            }
            _ => None,
        }
    }
}

pub async fn connect(info: &NodeInfo) -> Client {
    connect_with(info, &Opts::for_node(info))
        .await
        .expect("connects")
}

pub async fn connect_with(info: &NodeInfo, opts: &Opts) -> Result<Client, ConnectError> {
    let tls = tls_connect(info, opts).await.map_err(ConnectError::Io)?;
    let url = format!("wss://{}{}", info.addr, opts.path);
    let mut req = url.into_client_request().unwrap();
    if let Some((u, p)) = &opts.auth {
        use base64::Engine as _;
        let v = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        );
        req.headers_mut()
            .insert("Authorization", HeaderValue::from_str(&v).unwrap());
    }
    let (ws, _) = tokio_tungstenite::client_async(req, tls)
        .await
        .map_err(ConnectError::Ws)?;
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<Message>();
    let (frame_tx, frames) = mpsc::unbounded_channel();
    let (paused, mut paused_rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        let (mut sink, mut stream) = ws.split();
        loop {
            let reading = !*paused_rx.borrow();
            tokio::select! {
                msg = out_rx.recv() => match msg {
                    Some(m) => if sink.send(m).await.is_err() { break },
                    None => break,
                },
                _ = paused_rx.changed() => {}
                msg = stream.next(), if reading => {
                    let frame = match msg {
                        Some(Ok(Message::Binary(b))) => Frame::Binary(b.to_vec()),
                        Some(Ok(Message::Text(t))) => Frame::Text(t.to_string()),
                        Some(Ok(Message::Ping(p))) => Frame::Ping(p.to_vec()),
                        Some(Ok(Message::Pong(p))) => Frame::Pong(p.to_vec()),
                        Some(Ok(Message::Frame(_))) => continue,
                        Some(Ok(Message::Close(_)) | Err(_)) | None => break,
                    };
                    if frame_tx.send(frame).is_err() { break }
                }
            }
        }
        let _ = frame_tx.send(Frame::Closed);
    });
    Ok(Client {
        out: out_tx,
        frames,
        pending: VecDeque::new(),
        paused,
        next_id: 1,
        task,
    })
}

impl Client {
    pub fn send(&self, msg: Message) {
        let _ = self.out.send(msg);
    }

    pub fn send_text(&self, text: &str) {
        self.send(Message::Text(text.into()));
    }

    pub fn send_binary(&self, data: &[u8]) {
        self.send(Message::Binary(data.to_vec().into()));
    }

    /// Stops (or resumes) reading the socket: the server's pings then go unanswered.
    pub fn pause_reading(&self, paused: bool) {
        self.paused.send_replace(paused);
    }

    /// Sends a request with the next numeric id (binary frame, as the Go client).
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_binary(msg.to_string().as_bytes());
        id
    }

    async fn next_frame(&mut self, within: Duration) -> Option<Frame> {
        tokio::time::timeout(within, self.frames.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next frame, pending ones first.
    pub async fn recv(&mut self, within: Duration) -> Option<Frame> {
        if let Some(f) = self.pending.pop_front() {
            return Some(f);
        }
        self.next_frame(within).await
    }

    /// The first frame matching `pred`; others stay pending.
    pub async fn find(&mut self, within: Duration, pred: impl Fn(&Frame) -> bool) -> Option<Frame> {
        if let Some(pos) = self.pending.iter().position(&pred) {
            return self.pending.remove(pos);
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let f = self.next_frame(left).await?;
            if pred(&f) {
                return Some(f);
            }
            if f == Frame::Closed {
                self.pending.push_back(f);
                return None;
            }
            self.pending.push_back(f);
        }
    }

    /// The response to `id` (a JSON object with that id and no method).
    pub async fn response_to(&mut self, id: &Value, within: Duration) -> Option<Value> {
        let id = id.clone();
        self.find(within, move |f| {
            f.json()
                .is_some_and(|v| v.get("id") == Some(&id) && v.get("method").is_none())
        })
        .await
        .and_then(|f| f.json())
    }

    /// Request then response.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params);
        self.response_to(&json!(id), WAIT)
            .await
            .unwrap_or_else(|| panic!("no response to {method}"))
    }

    /// `result` of a successful call.
    pub async fn ok(&mut self, method: &str, params: Value) -> Value {
        let resp = self.call(method, params).await;
        assert!(resp.get("error").is_none(), "{method} failed: {resp}");
        resp["result"].clone()
    }

    /// `(code, message)` of a failed call.
    pub async fn err(&mut self, method: &str, params: Value) -> (i64, String) {
        let resp = self.call(method, params).await;
        let e = resp
            .get("error")
            .unwrap_or_else(|| panic!("{method} succeeded: {resp}"));
        (
            e["code"].as_i64().unwrap(),
            e["message"].as_str().unwrap().to_owned(),
        )
    }

    /// The next notification of `method` (the stream's suffixed method).
    pub async fn item(&mut self, method: &str, within: Duration) -> Option<Value> {
        let method = method.to_owned();
        self.find(within, move |f| {
            f.json()
                .is_some_and(|v| v.get("id").is_none() && v["method"] == method.as_str())
        })
        .await
        .map(|f| f.json().unwrap()["params"].clone())
    }

    /// Opens the stream `method` from its first unacknowledged item and reads `n` items
    /// of it, in arrival order.
    pub async fn unacked(&mut self, method: &str, n: usize) -> Vec<Value> {
        self.request(method, json!({"unackedFrom": "0"}));
        self.items(method, n).await
    }

    /// `n` items of `method`, in arrival order.
    pub async fn items(&mut self, method: &str, n: usize) -> Vec<Value> {
        let mut out = Vec::new();
        for i in 0..n {
            let item = self.item(method, WAIT).await;
            out.push(item.unwrap_or_else(|| panic!("item {i} of {method} missing")));
        }
        out
    }

    /// Whether the server closed the connection within `within`.
    pub async fn closed(&mut self, within: Duration) -> bool {
        self.find(within, |f| *f == Frame::Closed).await.is_some()
            || self.pending.contains(&Frame::Closed)
    }
}

/// A raw HTTPS request; returns the status and the whole response text.
pub async fn http_request(info: &NodeInfo, opts: &Opts, head: &str) -> (u16, String) {
    let mut tls = tls_connect(info, opts).await.unwrap();
    tls.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(WAIT, tls.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

/// A `sequenceId` (or any 64-bit field) as the server sends it: a decimal string.
pub fn u64_str(v: &Value) -> u64 {
    v.as_str()
        .unwrap_or_else(|| panic!("64-bit field not a string: {v}"))
        .parse()
        .unwrap()
}

/// Decodes a protojson `bytes` field.
pub fn b64(v: &Value) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(v.as_str().unwrap())
        .unwrap()
}
