//! One websocket connection to the clientrpc server.
//!
//! Two tasks per connection:
//! - the **reader** reads the socket without pause (brclient pushes stream items
//!   synchronously and stalls when nobody reads), hands responses to their callers by
//!   id and stream items to their stream's queue by method, and runs the keepalive:
//!   it queues a ping every `ping_interval` and drops the connection when no pong
//!   arrived `pong_timeout` later. tungstenite answers the server's pings while the
//!   socket is being read;
//! - the **writer** sends queued frames, in queue order.
//!
//! Requests take a permit of a per-connection semaphore of [`MAX_IN_FLIGHT`] permits
//! and hold it until their response arrives or the connection dies, even when the
//! caller stopped waiting: the server still counts them. Open streams hold one permit
//! while they are open. A stream the server ends (or refuses to open) ends alone: its
//! opener hears why and may reopen it; the connection and the other streams go on, as
//! in brclient's own client. Request ids and stream suffixes count up from 1 per
//! connection; suffixes are decimal (`ChatService.PMStream[1]`), the only form the
//! server's method regex accepts past 9.
//!
//! [`MAX_IN_FLIGHT`]: super::MAX_IN_FLIGHT

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt as _, StreamExt as _};
use serde::Serialize;
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::time::{Instant, MissedTickBehavior};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::http::{HeaderValue, header};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};

use super::config::{ClientRpcConfig, Endpoint};
use super::error::ClientRpcError;
use super::lock;
use super::proto::{ErrorObject, Incoming, Request};
use super::streams::{NotQueued, StreamSink};
use super::tls;
use crate::sleep_until_opt;

/// The websocket over TLS over TCP.
pub(crate) type Ws = WebSocketStream<TlsStream<TcpStream>>;

/// What a caller gets back for one request.
type Reply = Result<Value, ErrorObject>;

/// Opens the TCP connection, the TLS session and the websocket.
pub(crate) async fn connect(config: &ClientRpcConfig) -> Result<Ws, ClientRpcError> {
    let endpoint = Endpoint::parse(&config.url)?;
    let tls = tls::client_config(config)?;
    let server_name = rustls::pki_types::ServerName::try_from(endpoint.host.clone())
        .map_err(|e| ClientRpcError::Config(format!("host {:?}: {e}", endpoint.host)))?;
    let mut request = endpoint
        .url
        .as_str()
        .into_client_request()
        .map_err(ws_error)?;
    if let Some(auth) = &config.basic_auth {
        let token = base64::engine::general_purpose::STANDARD
            .encode(format!("{}:{}", auth.user, auth.pass));
        let value = HeaderValue::from_str(&format!("Basic {token}"))
            .map_err(|e| ClientRpcError::Config(format!("basic auth: {e}")))?;
        request.headers_mut().insert(header::AUTHORIZATION, value);
    }
    let ws_config = WebSocketConfig::default()
        .max_message_size(Some(config.max_message_size))
        .max_frame_size(Some(config.max_message_size));
    let attempt = async {
        let tcp = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
            .await
            .map_err(ClientRpcError::Connect)?;
        tcp.set_nodelay(true).map_err(ClientRpcError::Connect)?;
        let stream = TlsConnector::from(tls)
            .connect(server_name, tcp)
            .await
            .map_err(io_error)?;
        let (ws, _response) =
            tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config))
                .await
                .map_err(ws_error)?;
        Ok(ws)
    };
    tokio::time::timeout(config.connect_timeout, attempt)
        .await
        .unwrap_or(Err(ClientRpcError::Timeout))
}

/// TLS failures come wrapped in `io::Error`s; unwrap them so they read as TLS errors.
fn io_error(e: std::io::Error) -> ClientRpcError {
    let Some(tls) = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    else {
        return ClientRpcError::WebSocket(Box::new(e));
    };
    // Our verifier's refusal reads better on its own than wrapped by rustls.
    match tls::NotTrusted::within(tls) {
        Some(refusal) => ClientRpcError::Tls(Box::new(refusal.clone())),
        None => ClientRpcError::Tls(Box::new(tls.clone())),
    }
}

fn ws_error(e: tungstenite::Error) -> ClientRpcError {
    match e {
        tungstenite::Error::Http(response) => match response.status().as_u16() {
            status @ (401 | 403) => ClientRpcError::Auth { status },
            status => ClientRpcError::Http { status },
        },
        tungstenite::Error::Io(e) => io_error(e),
        other => ClientRpcError::WebSocket(Box::new(other)),
    }
}

