//! Who records the items of each stream: the handler traits, their type-erased forms,
//! and [`Streams`], the set of them a host is started with.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

#[cfg(doc)]
use super::super::error::ClientRpcError;
use super::super::items::{KxCompleted, ReceivedPm, ReceivedPost, ReceivedTip, TipProgressEvent};
#[cfg(doc)]
use super::ClientRpcHost;
use brmcp_adapters::BoxError;
use brmcp_adapters::PeerId;
use brmcp_adapters::Router;

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

/// Takes each post received from a user subscribed to (`ReceivedPost`).
///
/// As for [`PmHandler`]: acknowledged after `Ok` (return it once the post is read or
/// durably recorded); retried after `Err`; a redelivery after a reconnect or a
/// restart comes with the same sequence id.
pub trait PostHandler: Send + Sync + 'static {
    /// Handles one post.
    fn handle_post(&self, post: ReceivedPost) -> impl Future<Output = Result<(), BoxError>> + Send;
}

impl<F, Fut> PostHandler for F
where
    F: Fn(ReceivedPost) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send,
{
    fn handle_post(&self, post: ReceivedPost) -> impl Future<Output = Result<(), BoxError>> + Send {
        self(post)
    }
}

/// Checks the identity of the client behind every new connection before any stream
/// opens: `Err` refuses the connection (see [`Streams::identity`]).
pub(super) type IdentityCheck = Arc<dyn Fn(PeerId) -> Result<(), BoxError> + Send + Sync>;

pub(super) trait DynPm: Send + Sync {
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

pub(super) trait DynTip: Send + Sync {
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

pub(super) trait DynKx: Send + Sync {
    fn call(&self, kx: KxCompleted) -> BoxFuture<'_, Result<(), BoxError>>;
}

impl<H: KxHandler> DynKx for H {
    fn call(&self, kx: KxCompleted) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(self.handle_kx(kx))
    }
}

pub(super) trait DynPost: Send + Sync {
    fn call(&self, post: ReceivedPost) -> BoxFuture<'_, Result<(), BoxError>>;
}

impl<H: PostHandler> DynPost for H {
    fn call(&self, post: ReceivedPost) -> BoxFuture<'_, Result<(), BoxError>> {
        Box::pin(self.handle_post(post))
    }
}

pub(super) trait DynResult: Send + Sync {
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
/// # use brmcp_clientrpc::Streams;
/// # fn f(router: brmcp_adapters::Router) {
/// let streams = Streams::new()
///     .pms(router)
///     .tips(|tip: brmcp_clientrpc::ReceivedTip| async move {
///         println!("{} matoms from {}", tip.amount_matoms, tip.uid);
///         Ok(())
///     });
/// # let _ = streams; }
/// # fn main() { let _ = f; }
/// ```
#[derive(Default)]
pub struct Streams {
    pub(super) pm: Option<Arc<dyn DynPm>>,
    pub(super) tips: Option<Arc<dyn DynTip>>,
    pub(super) results: Option<Arc<dyn DynResult>>,
    pub(super) kx: Option<Arc<dyn DynKx>>,
    pub(super) posts: Option<Arc<dyn DynPost>>,
    pub(super) no_tip_progress: bool,
    pub(super) identity: Option<IdentityCheck>,
}

impl fmt::Debug for Streams {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Streams")
            .field("pm", &self.pm.is_some())
            .field("tips", &self.tips.is_some())
            .field("tip_results", &self.results.is_some())
            .field("kx", &self.kx.is_some())
            .field("posts", &self.posts.is_some())
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

    /// Consumes PostsStream, handing every post received to `handler` (subscribe to a
    /// user's posts with [`ClientRpcHost::subscribe_to_posts`]).
    #[must_use]
    pub fn posts(mut self, handler: impl PostHandler) -> Self {
        self.posts = Some(Arc::new(handler));
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
