//! A node's clientrpc listener: TLS, the HTTP request head, basic auth, the `/ws`
//! upgrade, and the WebSocket connection loop.
//!
//! The HTTP side follows brclient's Go server: basic auth (when enforced) is checked
//! first, on every path; `/ws` upgrades with gorilla's checks and error statuses;
//! every other path answers 404 (brclient would run its POST transport there).
//!
//! The connection loop follows `wspeer.go` and `peer.go`: one reader, which takes an
//! in-flight slot before dispatching a request and stops reading while none is free;
//! pings of 16 random bytes after each [`DevnetConfig::ping_interval`] of quiet, the
//! connection dropped when no matching pong comes within
//! [`DevnetConfig::pong_timeout`]; client pings answered with their payload cut or
//! zero-padded to 16 bytes. An unsolicited pong blocks the reader until the next ping
//! and then fails it, as Go's unbuffered pong channel does.
//!
//! [`DevnetConfig::ping_interval`]: super::DevnetConfig::ping_interval
//! [`DevnetConfig::pong_timeout`]: super::DevnetConfig::pong_timeout

use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::stream::SplitSink;
use futures_util::{SinkExt as _, StreamExt as _};
use rustls::RootCertStore;
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex as AsyncMutex, Semaphore, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep_until, timeout};
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use super::certs::NodeCerts;
use super::node::{NodeCtl, ReceivedRequest};
use super::rpc::{self, ConnCtx, Inbound, MAX_IN_FLIGHT};
use super::{BasicAuth, DevnetError, Net, random_bytes};

/// The most bytes of HTTP request head read before giving up.
const MAX_HEAD: usize = 64 * 1024;

/// The bytes of a ping payload (Go `pingPayloadSize`).
const PING_LEN: usize = 16;

/// What a node's listener serves with.
pub(crate) struct ServerSettings {
    pub(crate) tls: TlsAcceptor,
    pub(crate) auth: Option<BasicAuth>,
}

/// The rustls server configuration: the node's certificate, TLS 1.2 and 1.3 with
/// ring, and a required client certificate verified against `rpc-ca.cert`.
pub(crate) fn tls_acceptor(
    certs: &NodeCerts,
    client_auth: bool,
) -> Result<TlsAcceptor, DevnetError> {
    let tls_err = |e: rustls::Error| DevnetError::Tls(e.into());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(tls_err)?;
    let builder = if client_auth {
        let mut roots = RootCertStore::empty();
        roots.add(certs.ca_cert.clone()).map_err(tls_err)?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| DevnetError::Tls(e.into()))?;
        builder.with_client_cert_verifier(verifier)
    } else {
        builder.with_no_client_auth()
    };
    let config = builder
        .with_single_cert(
            vec![certs.server_cert.clone()],
            certs.server_key.clone_key(),
        )
        .map_err(tls_err)?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Accepts connections until the task is aborted or the devnet shuts down. Aborting
/// drops every connection with it.
pub(crate) async fn run_listener(
    net: Arc<Net>,
    node: usize,
    listener: TcpListener,
    settings: Arc<ServerSettings>,
) {
    let mut conns = JoinSet::new();
    let down = net.shutdown_signal();
    tokio::pin!(down);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((tcp, _)) = accepted {
                    net.lock().nodes[node].accepts += 1;
                    conns.spawn(serve_conn(net.clone(), node, tcp, settings.clone()));
                }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = &mut down => break,
        }
    }
}

