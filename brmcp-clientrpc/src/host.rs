//! [`ClientRpcHost`]: the Bison Relay host backed by a running brclient or brclientd.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use prost_reflect::ReflectMessage;
use serde::{Deserialize as _, Serialize};
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::config::ClientRpcConfig;
use super::conn::{self, CallError, Conn, until_true};
use super::error::ClientRpcError;
use super::items::{KxCompleted, ReceivedPm, ReceivedPost, ReceivedTip, TipProgressEvent};
use super::lock;
use super::proto::{
    self, AckRequest, AckResponse, KxStreamRequest, MediateKxRequest, MediateKxResponse, PmRequest,
    PmResponse, PmStreamRequest, PostsStreamRequest, PublicIdentity, PublicIdentityReq,
    RmPrivateMessage, SubscribeToPostsRequest, SubscribeToPostsResponse, TipProgressRequest,
    TipStreamRequest, TipUserRequest, TipUserResponse, Unknown, VersionRequest, VersionResponse,
    method,
};
use super::streams::{
    AckWindow, Delivery, StreamEntry, StreamKind, StreamQueue, StreamRuntime, StreamSink,
    stream_queue,
};
use crate::sleep_until_opt;
use brmcp_adapters::BoxError;
use brmcp_adapters::PeerId;
use brmcp_adapters::PmSender;
use brmcp_adapters::protocol::ATOMS_PER_DCR;

mod handlers;
pub(crate) mod run;

use handlers::{DynKx, DynPm, DynPost, DynResult, DynTip, IdentityCheck};
pub use handlers::{KxHandler, PmHandler, PostHandler, Streams, TipHandler, TipResultHandler};
use run::{Handler, consume, supervise};

/// TipProgress events kept for [`ClientRpcHost::subscribe_tip_progress`] receivers
/// that fall behind; older ones are skipped for them (they see a lag error).
const TIP_PROGRESS_BROADCAST: usize = 64;

/// Times [`ClientRpcHost::pm`] sends a PM again after its connection died with the PM
/// in flight: 2. Each send waits for a connection within the request timeout, so a
/// client that is down for good fails the PM after three of them; one kill of the
/// client or of the socket costs one resend.
pub const PM_RESENDS: u32 = 2;

/// How a tip ended, as far as the TipProgress stream told within the tip timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TipOutcome {
    /// Paid (`completed`).
    Paid {
        /// Invoice requests it took.
        attempts: i32,
    },
    /// Given up by brclient (terminal event, not completed).
    Failed {
        /// Invoice requests made.
        attempts: i32,
        /// brclient's error text.
        error: String,
    },
    /// No terminal event in time, or the connection failed after `TipUser` may have
    /// reached the server: the tip may still be paid (brclient keeps retrying).
    Unconfirmed,
}

/// What the host's connection is doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostStatus {
    /// A connection is up.
    pub connected: bool,
    /// Connections made so far.
    pub connects: u64,
    /// Why the last connection attempt failed or the last connection ended.
    pub last_error: Option<String>,
    /// The last stream the server ended or refused, and why (the stream is reopened
    /// with backoff; the connection stays up).
    pub last_stream_error: Option<String>,
}

/// A tip waiting for its terminal TipProgress event.
struct TipWaiter {
    id: u64,
    payee: PeerId,
    matoms: i64,
    tx: oneshot::Sender<TipProgressEvent>,
}

struct Inner {
    config: ClientRpcConfig,
    current: watch::Sender<Option<Arc<Conn>>>,
    shutdown: watch::Sender<bool>,
    started: AtomicBool,
    tip_progress: AtomicBool,
    status: Mutex<HostStatus>,
    user_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    waiters: Mutex<Vec<TipWaiter>>,
    next_waiter: AtomicU64,
    progress: broadcast::Sender<TipProgressEvent>,
    unclaimed: broadcast::Sender<TipProgressEvent>,
    /// Each consumed stream's window and the count of its items not yet taken from
    /// its queue, for [`ClientRpcHost::flush_acks`].
    consumed: Mutex<Vec<(Arc<StreamRuntime>, Arc<std::sync::atomic::AtomicUsize>)>>,
    /// Bumped whenever a stream item is recorded or acknowledged.
    stream_moved: watch::Sender<u64>,
}

