//! [`ClientRpcHost`]: the Bison Relay host backed by a running brclient or brclientd.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

use super::config::ClientRpcConfig;
use super::conn::{self, CallError, Conn, until_true};
use super::error::ClientRpcError;
use super::lock;
use super::proto::{
    AckRequest, Empty, KxCompleted, MediateKxRequest, PmRequest, PublicIdentity, ReceivedPm,
    ReceivedTip, RmPrivateMessage, StreamRequest, TipProgressEvent, TipUserRequest,
    VersionResponse, method,
};
use super::streams::{AckWindow, Delivery, StreamEntry, StreamKind, StreamRuntime};
use crate::clock::sleep_until_opt;
use crate::error::BoxError;
use crate::host::PmSender;
use crate::peer::PeerId;
use crate::router::Router;

mod run;

use run::{Handler, consume, supervise};

/// TipProgress events kept for [`ClientRpcHost::subscribe_tip_progress`] receivers
/// that fall behind; older ones are skipped for them (they see a lag error).
pub const TIP_PROGRESS_BROADCAST: usize = 64;

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Takes each PM the host receives.
///
/// The PM is acknowledged to the server only after `handle_pm` returned `Ok` (and
/// every PM received before it with a lower sequence id did too): return `Ok` once the
/// PM is durably recorded, or deliberately dropped. On `Err` the same PM is offered
/// again after a backoff, and later PMs wait. The host drops no redelivery itself: a
/// PM redelivered after a reconnect or a restart comes again with the same sequence id,
/// and the handler's record is what recognises it.
///
/// [`Router`] implements it (every PM goes to [`Router::handle_pm`], nothing durable:
/// a PM in its queue when the process dies is lost).
pub trait PmHandler: Send + Sync + 'static {
    /// Handles one PM.
    fn handle_pm(&self, pm: ReceivedPm) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// The server confirmed clearing every PM with a sequence id up to `up_to`: it
    /// delivers none of them again, so a PM arriving later with such an id is new.
    /// Called after each confirmed acknowledgement; errors are logged. The default
    /// does nothing.
    fn cleared(&self, up_to: u64) -> impl Future<Output = Result<(), BoxError>> + Send {
        let _ = up_to;
        std::future::ready(Ok(()))
    }
}

impl PmHandler for Router {
    async fn handle_pm(&self, pm: ReceivedPm) -> Result<(), BoxError> {
        Self::handle_pm(self, pm.uid, pm.msg.message)
            .await
            .map_err(Into::into)
    }
}

impl<F, Fut> PmHandler for F
where
    F: Fn(ReceivedPm) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    fn handle_pm(&self, pm: ReceivedPm) -> impl Future<Output = Result<(), BoxError>> + Send {
        self(pm)
    }
}

/// Takes each tip the host receives: the payer ([`ReceivedTip::uid`]), the amount in
/// milliatoms and the sequence id (the same on a redelivery).
///
/// As for [`PmHandler`]: acknowledged after `Ok` (return it once the tip is durably
/// recorded); retried after `Err`; redeliveries are the handler's to recognise.
pub trait TipHandler: Send + Sync + 'static {
    /// Handles one received tip.
    fn handle_tip(&self, tip: ReceivedTip) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// As [`PmHandler::cleared`], for tips.
    fn cleared(&self, up_to: u64) -> impl Future<Output = Result<(), BoxError>> + Send {
        let _ = up_to;
        std::future::ready(Ok(()))
    }
}

impl<F, Fut> TipHandler for F
where
    F: Fn(ReceivedTip) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    fn handle_tip(&self, tip: ReceivedTip) -> impl Future<Output = Result<(), BoxError>> + Send {
        self(tip)
    }
}

/// Takes each terminal TipProgress event: the outcome a waiting [`ClientRpcHost::tip`]
/// took (after it was handed over), and those of tips whose caller stopped waiting,
/// including tips sent before a restart, which brclient redelivers until acknowledged.
///
/// The event is acknowledged only after `handle_tip_result` returned `Ok`: return it
/// once the outcome is durably recorded. On `Err` it is offered again after a backoff.
/// A claimed outcome is recorded here as well as by its payer, so a crash between the
/// hand-over and the payer's record cannot lose it: recording must be idempotent.
pub trait TipResultHandler: Send + Sync + 'static {
    /// Handles one terminal event.
    fn handle_tip_result(
        &self,
        event: TipProgressEvent,
    ) -> impl Future<Output = Result<(), BoxError>> + Send;
}

impl<F, Fut> TipResultHandler for F
where
    F: Fn(TipProgressEvent) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    fn handle_tip_result(
        &self,
        event: TipProgressEvent,
    ) -> impl Future<Output = Result<(), BoxError>> + Send {
        self(event)
    }
}