async fn serve_conn(net: Arc<Net>, node: usize, tcp: TcpStream, settings: Arc<ServerSettings>) {
    let _ = tcp.set_nodelay(true);
    let limit = net.cfg.handshake_timeout;
    let Ok(Ok(mut tls)) = timeout(limit, settings.tls.accept(tcp)).await else {
        return;
    };
    let Ok(Ok((head, rest))) = timeout(limit, read_head(&mut tls)).await else {
        return;
    };
    match route(&head, settings.auth.as_ref()) {
        Route::Respond(resp) => {
            let _ = tls.write_all(resp.as_bytes()).await;
            let _ = tls.shutdown().await;
        }
        Route::Upgrade(accept) => {
            let resp = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                 Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
            );
            if tls.write_all(resp.as_bytes()).await.is_err() || tls.flush().await.is_err() {
                return;
            }
            // gorilla sets no read limit.
            let config = WebSocketConfig::default()
                .max_message_size(None)
                .max_frame_size(None);
            let ws =
                WebSocketStream::from_partially_read(tls, rest, Role::Server, Some(config)).await;
            drive(net, node, ws).await;
        }
    }
}

/// Reads up to the end of the request head; returns the head and any bytes after it.
async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(pos + 4);
            return Ok((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too large"));
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

enum Route {
    /// A complete HTTP response to write before closing.
    Respond(String),
    /// Upgrade, with this `Sec-WebSocket-Accept`.
    Upgrade(String),
}

/// Go's `http.Error`: the text plus a newline, as text/plain.
fn http_error(status: u16, reason: &str, extra: &[(&str, &str)], body: &str) -> Route {
    let mut resp = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         X-Content-Type-Options: nosniff\r\n"
    );
    for (k, v) in extra {
        resp.push_str(&format!("{k}: {v}\r\n"));
    }
    resp.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    ));
    Route::Respond(resp)
}

/// gorilla's `returnError`: the status text as the body, with `Sec-Websocket-Version`.
fn ws_error(status: u16, reason: &str) -> Route {
    http_error(status, reason, &[("Sec-Websocket-Version", "13")], reason)
}

fn route(head: &[u8], auth: Option<&BasicAuth>) -> Route {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return http_error(400, "Bad Request", &[], "400 Bad Request"),
    }
    let values = |name: &str| -> Vec<&str> {
        req.headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .filter_map(|h| std::str::from_utf8(h.value).ok())
            .collect()
    };
    if let Some(auth) = auth {
        if auth.user.is_empty() || auth.pass.is_empty() {
            return http_error(401, "Unauthorized", &[], "Forbidden");
        }
        match values("Authorization").first().and_then(|h| parse_basic(h)) {
            None => {
                let realm = [("Www-Authenticate", "Basic realm=\"Restricted\"")];
                return http_error(401, "Unauthorized", &realm, "Unauthorized");
            }
            Some((user, pass)) if user != auth.user || pass != auth.pass => {
                return http_error(403, "Forbidden", &[], "Forbidden");
            }
            Some(_) => {}
        }
    }
    let path = req.path.unwrap_or("").split('?').next().unwrap_or("");
    if path != "/ws" {
        return http_error(404, "Not Found", &[], "404 page not found");
    }
    let has_token = |name: &str, token: &str| {
        values(name)
            .iter()
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    if !has_token("Connection", "upgrade") || !has_token("Upgrade", "websocket") {
        return ws_error(400, "Bad Request");
    }
    if req.method != Some("GET") {
        return ws_error(405, "Method Not Allowed");
    }
    if !has_token("Sec-Websocket-Version", "13") {
        return ws_error(400, "Bad Request");
    }
    let host = values("Host").first().copied().unwrap_or("");
    if let Some(origin) = values("Origin").first()
        && !origin_allowed(origin, host)
    {
        return ws_error(403, "Forbidden");
    }
    let key = values("Sec-Websocket-Key").first().copied().unwrap_or("");
    if STANDARD.decode(key).map(|k| k.len()) != Ok(16) {
        return ws_error(400, "Bad Request");
    }
    Route::Upgrade(derive_accept_key(key.as_bytes()))
}

/// Go's `Request.BasicAuth`: `Basic base64(user:pass)` with strict padding.
fn parse_basic(header: &str) -> Option<(String, String)> {
    let prefix = header.get(..6)?;
    if !prefix.eq_ignore_ascii_case("basic ") {
        return None;
    }
    let decoded = STANDARD.decode(&header[6..]).ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (u, p) = text.split_once(':')?;
    Some((u.to_owned(), p.to_owned()))
}