/// Why [`Conn::call`] failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The connection closed before the request was queued: it never left, and may be
    /// sent on the next connection.
    NotSent,
    /// Sent (or possibly sent), then failed.
    Failed(ClientRpcError),
}

impl From<ClientRpcError> for CallError {
    fn from(e: ClientRpcError) -> Self {
        Self::Failed(e)
    }
}

/// A caller waiting for its response.
struct Pending {
    tx: oneshot::Sender<Reply>,
    _permit: OwnedSemaphorePermit,
}

/// An open stream: where its items go, and who hears when it ends.
struct OpenStream {
    sink: StreamSink,
    ended: oneshot::Sender<String>,
    _permit: OwnedSemaphorePermit,
}

#[derive(Default)]
struct State {
    /// Set once; nothing is registered after.
    closed: Option<String>,
    pending: HashMap<u64, Pending>,
    /// Suffixed method → stream.
    streams: HashMap<String, OpenStream>,
    /// Request id of each stream → its suffixed method.
    stream_ids: HashMap<u64, String>,
}

/// One live connection. Dropping the last handle does not close it: [`close`](Self::close) does,
/// and so does any read or write failure.
pub(crate) struct Conn {
    number: u64,
    out: mpsc::UnboundedSender<Message>,
    state: Mutex<State>,
    permits: Arc<Semaphore>,
    closed: watch::Sender<bool>,
    next_id: AtomicU64,
    next_suffix: AtomicU64,
    pongs: AtomicU64,
}

impl Conn {
    /// Takes over `ws` and starts its reader and writer tasks.
    pub(crate) fn spawn(ws: Ws, number: u64, config: &ClientRpcConfig) -> Arc<Self> {
        let (sink, stream) = ws.split();
        let (conn, out_rx) = Self::detached(number, config.in_flight());
        tokio::spawn(read_loop(
            conn.clone(),
            stream,
            config.ping_interval,
            config.pong_timeout,
        ));
        tokio::spawn(write_loop(conn.clone(), sink, out_rx));
        conn
    }

    /// A connection with no socket and no tasks: what it would send comes out of the
    /// receiver, what it receives goes in through [`dispatch`](Self::dispatch).
    pub(crate) fn detached(
        number: u64,
        in_flight: usize,
    ) -> (Arc<Self>, mpsc::UnboundedReceiver<Message>) {
        let (out, out_rx) = mpsc::unbounded_channel();
        let conn = Arc::new(Self {
            number,
            out,
            state: Mutex::new(State::default()),
            permits: Arc::new(Semaphore::new(in_flight)),
            closed: watch::channel(false).0,
            next_id: AtomicU64::new(1),
            next_suffix: AtomicU64::new(1),
            pongs: AtomicU64::new(0),
        });
        (conn, out_rx)
    }

    /// The request ids still waiting for a response and the open streams' suffixed
    /// methods, each sorted.
    #[cfg(any(fuzzing, test))]
    pub(crate) fn registered(&self) -> (Vec<u64>, Vec<String>) {
        let state = lock(&self.state);
        let mut pending: Vec<u64> = state.pending.keys().copied().collect();
        let mut streams: Vec<String> = state.streams.keys().cloned().collect();
        pending.sort_unstable();
        streams.sort_unstable();
        (pending, streams)
    }

    /// Which connection of the host this is (1 for the first).
    pub(crate) const fn number(&self) -> u64 {
        self.number
    }

    pub(crate) fn is_closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Why the connection closed, once it has.
    pub(crate) fn close_reason(&self) -> Option<String> {
        lock(&self.state).closed.clone()
    }