/// Takes each completed key exchange the host is told of (`KXCompleted`): the new
/// contact's uid and nick.
///
/// As for [`PmHandler`]: acknowledged after `Ok` (return it once whatever the exchange
/// triggers is done or durably recorded); retried after `Err`; a redelivery after a
/// reconnect or a restart comes with the same sequence id.
pub trait KxHandler: Send + Sync + 'static {
    /// Handles one completed exchange.
    fn handle_kx(&self, kx: KxCompleted) -> impl Future<Output = Result<(), BoxError>> + Send;
}

impl<F, Fut> KxHandler for F
where
    F: Fn(KxCompleted) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    fn handle_kx(&self, kx: KxCompleted) -> impl Future<Output = Result<(), BoxError>> + Send {
        self(kx)
    }
}

/// Checks the identity of the client behind every new connection before any stream
/// opens: `Err` refuses the connection (see [`Streams::identity`]).
type IdentityCheck = Arc<dyn Fn(PeerId) -> Result<(), BoxError> + Send + Sync>;

trait DynPm: Send + Sync {
    fn call(&self, pm: ReceivedPm) -> BoxFuture<'_, Result<(), BoxError>>;
    fn cleared(&self, up_to: u64) -> BoxFuture<'_, Result<(), BoxError>>;
}

impl<H: PmHandler> DynPm for H {
    fn call(&self, pm: ReceivedPm) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(self.handle_pm(pm))
    }
    fn cleared(&self, up_to: u64) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(PmHandler::cleared(self, up_to))
    }
}

trait DynTip: Send + Sync {
    fn call(&self, tip: ReceivedTip) -> BoxFuture<'_, Result<(), BoxError>>;
    fn cleared(&self, up_to: u64) -> BoxFuture<'_, Result<(), BoxError>>;
}

impl<H: TipHandler> DynTip for H {
    fn call(&self, tip: ReceivedTip) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(self.handle_tip(tip))
    }
    fn cleared(&self, up_to: u64) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(TipHandler::cleared(self, up_to))
    }
}

trait DynKx: Send + Sync {
    fn call(&self, kx: KxCompleted) -> BoxFuture<'_, Result<(), BoxError>>;
}

impl<H: KxHandler> DynKx for H {
    fn call(&self, kx: KxCompleted) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(self.handle_kx(kx))
    }
}

trait DynResult: Send + Sync {
    fn call(&self, event: TipProgressEvent) -> BoxFuture<'_, Result<(), BoxError>>;
}

impl<H: TipResultHandler> DynResult for H {
    fn call(&self, event: TipProgressEvent) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(self.handle_tip_result(event))
    }
}

/// Which streams the host consumes and who records their items.
///
/// ```no_run
/// # use brmcp_adapters::clientrpc::Streams;
/// # fn f(router: brmcp_adapters::Router) {
/// let streams = Streams::new()
///     .pms(router)
///     .tips(|tip: brmcp_adapters::clientrpc::proto::ReceivedTip| async move {
///         println!("{} matoms from {}", tip.amount_matoms, tip.uid);
///         Ok(())
///     });
/// # let _ = streams; }
/// # fn main() { let _ = f; }
/// ```
#[derive(Default)]
pub struct Streams {
    pm: Option<Arc<dyn DynPm>>,
    tips: Option<Arc<dyn DynTip>>,
    results: Option<Arc<dyn DynResult>>,
    kx: Option<Arc<dyn DynKx>>,
    no_tip_progress: bool,
    identity: Option<IdentityCheck>,
}