/// brclient's `CheckOrigin`, including its inverted `SplitHostPort` test: a host with
/// a port is compared with its port, one without is compared as "".
fn origin_allowed(origin: &str, host: &str) -> bool {
    let (scheme, rest) = origin.split_once("://").unwrap_or(("", origin));
    if scheme.eq_ignore_ascii_case("file") {
        return true;
    }
    let (origin_host, path) = if scheme.is_empty() {
        ("", rest)
    } else {
        rest.split_once('/').map_or((rest, ""), |(h, p)| (h, p))
    };
    if path == "null" || (scheme.is_empty() && rest == "null") {
        return true;
    }
    let quirk = |h: &str| {
        if has_port(h) {
            h.to_owned()
        } else {
            String::new()
        }
    };
    quirk(origin_host).eq_ignore_ascii_case(&quirk(host))
}

fn has_port(h: &str) -> bool {
    if let Some(rest) = h.strip_prefix('[') {
        return rest.contains("]:");
    }
    h.matches(':').count() == 1
}

type Sink<S> = Arc<AsyncMutex<SplitSink<WebSocketStream<S>, Message>>>;

/// The server's keepalive state.
enum Ping {
    /// Next ping at this time; `stale` holds an unsolicited pong the reader is stuck on.
    Idle {
        at: Instant,
        stale: Option<[u8; PING_LEN]>,
    },
    /// Waiting for the pong to this payload until `deadline`.
    Waiting {
        payload: [u8; PING_LEN],
        deadline: Instant,
    },
}

fn pad16(data: &[u8]) -> [u8; PING_LEN] {
    let mut p = [0u8; PING_LEN];
    let n = data.len().min(PING_LEN);
    p[..n].copy_from_slice(&data[..n]);
    p
}

impl Ping {
    fn deadline(&self) -> Instant {
        match self {
            Self::Idle { at, .. } => *at,
            Self::Waiting { deadline, .. } => *deadline,
        }
    }

    fn reader_blocked(&self) -> bool {
        matches!(self, Self::Idle { stale: Some(_), .. })
    }

    /// The timer fired: send a ping, or fail on a missing or wrong pong.
    async fn fire<S>(&mut self, net: &Net, sink: &Sink<S>) -> bool
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        match *self {
            Self::Waiting { .. } => false,
            Self::Idle { stale, .. } => {
                let payload: [u8; PING_LEN] = random_bytes();
                let sent = sink
                    .lock()
                    .await
                    .send(Message::Ping(payload.to_vec().into()))
                    .await;
                if sent.is_err() {
                    return false;
                }
                if let Some(pong) = stale {
                    // The stuck pong is handed to this ping's waiter.
                    if pong != payload {
                        return false;
                    }
                    *self = Self::Idle {
                        at: Instant::now() + net.cfg.ping_interval,
                        stale: None,
                    };
                    return true;
                }
                *self = Self::Waiting {
                    payload,
                    deadline: Instant::now() + net.cfg.pong_timeout,
                };
                true
            }
        }
    }

    /// A pong arrived.
    fn pong(&mut self, net: &Net, data: &[u8]) -> bool {
        let got = pad16(data);
        match *self {
            Self::Waiting { payload, .. } => {
                if got != payload {
                    return false;
                }
                *self = Self::Idle {
                    at: Instant::now() + net.cfg.ping_interval,
                    stale: None,
                };
                true
            }
            Self::Idle { at, .. } => {
                *self = Self::Idle {
                    at,
                    stale: Some(got),
                };
                true
            }
        }
    }
}

/// Unregisters a connection however its task ends (aborts included).
struct ConnGuard {
    net: Arc<Net>,
    node: usize,
    id: u64,
    closed: watch::Sender<bool>,
    writer: tokio::task::JoinHandle<()>,
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        self.closed.send_replace(true);
        self.writer.abort();
        let mut st = self.net.lock();
        if let Some(n) = st.nodes.get_mut(self.node) {
            n.subs.retain(|s| s.conn != self.id);
            n.conns = n.conns.saturating_sub(1);
        }
    }
}