/// The Bison Relay host backed by brclient or brclientd's clientrpc: sends PMs
/// ([`PmSender`]), delivers the PMs and tips it receives to handlers, and pays tips.
///
/// Cheap to clone; every clone is the same host. [`connect`](Self::connect) or
/// [`spawn`](Self::spawn) start it; it then keeps one connection up, reconnecting with
/// backoff and reopening its streams, until [`close`](Self::close).
///
/// ```no_run
/// use brmcp_clientrpc::{BotConfig, ClientRpcConfig, ClientRpcHost, Streams};
/// use brmcp_adapters::{Router, RouterConfig};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let bot = BotConfig::load("brmcp-serve.conf")?;
/// let host = ClientRpcHost::new(ClientRpcConfig::from_bot_config(&bot))?;
/// let router = Router::new(host.clone(), RouterConfig::server());
/// host.connect(Streams::new().pms(router.clone()))
///     .await?;
/// # Ok(()) }
/// # fn main() { let _ = run; }
/// ```
#[derive(Clone)]
pub struct ClientRpcHost {
    inner: Arc<Inner>,
}

impl fmt::Debug for ClientRpcHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientRpcHost")
            .field("url", &self.inner.config.url)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

impl ClientRpcHost {
    /// A host for `config`, not yet connected. The URL and the certificates and key are
    /// checked now (and read again at every connection attempt).
    ///
    /// # Errors
    /// [`ClientRpcError::Config`], [`ClientRpcError::Io`], [`ClientRpcError::Pem`] or
    /// [`ClientRpcError::Tls`] for an unusable config.
    pub fn new(config: ClientRpcConfig) -> Result<Self, ClientRpcError> {
        super::config::Endpoint::parse(&config.url)?;
        super::tls::client_config(&config)?;
        Ok(Self {
            inner: Arc::new(Inner {
                config,
                current: watch::channel(None).0,
                shutdown: watch::channel(false).0,
                started: AtomicBool::new(false),
                tip_progress: AtomicBool::new(false),
                status: Mutex::new(HostStatus::default()),
                user_locks: Mutex::new(HashMap::new()),
                waiters: Mutex::new(Vec::new()),
                next_waiter: AtomicU64::new(1),
                progress: broadcast::channel(TIP_PROGRESS_BROADCAST).0,
                unclaimed: broadcast::channel(TIP_PROGRESS_BROADCAST).0,
                consumed: Mutex::new(Vec::new()),
                stream_moved: watch::channel(0).0,
            }),
        })
    }