    /// Resolves once the connection is closed.
    pub(crate) async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        // The sender lives in `self`, so this cannot fail while we borrow it.
        let _ = rx.wait_for(|closed| *closed).await;
    }

    async fn permit(&self) -> Result<OwnedSemaphorePermit, CallError> {
        tokio::select! {
            permit = self.permits.clone().acquire_owned() => {
                permit.map_err(|_| CallError::NotSent)
            }
            () = self.closed() => Err(CallError::NotSent),
        }
    }

    fn encode<P: Serialize>(id: u64, method: &str, params: &P) -> Result<String, ClientRpcError> {
        serde_json::to_string(&Request {
            jsonrpc: "2.0",
            id,
            method,
            params,
        })
        .map_err(|e| ClientRpcError::Protocol(format!("encode {method}: {e}")))
    }

    /// Sends one request and waits for its response.
    pub(crate) async fn call<P: Serialize>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, CallError> {
        let permit = self.permit().await?;
        let id = self.next_id.fetch_add(1, Relaxed);
        let text = Self::encode(id, method, params)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut state = lock(&self.state);
            if state.closed.is_some() {
                return Err(CallError::NotSent);
            }
            state.pending.insert(
                id,
                Pending {
                    tx,
                    _permit: permit,
                },
            );
        }
        if self.out.send(Message::text(text)).is_err() {
            lock(&self.state).pending.remove(&id);
            return Err(CallError::NotSent);
        }
        match rx.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(error)) => Err(CallError::Failed(ClientRpcError::Rpc {
                method: method.to_owned(),
                code: error.code,
                message: error.message,
            })),
            Err(_) => Err(CallError::Failed(ClientRpcError::ConnectionLost)),
        }
    }

    /// Opens the stream `method` (unsuffixed) and routes its items to `sink`. No
    /// response comes while the stream lives; the receiver returned gets the reason
    /// when the server ends the stream (or refuses it), and is dropped when the
    /// connection closes.
    pub(crate) async fn open_stream<P: Serialize>(
        &self,
        method: &str,
        params: &P,
        sink: StreamSink,
    ) -> Result<oneshot::Receiver<String>, CallError> {
        let permit = self.permit().await?;
        let id = self.next_id.fetch_add(1, Relaxed);
        let suffixed = format!("{method}[{}]", self.next_suffix.fetch_add(1, Relaxed));
        let text = Self::encode(id, &suffixed, params)?;
        let (ended, ended_rx) = oneshot::channel();
        {
            let mut state = lock(&self.state);
            if state.closed.is_some() {
                return Err(CallError::NotSent);
            }
            state.stream_ids.insert(id, suffixed.clone());
            state.streams.insert(
                suffixed,
                OpenStream {
                    sink,
                    ended,
                    _permit: permit,
                },
            );
        }
        self.out
            .send(Message::text(text))
            .map_err(|_| CallError::NotSent)?;
        Ok(ended_rx)
    }

    /// Closes the connection: every caller waiting for an answer gets
    /// [`ClientRpcError::ConnectionLost`]
    /// and both tasks stop.
    pub(crate) fn close(&self, why: impl Into<String>) {
        let (pending, streams) = {
            let mut state = lock(&self.state);
            if state.closed.is_some() {
                return;
            }
            let why = why.into();
            tracing::debug!(conn = self.number, %why, "clientrpc connection closed");
            state.closed = Some(why);
            state.stream_ids.clear();
            (
                std::mem::take(&mut state.pending),
                std::mem::take(&mut state.streams),
            )
        };
        drop(pending);
        drop(streams);
        self.permits.close();
        self.closed.send_replace(true);
    }

    /// Handles one message from the server.
    pub(crate) fn dispatch(&self, data: &[u8]) {
        // The server's messages are one JSON object and a newline; only the first value
        // counts, as on the server side.
        if !crate::proto::starts_object(data) {
            tracing::debug!(conn = self.number, "message not an object");
            return;
        }
        let incoming = match serde_json::Deserializer::from_slice(data)
            .into_iter::<Incoming>()
            .next()
        {
            Some(Ok(incoming)) => incoming,
            Some(Err(e)) => {
                tracing::debug!(conn = self.number, error = %e, "undecodable message");
                return;
            }
            None => return,
        };
        let id = incoming.id.filter(|id| !id.is_null());
        match (id, incoming.method) {
            (None, Some(method)) => {
                let mut state = lock(&self.state);
                let offered = match state.streams.get(&method) {
                    Some(stream) => {
                        let params = incoming.params.unwrap_or(Value::Null);
                        stream.sink.offer((params, Instant::now()))
                    }
                    None => {
                        tracing::debug!(conn = self.number, %method, "item of no stream");
                        Ok(())
                    }
                };
                if offered == Err(NotQueued::Full) {
                    // The handler is behind: the stream ends here (its later items are
                    // of no stream) and its opener reopens it; brclient replays
                    // everything not acknowledged.
                    state.stream_ids.retain(|_, m| *m != method);
                    let stream = state.streams.remove(&method);
                    drop(state);
                    tracing::warn!(conn = self.number, %method, "stream queue full; ending the stream");
                    if let Some(stream) = stream {
                        let _ = stream.ended.send("too many items queued".to_owned());
                    }
                }
            }
            (Some(id), _) => {
                let Some(id) = id_number(&id) else {
                    tracing::debug!(conn = self.number, %id, "response with a foreign id");
                    return;
                };
                let mut state = lock(&self.state);
                if let Some(pending) = state.pending.remove(&id) {
                    let reply = match (incoming.error, incoming.result) {
                        (Some(error), _) => Err(error),
                        (None, result) => {
                            Ok(result.unwrap_or_else(|| Value::Object(Default::default())))
                        }
                    };
                    let _ = pending.tx.send(reply);
                } else if let Some(method) = state.stream_ids.remove(&id) {
                    // A stream ended (or was refused); the server ends them only on
                    // errors. Only that stream ends: its opener reopens it.
                    let stream = state.streams.remove(&method);
                    drop(state);
                    let why = incoming.error.map_or_else(
                        || "ended".to_owned(),
                        |e| format!("{} (code {})", e.message, e.code),
                    );
                    tracing::warn!(conn = self.number, %method, %why, "clientrpc stream ended");
                    if let Some(stream) = stream {
                        let _ = stream.ended.send(why);
                    }
                } else {
                    tracing::debug!(conn = self.number, id, "response to no request");
                }
            }
            (None, None) => tracing::debug!(conn = self.number, "message without id or method"),
        }
    }
}