/// Waits until the node is not frozen; `false` if its connections are to drop.
async fn wait_thawed(ctl: &mut watch::Receiver<NodeCtl>, generation: u64) -> bool {
    ctl.wait_for(|c| !c.frozen || c.generation != generation)
        .await
        .is_ok_and(|c| c.generation == generation)
}

async fn drive<S>(net: Arc<Net>, node: usize, ws: WebSocketStream<S>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sink, mut stream) = ws.split();
    let sink: Sink<S> = Arc::new(AsyncMutex::new(sink));
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<String>();
    let (closed_tx, closed_rx) = watch::channel(false);
    let id = net.next_conn_id();
    let mut ctl = {
        let mut st = net.lock();
        let n = &mut st.nodes[node];
        n.conns += 1;
        n.ctl.subscribe()
    };
    let generation = ctl.borrow().generation;

    let writer = {
        let sink = sink.clone();
        let mut ctl = ctl.clone();
        tokio::spawn(async move {
            while let Some(line) = out_rx.recv().await {
                if !wait_thawed(&mut ctl, generation).await {
                    break;
                }
                if sink
                    .lock()
                    .await
                    .send(Message::Binary(line.into()))
                    .await
                    .is_err()
                {
                    break;
                }
            }
        })
    };
    let _guard = ConnGuard {
        net: net.clone(),
        node,
        id,
        closed: closed_tx,
        writer,
    };
    let conn = ConnCtx {
        id,
        out: out_tx,
        closed: closed_rx,
    };
    let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
    let mut ping = Ping::Idle {
        at: Instant::now() + net.cfg.ping_interval,
        stale: None,
    };
    let down = net.shutdown_signal();
    tokio::pin!(down);

    'conn: loop {
        if ctl.borrow().frozen {
            if !wait_thawed(&mut ctl, generation).await {
                break;
            }
            ping = Ping::Idle {
                at: Instant::now() + net.cfg.ping_interval,
                stale: None,
            };
            continue;
        }
        let blocked = ping.reader_blocked();
        let data = tokio::select! {
            changed = ctl.changed() => {
                if changed.is_err() || ctl.borrow().generation != generation {
                    break;
                }
                continue;
            }
            () = &mut down => break,
            () = sleep_until(ping.deadline()) => {
                if !ping.fire(&net, &sink).await {
                    break;
                }
                continue;
            }
            msg = stream.next(), if !blocked => match msg {
                Some(Ok(Message::Text(t))) => t.as_bytes().to_vec(),
                Some(Ok(Message::Binary(b))) => b.to_vec(),
                Some(Ok(Message::Ping(p))) => {
                    // Sent before the next read, this replaces tungstenite's echo.
                    let pong = Message::Pong(pad16(&p).to_vec().into());
                    if sink.lock().await.send(pong).await.is_err() {
                        break;
                    }
                    continue;
                }
                Some(Ok(Message::Pong(p))) => {
                    if !ping.pong(&net, &p) {
                        break;
                    }
                    continue;
                }
                Some(Ok(Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_)) | Err(_)) | None => break,
            },
        };

        let inbound = rpc::classify(&data);
        let (method, req_id) = match &inbound {
            Inbound::Close => (None, None),
            Inbound::Ignore { method, id } => (method.clone(), id.clone()),
            Inbound::Request(r) => (Some(r.method.clone()), Some(r.id.clone())),
        };
        net.lock().nodes[node].record(ReceivedRequest {
            connection: id,
            method,
            id: req_id,
            raw: String::from_utf8_lossy(&data).into_owned(),
        });
        let req = match inbound {
            Inbound::Close => break,
            Inbound::Ignore { .. } => continue,
            Inbound::Request(r) => r,
        };
        // Take an in-flight slot; while none is free, nothing is read (pongs
        // included), but pings still go out and time out.
        let permit = loop {
            tokio::select! {
                permit = slots.clone().acquire_owned() => match permit {
                    Ok(p) => break p,
                    Err(_) => break 'conn,
                },
                changed = ctl.changed() => {
                    if changed.is_err() || ctl.borrow().generation != generation {
                        break 'conn;
                    }
                }
                () = &mut down => break 'conn,
                () = sleep_until(ping.deadline()) => {
                    if !ping.fire(&net, &sink).await {
                        break 'conn;
                    }
                }
            }
        };
        let in_flight = MAX_IN_FLIGHT - slots.available_permits();
        {
            let mut st = net.lock();
            let peak = &mut st.nodes[node].peak_in_flight;
            *peak = (*peak).max(in_flight);
        }
        net.spawn(rpc::handle_request(
            net.clone(),
            node,
            conn.clone(),
            req,
            permit,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(lines: &[&str]) -> Vec<u8> {
        let mut s = lines.join("\r\n");
        s.push_str("\r\n\r\n");
        s.into_bytes()
    }

    const UPGRADE: &[&str] = &[
        "GET /ws HTTP/1.1",
        "Host: 127.0.0.1:7676",
        "Connection: Upgrade",
        "Upgrade: websocket",
        "Sec-WebSocket-Version: 13",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
    ];

    fn status(r: &Route) -> u16 {
        match r {
            Route::Respond(s) => s[9..12].parse().unwrap(),
            Route::Upgrade(_) => 101,
        }
    }

    #[test]
    fn upgrade_and_its_refusals() {
        let Route::Upgrade(accept) = route(&head(UPGRADE), None) else {
            panic!("expected an upgrade");
        };
        assert_eq!(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
        let mut other = UPGRADE.to_vec();
        other[0] = "GET / HTTP/1.1";
        assert_eq!(status(&route(&head(&other), None)), 404);
        let mut post = UPGRADE.to_vec();
        post[0] = "POST /ws HTTP/1.1";
        assert_eq!(status(&route(&head(&post), None)), 405);
        assert_eq!(status(&route(&head(&UPGRADE[..4]), None)), 400);
        let mut bad_origin = UPGRADE.to_vec();
        bad_origin.push("Origin: https://evil.example:443");
        assert_eq!(status(&route(&head(&bad_origin), None)), 403);
        let mut same_origin = UPGRADE.to_vec();
        same_origin.push("Origin: https://127.0.0.1:7676");
        assert_eq!(status(&route(&head(&same_origin), None)), 101);
    }

    #[test]
    fn basic_auth_statuses() {
        let auth = BasicAuth {
            user: "u".into(),
            pass: "p".into(),
        };
        let r = route(&head(UPGRADE), Some(&auth));
        assert_eq!(status(&r), 401);
        let Route::Respond(text) = r else {
            unreachable!()
        };
        assert!(text.contains("Www-Authenticate: Basic realm=\"Restricted\""));
        let mut wrong = UPGRADE.to_vec();
        let bad = format!("Authorization: Basic {}", STANDARD.encode("u:x"));
        wrong.push(&bad);
        assert_eq!(status(&route(&head(&wrong), Some(&auth))), 403);
        let mut right = UPGRADE.to_vec();
        let good = format!("Authorization: basic {}", STANDARD.encode("u:p"));
        right.push(&good);
        assert_eq!(status(&route(&head(&right), Some(&auth))), 101);
        // Auth is checked before routing.
        right[0] = "GET /nope HTTP/1.1";
        assert_eq!(status(&route(&head(&right), Some(&auth))), 404);
        wrong[0] = "GET /nope HTTP/1.1";
        assert_eq!(status(&route(&head(&wrong), Some(&auth))), 403);
    }

    #[test]
    fn pong_padding() {
        assert_eq!(pad16(b"abc"), *b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(pad16(&[7; 20]), [7; 16]);
    }
}