    /// Connects, opens `streams`, and keeps the connection up from then on.
    ///
    /// # Errors
    /// The first connection attempt's error (bad certificate, refused basic auth,
    /// nothing listening, a refused identity ([`ClientRpcError::Identity`]), ...): the
    /// host is then not started and `connect` may be called again.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn connect(&self, streams: Streams) -> Result<(), ClientRpcError> {
        let (tx, rx) = oneshot::channel();
        self.start(streams, Some(tx)).await?;
        match rx.await {
            Ok(result) => result,
            Err(_) => Err(ClientRpcError::Closed),
        }
    }

    /// Starts the host in the background: it connects, retrying with backoff until
    /// it succeeds, and then keeps the connection up. Requests wait for the connection
    /// (within the request timeout); [`status`](Self::status) tells how it goes.
    ///
    /// # Errors
    /// [`ClientRpcError::Config`] when the host was started already.
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub async fn spawn(&self, streams: Streams) -> Result<(), ClientRpcError> {
        self.start(streams, None).await
    }

    async fn start(
        &self,
        streams: Streams,
        first: Option<oneshot::Sender<Result<(), ClientRpcError>>>,
    ) -> Result<(), ClientRpcError> {
        if self.inner.started.swap(true, Relaxed) {
            return Err(ClientRpcError::Config("host already started".into()));
        }
        let result = self.start_tasks(streams, first).await;
        if result.is_err() {
            self.inner.started.store(false, Relaxed);
        }
        result
    }

    async fn start_tasks(
        &self,
        streams: Streams,
        first: Option<oneshot::Sender<Result<(), ClientRpcError>>>,
    ) -> Result<(), ClientRpcError> {
        let Streams {
            pm,
            tips,
            results,
            kx,
            posts,
            no_tip_progress,
            identity,
        } = streams;
        let mut consumers: Vec<(StreamKind, Handler)> = Vec::new();
        if let Some(pm) = pm {
            consumers.push((StreamKind::Pm, Handler::Pm(pm)));
        }
        if !no_tip_progress {
            consumers.push((StreamKind::TipProgress, Handler::Progress(results)));
        }
        if let Some(tips) = tips {
            consumers.push((StreamKind::TipReceived, Handler::Tip(tips)));
        }
        if let Some(kx) = kx {
            consumers.push((StreamKind::Kx, Handler::Kx(kx)));
        }
        if let Some(posts) = posts {
            consumers.push((StreamKind::Posts, Handler::Post(posts)));
        }
        self.inner.tip_progress.store(!no_tip_progress, Relaxed);
        let mut runtimes = Vec::new();
        for (kind, handler) in consumers {
            let (tx, rx) = stream_queue();
            let runtime = Arc::new(StreamRuntime {
                kind,
                window: Mutex::new(AckWindow::default()),
            });
            lock(&self.inner.consumed).push((runtime.clone(), tx.queued()));
            tokio::spawn(consume(self.inner.clone(), runtime.clone(), rx, handler));
            runtimes.push((runtime, tx));
        }
        tokio::spawn(supervise(self.inner.clone(), runtimes, identity, first));
        Ok(())
    }

    /// Waits until every stream item received so far is recorded by its handler and
    /// acknowledged, for at most `within`; `true` when it is. A command about to exit
    /// calls it before [`close`](Self::close): what it handled is then cleared on the
    /// client instead of waiting there for the next consumer. It acknowledges nothing
    /// early: an item still unrecorded (its handler failing) stays unacknowledged, and
    /// so does every later one, and acknowledgements still wait
    /// [`ack_settle`](super::ClientRpcConfig::ack_settle) for stragglers.
    pub async fn flush_acks(&self, within: std::time::Duration) -> bool {
        let deadline = Instant::now() + within;
        let mut moved = self.inner.stream_moved.subscribe();
        loop {
            moved.borrow_and_update();
            if self.acks_settled() {
                return true;
            }
            tokio::select! {
                changed = moved.changed() => if changed.is_err() {
                    return self.acks_settled();
                },
                () = tokio::time::sleep_until(deadline) => return self.acks_settled(),
            }
        }
    }

    /// Nothing received waits in a queue, for its handler or for an acknowledgement.
    fn acks_settled(&self) -> bool {
        lock(&self.inner.consumed).iter().all(|(runtime, queued)| {
            queued.load(Relaxed) == 0 && lock(&runtime.window).is_settled()
        })
    }

    /// Stops the host: closes the connection, ends its tasks, fails waiting calls with
    /// [`ClientRpcError::Closed`].
    pub fn close(&self) {
        self.inner.shutdown.send_replace(true);
        if let Some(conn) = self.inner.current.send_replace(None) {
            conn.close("host closed");
        }
        lock(&self.inner.waiters).clear();
    }

    /// The host's connection state.
    pub fn status(&self) -> HostStatus {
        let mut status = lock(&self.inner.status).clone();
        status.connected = self
            .inner
            .current
            .borrow()
            .as_ref()
            .is_some_and(|c| !c.is_closed());
        status
    }

    /// The config the host was made with.
    pub fn config(&self) -> &ClientRpcConfig {
        &self.inner.config
    }

    /// `VersionService.Version`.
    ///
    /// # Errors
    /// As [`call`](Self::call).
    pub async fn version(&self) -> Result<VersionResponse, ClientRpcError> {
        self.inner
            .request(method::VERSION, &VersionRequest {})
            .await
    }

    /// `ChatService.UserPublicIdentity`: this client's own identity.
    ///
    /// # Errors
    /// As [`call`](Self::call).
    pub async fn public_identity(&self) -> Result<PublicIdentity, ClientRpcError> {
        self.inner
            .request(method::USER_PUBLIC_IDENTITY, &PublicIdentityReq {})
            .await
    }

    /// Sends a PM to `user`: a 64-hex user id (lowercase is what the server matches)
    /// or a nick. PMs to the same `user` string leave one at a time, in call order:
    /// each waits for the previous one's answer, since the server runs requests
    /// concurrently. Returns once the relay accepted the PM (not a delivery receipt).
    ///
    /// A PM whose connection died before its answer is sent again, unchanged, once a
    /// connection is back (at most [`PM_RESENDS`] times): the client may not have taken
    /// it, and a PM left unsent loses what it carries (a paid call's answer, which the
    /// caller then waits for in vain). The client may have taken it too, so the peer
    /// can get it twice: an envelope part carries its message id, and a receiver drops
    /// a message it already has.
    ///
    /// # Errors
    /// As [`call`](Self::call); the server's text for an unknown user, an empty
    /// message or one too large. [`ClientRpcError::ConnectionLost`] when the
    /// connection died under every send.
    pub async fn pm(&self, user: &str, message: impl Into<String>) -> Result<(), ClientRpcError> {
        let slot = UserSlot::take(&self.inner, user);
        let _turn = slot.lock.lock().await;
        let request = PmRequest {
            user: user.to_owned(),
            msg: Some(RmPrivateMessage {
                message: message.into(),
                ..RmPrivateMessage::default()
            }),
        };
        let mut resends = 0;
        loop {
            match self
                .inner
                .request::<_, PmResponse>(method::PM, &request)
                .await
            {
                Err(ClientRpcError::ConnectionLost) if resends < PM_RESENDS => {
                    resends += 1;
                    tracing::info!(
                        user,
                        resends,
                        "connection lost with a PM in flight; sending it again"
                    );
                }
                sent => return sent.map(drop),
            }
        }
    }

    /// Tips `to` `atoms` (sent as DCR, `atoms / ATOMS_PER_DCR`) and waits, within the config's
    /// tip timeout, for the TipProgress event ending it, matched by payee and amount
    /// (events carry no request id, so two concurrent tips of one amount to one payee
    /// may be matched to each other's events).
    ///
    /// # Errors
    /// [`ClientRpcError::NoTipProgress`] when TipProgress is not consumed; the
    /// server's refusal of `TipUser` ([`ClientRpcError::Rpc`]); [`ClientRpcError::Closed`].
    /// A timeout or a lost connection after the request may have reached the server
    /// is [`TipOutcome::Unconfirmed`], not an error.
    pub async fn tip(&self, to: PeerId, atoms: u64) -> Result<TipOutcome, ClientRpcError> {
        let inner = &self.inner;
        if !inner.tip_progress.load(Relaxed) {
            return Err(ClientRpcError::NoTipProgress);
        }
        let matoms = atoms
            .checked_mul(1000)
            .and_then(|m| i64::try_from(m).ok())
            .ok_or_else(|| ClientRpcError::Config(format!("tip of {atoms} atoms too large")))?;
        let deadline = Instant::now() + inner.config.tip_timeout;
        let (tx, rx) = oneshot::channel();
        let id = inner.next_waiter.fetch_add(1, Relaxed);
        lock(&inner.waiters).push(TipWaiter {
            id,
            payee: to,
            matoms,
            tx,
        });
        let _waiting = WaiterGuard { inner, id };
        #[allow(clippy::cast_precision_loss)]
        let request = TipUserRequest {
            user: to.to_string(),
            // Exact for any amount below 2^53 atoms once the server rounds to atoms.
            dcr_amount: atoms as f64 / ATOMS_PER_DCR as f64,
            max_attempts: inner.config.tip_max_attempts,
        };
        match tokio::time::timeout_at(
            deadline,
            inner.request::<_, TipUserResponse>(method::TIP_USER, &request),
        )
        .await
        {
            Err(_) | Ok(Err(ClientRpcError::Timeout | ClientRpcError::ConnectionLost)) => {
                return Ok(TipOutcome::Unconfirmed);
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(TipUserResponse {})) => {}
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(event)) if event.completed => Ok(TipOutcome::Paid {
                attempts: event.attempt,
            }),
            Ok(Ok(event)) => Ok(TipOutcome::Failed {
                attempts: event.attempt,
                error: event.attempt_err,
            }),
            Ok(Err(_)) => Err(ClientRpcError::Closed),
            Err(_) => Ok(TipOutcome::Unconfirmed),
        }
    }

    /// `ChatService.MediateKX`: asks `mediator` (a contact who knows `target`) to
    /// mediate a key exchange with `target`. Returns once the request left; the
    /// exchange completes later, if at all, as a `KXCompleted` on the KX stream
    /// ([`Streams::kx`]).
    ///
    /// # Errors
    /// As [`call`](Self::call); the server's text for an unknown mediator.
    pub async fn mediate_kx(&self, mediator: PeerId, target: PeerId) -> Result<(), ClientRpcError> {
        let request = MediateKxRequest {
            mediator: mediator.to_string(),
            target: target.to_string(),
        };
        self.inner
            .request::<_, MediateKxResponse>(method::MEDIATE_KX, &request)
            .await
            .map(drop)
    }

    /// `PostsService.SubscribeToPosts`: asks `user` (a 64-hex user id or a nick) for
    /// their posts; the ones they publish from then on arrive on the posts stream
    /// ([`Streams::posts`]). Returns once the request left.
    ///
    /// # Errors
    /// As [`call`](Self::call); the server's text for an unknown user.
    pub async fn subscribe_to_posts(&self, user: &str) -> Result<(), ClientRpcError> {
        let request = SubscribeToPostsRequest {
            user: user.to_owned(),
        };
        self.inner
            .request::<_, SubscribeToPostsResponse>(method::SUBSCRIBE_TO_POSTS, &request)
            .await
            .map(drop)
    }

    /// Every TipProgress event from now on, terminal or not, including those of tips
    /// sent before a restart.
    pub fn subscribe_tip_progress(&self) -> broadcast::Receiver<TipProgressEvent> {
        self.inner.progress.subscribe()
    }

    /// Every terminal TipProgress event from now on that no waiting [`tip`](Self::tip)
    /// took: the outcome of a tip whose caller stopped waiting (it was
    /// [`TipOutcome::Unconfirmed`], or its future was dropped), including tips sent
    /// before a restart, whose events the stream redelivers until acknowledged.
    /// Subscribe before [`connect`](Self::connect) to see those redeliveries.
    pub fn subscribe_unclaimed_tip_results(&self) -> broadcast::Receiver<TipProgressEvent> {
        self.inner.unclaimed.subscribe()
    }

    /// Calls any method with raw JSON params and returns the raw result. The params go
    /// out as given, unknown fields included.
    ///
    /// # Errors
    /// [`ClientRpcError::Rpc`] with the server's code and text;
    /// [`ClientRpcError::Timeout`] when no connection or no answer came within the
    /// request timeout; [`ClientRpcError::ConnectionLost`] when the connection died
    /// with the request in flight; [`ClientRpcError::Closed`].
    pub async fn call(&self, method: &str, params: &Value) -> Result<Value, ClientRpcError> {
        self.inner.request_value(method, params).await
    }
}