/// The request id as we sent it (a number); tolerates a number re-encoded as a float.
fn id_number(id: &Value) -> Option<u64> {
    id.as_u64().or_else(|| {
        let f = id.as_f64()?;
        (f >= 0.0 && f.fract() == 0.0 && f < 9_007_199_254_740_992.0).then_some(f as u64)
    })
}

/// Resolves once the flag is set (or its sender is gone), holding no borrow.
pub(crate) async fn until_true(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|set| *set).await;
}

async fn read_loop(
    conn: Arc<Conn>,
    mut stream: SplitStream<Ws>,
    ping_interval: Duration,
    pong_timeout: Duration,
) {
    let mut closed = conn.closed.subscribe();
    let mut ping = tokio::time::interval_at(Instant::now() + ping_interval, ping_interval);
    ping.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut pings_sent: u64 = 0;
    // While a ping is unanswered: its deadline and the pong count when it was sent.
    let mut awaiting: Option<(Instant, u64)> = None;
    let why = loop {
        tokio::select! {
            () = until_true(&mut closed) => return,
            message = stream.next() => match message {
                Some(Ok(Message::Text(text))) => conn.dispatch(text.as_bytes()),
                Some(Ok(Message::Binary(data))) => conn.dispatch(&data),
                // Any pong proves the peer alive; Go pads pong payloads to 16 bytes, so
                // they are not compared with the ping.
                Some(Ok(Message::Pong(_))) => {
                    conn.pongs.fetch_add(1, Relaxed);
                }
                Some(Ok(Message::Ping(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(frame))) => {
                    break format!("closed by the server: {frame:?}");
                }
                Some(Err(e)) => break format!("read: {e}"),
                None => break "end of stream".to_owned(),
            },
            _ = ping.tick() => {
                if awaiting.is_none() {
                    pings_sent += 1;
                    // 16 bytes, the size Go pings with and pads pongs to.
                    let mut payload = [0u8; 16];
                    payload[..8].copy_from_slice(&conn.number.to_be_bytes());
                    payload[8..].copy_from_slice(&pings_sent.to_be_bytes());
                    if conn.out.send(Message::Ping(payload.to_vec().into())).is_err() {
                        break "writer gone".to_owned();
                    }
                    awaiting = Some((Instant::now() + pong_timeout, conn.pongs.load(Relaxed)));
                }
            },
            () = sleep_until_opt(awaiting.map(|(deadline, _)| deadline)) => {
                let Some((_, seen)) = awaiting.take() else { continue };
                if conn.pongs.load(Relaxed) == seen {
                    break format!("no pong within {pong_timeout:?}");
                }
            },
        }
        // A pong that came in ends the wait early, so the next ping is not skipped.
        if let Some((_, seen)) = awaiting
            && conn.pongs.load(Relaxed) > seen
        {
            awaiting = None;
        }
    };
    conn.close(why);
}

async fn write_loop(
    conn: Arc<Conn>,
    mut sink: SplitSink<Ws, Message>,
    mut out: mpsc::UnboundedReceiver<Message>,
) {
    let mut closed = conn.closed.subscribe();
    loop {
        let message = tokio::select! {
            biased;
            () = until_true(&mut closed) => break,
            message = out.recv() => match message {
                Some(message) => message,
                None => break,
            },
        };
        let sent = tokio::select! {
            sent = sink.send(message) => sent,
            () = until_true(&mut closed) => break,
        };
        if let Err(e) = sent {
            conn.close(format!("write: {e}"));
            break;
        }
    }
    // Best effort: a close frame, then the socket goes with the halves.
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
}