impl fmt::Debug for Streams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streams")
            .field("pm", &self.pm.is_some())
            .field("tips", &self.tips.is_some())
            .field("tip_results", &self.results.is_some())
            .field("kx", &self.kx.is_some())
            .field("tip_progress", &!self.no_tip_progress)
            .field("identity", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

impl Streams {
    /// Consumes TipProgress (needed by [`ClientRpcHost::tip`]) and nothing else until
    /// told.
    pub fn new() -> Self {
        Self::default()
    }

    /// Consumes PMStream, handing every PM to `handler` (a [`Router`], typically).
    #[must_use]
    pub fn pms(mut self, handler: impl PmHandler) -> Self {
        self.pm = Some(Arc::new(handler));
        self
    }

    /// Consumes TipStream, handing every tip received to `handler`.
    #[must_use]
    pub fn tips(mut self, handler: impl TipHandler) -> Self {
        self.tips = Some(Arc::new(handler));
        self
    }

    /// Hands every terminal TipProgress event to `handler`, also the one a waiting tip
    /// took, and acknowledges it only once the handler recorded it.
    #[must_use]
    pub fn tip_results(mut self, handler: impl TipResultHandler) -> Self {
        self.results = Some(Arc::new(handler));
        self
    }

    /// Consumes KXStream, handing every completed key exchange to `handler`.
    #[must_use]
    pub fn kx(mut self, handler: impl KxHandler) -> Self {
        self.kx = Some(Arc::new(handler));
        self
    }

    /// Whether to consume TipProgress (on by default). Off, [`ClientRpcHost::tip`]
    /// fails with [`ClientRpcError::NoTipProgress`].
    #[must_use]
    pub const fn tip_progress(mut self, on: bool) -> Self {
        self.no_tip_progress = !on;
        self
    }

    /// Checks the client's own identity (`UserPublicIdentity`) at every connection,
    /// before any stream opens: on `Err` the connection is closed and counts as a
    /// failed attempt ([`ClientRpcError::Identity`] with the check's text; the first
    /// [`connect`](ClientRpcHost::connect) returns it). A data directory bound to one
    /// brclient uses it to refuse another.
    #[must_use]
    pub fn identity(
        mut self,
        check: impl Fn(PeerId) -> Result<(), BoxError> + Send + Sync + 'static,
    ) -> Self {
        self.identity = Some(Arc::new(check));
        self
    }
}

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
}

/// The Bison Relay host backed by brclient or brclientd's clientrpc: sends PMs
/// ([`PmSender`]), delivers the PMs and tips it receives to handlers, and pays tips.
///
/// Cheap to clone; every clone is the same host. [`connect`](Self::connect) or
/// [`spawn`](Self::spawn) start it; it then keeps one connection up, reconnecting with
/// backoff and reopening its streams, until [`close`](Self::close).
///
/// ```no_run
/// use brmcp_adapters::clientrpc::{BotConfig, ClientRpcConfig, ClientRpcHost, Streams};
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
        self.inner.tip_progress.store(!no_tip_progress, Relaxed);
        let mut runtimes = Vec::new();
        for (kind, handler) in consumers {
            let (tx, rx) = mpsc::unbounded_channel();
            let runtime = Arc::new(StreamRuntime {
                kind,
                window: Mutex::new(AckWindow::default()),
            });
            tokio::spawn(consume(self.inner.clone(), runtime.clone(), rx, handler));
            runtimes.push((runtime, tx));
        }
        tokio::spawn(supervise(self.inner.clone(), runtimes, identity, first));
        Ok(())
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
        self.inner.request(method::VERSION, &Empty {}).await
    }

    /// `ChatService.UserPublicIdentity`: this client's own identity.
    ///
    /// # Errors
    /// As [`call`](Self::call).
    pub async fn public_identity(&self) -> Result<PublicIdentity, ClientRpcError> {
        self.inner
            .request(method::USER_PUBLIC_IDENTITY, &Empty {})
            .await
    }

    /// Sends a PM to `user`: a 64-hex user id (lowercase is what the server matches)
    /// or a nick. PMs to the same `user` string leave one at a time, in call order:
    /// each waits for the previous one's answer, since the server runs requests
    /// concurrently. Returns once the relay accepted the PM (not a delivery receipt).
    ///
    /// # Errors
    /// As [`call`](Self::call); the server's text for an unknown user, an empty
    /// message or one too large.
    pub async fn pm(&self, user: &str, message: impl Into<String>) -> Result<(), ClientRpcError> {
        let slot = UserSlot::take(&self.inner, user);
        let _turn = slot.lock.lock().await;
        let request = PmRequest {
            user: user.to_owned(),
            msg: RmPrivateMessage {
                message: message.into(),
                ..RmPrivateMessage::default()
            },
        };
        self.inner
            .request::<_, Empty>(method::PM, &request)
            .await
            .map(drop)
    }

    /// Tips `to` `atoms` (sent as DCR, `atoms / 1e8`) and waits, within the config's
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
            dcr_amount: atoms as f64 / 1e8,
            max_attempts: inner.config.tip_max_attempts,
        };
        match tokio::time::timeout_at(
            deadline,
            inner.request::<_, Empty>(method::TIP_USER, &request),
        )
        .await
        {
            Err(_) | Ok(Err(ClientRpcError::Timeout | ClientRpcError::ConnectionLost)) => {
                return Ok(TipOutcome::Unconfirmed);
            }
            Ok(Err(e)) => return Err(e),
            Ok(Ok(Empty {})) => {}
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
            .request::<_, Empty>(method::MEDIATE_KX, &request)
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

    async fn request<P: Serialize + Sync, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, ClientRpcError> {
        let value = self.request_value(method, params).await?;
        serde_json::from_value(value)
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