impl PmSender for ClientRpcHost {
    type Error = ClientRpcError;

    /// Sends `body` to `to` by its lowercase hex id; see [`ClientRpcHost::pm`].
    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), ClientRpcError> {
        self.pm(&to.to_string(), body).await
    }
}

/// The per-user lock that keeps PMs to one user in order; dropped from the map once
/// nobody holds or waits for it.
struct UserSlot<'a> {
    inner: &'a Inner,
    user: String,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl<'a> UserSlot<'a> {
    fn take(inner: &'a Inner, user: &str) -> Self {
        let lock = lock(&inner.user_locks)
            .entry(user.to_owned())
            .or_default()
            .clone();
        Self {
            inner,
            user: user.to_owned(),
            lock,
        }
    }
}

impl Drop for UserSlot<'_> {
    fn drop(&mut self) {
        let mut locks = lock(&self.inner.user_locks);
        // The map's reference and ours: nobody else holds or waits for it.
        if Arc::strong_count(&self.lock) == 2 {
            locks.remove(&self.user);
        }
    }
}

struct WaiterGuard<'a> {
    inner: &'a Inner,
    id: u64,
}

impl Drop for WaiterGuard<'_> {
    fn drop(&mut self) {
        lock(&self.inner.waiters).retain(|w| w.id != self.id);
    }
}

impl Inner {
    /// The live connection, waiting for one if needed.
    async fn conn(&self) -> Result<Arc<Conn>, ClientRpcError> {
        let mut current = self.current.subscribe();
        let mut shutdown = self.shutdown.subscribe();
        loop {
            if *shutdown.borrow_and_update() {
                return Err(ClientRpcError::Closed);
            }
            if let Some(conn) = current.borrow_and_update().clone()
                && !conn.is_closed()
            {
                return Ok(conn);
            }
            tokio::select! {
                changed = current.changed() => changed.map_err(|_| ClientRpcError::Closed)?,
                _ = shutdown.changed() => {}
            }
        }
    }

    async fn request_value<P: Serialize + Sync>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, ClientRpcError> {
        let call = async {
            loop {
                let conn = self.conn().await?;
                match conn.call(method, params).await {
                    Ok(result) => return Ok(result),
                    // It never left: the next connection takes it.
                    Err(CallError::NotSent) => conn.closed().await,
                    Err(CallError::Failed(e)) => return Err(e),
                }
            }
        };
        match self.config.request_timeout {
            Some(limit) => tokio::time::timeout(limit, call)
                .await
                .unwrap_or(Err(ClientRpcError::Timeout)),
            None => call.await,
        }
    }

    async fn request<P: ReflectMessage, R: ReflectMessage + Default>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, ClientRpcError> {
        let value = self
            .request_value(method, &proto::protojson(params))
            .await?;
        proto::from_json(&value, Unknown::Ignore)
            .map_err(|e| ClientRpcError::Protocol(format!("{method} result: {e}")))
    }

    /// A TipProgress event: tell subscribers, and the tip waiting for it if terminal.
    fn on_tip_progress(&self, event: &TipProgressEvent) {
        let _ = self.progress.send(event.clone());
        if !event.is_terminal() {
            return;
        }
        let waiter = {
            let mut waiters = lock(&self.waiters);
            waiters
                .iter()
                .position(|w| w.payee == event.uid && w.matoms == event.amount_matoms)
                .map(|i| waiters.remove(i))
        };
        // A waiter whose tip future is gone between the removal and here hands the
        // event back; it is then unclaimed too.
        let unclaimed = match waiter {
            Some(waiter) => waiter.tx.send(event.clone()).err(),
            None => Some(event.clone()),
        };
        if let Some(event) = unclaimed {
            let _ = self.unclaimed.send(event);
        }
    }
}
