//! An in-memory PM fabric for tests, examples, benches and demos.
//!
//! Any number of identities exchange PMs through one [`Fabric`]. Faults are drawn from
//! a seeded generator, so a failing run reproduces from its seed: a PM may be dropped,
//! duplicated, delayed, and held back by a random extra delay (which reorders PMs sent
//! close together). A peer may go offline: PMs to it are stored and delivered in order
//! when it comes back, as Bison Relay's store-and-forward relay does.
//!
//! Routers built with [`Fabric::router`] share the fabric's [`TokioClock`], so a test
//! with paused tokio time controls part deadlines too.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! use brmcp_adapters::mem::{Fabric, uid};
//! use brmcp_adapters::RouterConfig;
//!
//! let fabric = Fabric::new(7);
//! let server = fabric.router(uid(1), RouterConfig::server());
//! let client = fabric.router(uid(2), RouterConfig::client());
//! let transport = client.dial(uid(1)).unwrap();
//! # let _ = (server, transport);
//! # }
//! ```

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::clock::TokioClock;
use crate::config::RouterConfig;
use crate::host::PmSender;
use crate::peer::PeerId;
use crate::router::{Router, WeakRouter};

/// A deterministic peer id for test identity `n`.
pub fn uid(n: u32) -> PeerId {
    let mut bytes = [0x5a; 32];
    bytes[28..].copy_from_slice(&n.to_be_bytes());
    PeerId::from_bytes(bytes)
}

/// Faults the fabric injects into every PM it carries.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
#[non_exhaustive]
pub struct Faults {
    /// Chance in percent that a PM is lost.
    pub drop_percent: f64,
    /// Chance in percent that a PM is delivered twice.
    pub duplicate_percent: f64,
    /// Each copy of a PM is held back by a random extra delay up to this, so PMs sent
    /// within this window may arrive in any order.
    pub reorder: Duration,
    /// Fixed delay of every PM.
    pub delay: Duration,
}

impl Faults {
    /// No faults: every PM arrives once, in order, at once.
    pub fn none() -> Self {
        Self::default()
    }

    /// Sets the drop chance in percent.
    #[must_use]
    pub fn drop_percent(mut self, percent: f64) -> Self {
        self.drop_percent = percent;
        self
    }

    /// Sets the duplicate chance in percent.
    #[must_use]
    pub fn duplicate_percent(mut self, percent: f64) -> Self {
        self.duplicate_percent = percent;
        self
    }

    /// Sets the reorder window.
    #[must_use]
    pub fn reorder(mut self, window: Duration) -> Self {
        self.reorder = window;
        self
    }

    /// Sets the fixed delay.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// Why the fabric refused a PM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemError {
    /// No identity with this id is attached to the fabric.
    #[error("no such peer on the fabric: {0}")]
    UnknownPeer(PeerId),
}

/// PMs carried and lost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FabricStats {
    /// PMs handed to the fabric by senders.
    pub sent: u64,
    /// PMs handed to a receiving router (duplicates count twice).
    pub carried: u64,
    /// PMs lost to the drop fault.
    pub dropped: u64,
    /// Extra copies made by the duplicate fault.
    pub duplicated: u64,
}

/// An in-memory Bison Relay: identities, their routers, and the PMs between them.
///
/// Cheap to clone.
#[derive(Clone)]
pub struct Fabric {
    inner: Arc<FabricInner>,
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

struct FabricInner {
    state: Mutex<State>,
    clock: TokioClock,
    sent: AtomicU64,
    carried: AtomicU64,
    dropped: AtomicU64,
    duplicated: AtomicU64,
}

struct State {
    rng: SplitMix64,
    faults: Faults,
    seq: u64,
    endpoints: HashMap<PeerId, Endpoint>,
}

struct Endpoint {
    queue: BinaryHeap<Pending>,
    online: bool,
    router: WeakRouter,
    wake: Arc<Notify>,
}

/// A PM in flight, ordered by delivery time, then by send order.
struct Pending {
    at: Instant,
    seq: u64,
    from: PeerId,
    body: String,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    // Reversed: `BinaryHeap` is a max-heap and the earliest PM must come out first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

impl Fabric {
    /// A fabric without faults whose random choices derive from `seed`.
    pub fn new(seed: u64) -> Self {
        Self::with_faults(seed, Faults::none())
    }

    /// A fabric injecting `faults`, drawn from `seed`.
    pub fn with_faults(seed: u64, faults: Faults) -> Self {
        Self {
            inner: Arc::new(FabricInner {
                state: Mutex::new(State {
                    rng: SplitMix64(seed),
                    faults,
                    seq: 0,
                    endpoints: HashMap::new(),
                }),
                clock: TokioClock::new(),
                sent: AtomicU64::new(0),
                carried: AtomicU64::new(0),
                dropped: AtomicU64::new(0),
                duplicated: AtomicU64::new(0),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        crate::lock(&self.inner.state)
    }

    /// Changes the faults for PMs sent from now on.
    pub fn set_faults(&self, faults: Faults) {
        self.state().faults = faults;
    }

    /// The clock routers of this fabric use.
    pub fn clock(&self) -> TokioClock {
        self.inner.clock
    }

    /// A router for identity `id`, sending through the fabric and receiving from it.
    /// The config's clock is replaced by the fabric's.
    pub fn router(&self, id: PeerId, config: RouterConfig) -> Router {
        let router = Router::new(self.sender(id), config.with_clock(self.inner.clock));
        self.attach(id, &router);
        router
    }

    /// Delivers PMs for `id` to `router` (held weakly: dropping the router detaches it).
    pub fn attach(&self, id: PeerId, router: &Router) {
        let wake = Arc::new(Notify::new());
        let endpoint = Endpoint {
            queue: BinaryHeap::new(),
            online: true,
            router: router.downgrade(),
            wake: wake.clone(),
        };
        if let Some(old) = self.state().endpoints.insert(id, endpoint) {
            old.wake.notify_one();
        }
        tokio::spawn(deliver(Arc::downgrade(&self.inner), id, wake));
    }

    /// A PM sender for identity `from`.
    pub fn sender(&self, from: PeerId) -> MemSender {
        MemSender {
            fabric: self.clone(),
            from,
        }
    }

    /// Takes `id` offline (PMs to it are stored) or back online (stored PMs are
    /// delivered, in order).
    pub fn set_online(&self, id: &PeerId, online: bool) {
        if let Some(endpoint) = self.state().endpoints.get_mut(id) {
            endpoint.online = online;
            endpoint.wake.notify_one();
        }
    }

    /// Sends `body` from `from` to `to` as the host of `from` would, faults included.
    ///
    /// # Errors
    /// [`MemError::UnknownPeer`] when `to` is not attached.
    pub fn send(&self, from: PeerId, to: &PeerId, body: String) -> Result<(), MemError> {
        self.inner.sent.fetch_add(1, Relaxed);
        let mut state = self.state();
        let State {
            rng,
            faults,
            seq,
            endpoints,
        } = &mut *state;
        let endpoint = endpoints.get_mut(to).ok_or(MemError::UnknownPeer(*to))?;
        if rng.chance(faults.drop_percent) {
            self.inner.dropped.fetch_add(1, Relaxed);
            return Ok(());
        }
        let copies = if rng.chance(faults.duplicate_percent) {
            self.inner.duplicated.fetch_add(1, Relaxed);
            2
        } else {
            1
        };
        let now = Instant::now();
        let window = u64::try_from(faults.reorder.as_micros()).unwrap_or(u64::MAX);
        let mut body = Some(body);
        for copy in 0..copies {
            let jitter = if window == 0 {
                0
            } else {
                rng.below(window + 1)
            };
            *seq += 1;
            let body = if copy + 1 == copies {
                body.take().unwrap_or_default()
            } else {
                body.clone().unwrap_or_default()
            };
            endpoint.queue.push(Pending {
                at: now + faults.delay + Duration::from_micros(jitter),
                seq: *seq,
                from,
                body,
            });
        }
        endpoint.wake.notify_one();
        Ok(())
    }

    /// Counts of PMs sent, carried, dropped and duplicated so far.
    pub fn stats(&self) -> FabricStats {
        FabricStats {
            sent: self.inner.sent.load(Relaxed),
            carried: self.inner.carried.load(Relaxed),
            dropped: self.inner.dropped.load(Relaxed),
            duplicated: self.inner.duplicated.load(Relaxed),
        }
    }

    /// PMs handed to receiving routers so far.
    pub fn carried(&self) -> u64 {
        self.inner.carried.load(Relaxed)
    }
}

/// What the delivery task of one endpoint does next.
enum Next {
    Deliver(Router, PeerId, String),
    SleepUntil(Instant),
    Wait,
    Stop,
}

/// Delivers the PMs queued for `id`, in delivery-time order, while it is online.
async fn deliver(fabric: std::sync::Weak<FabricInner>, id: PeerId, wake: Arc<Notify>) {
    loop {
        let next = {
            let Some(inner) = fabric.upgrade() else {
                return;
            };
            let mut state = crate::lock(&inner.state);
            match state.endpoints.get_mut(&id) {
                // Replaced by a newer attach: that one has its own task.
                Some(endpoint) if !Arc::ptr_eq(&endpoint.wake, &wake) => Next::Stop,
                None => Next::Stop,
                Some(endpoint) if !endpoint.online => Next::Wait,
                Some(endpoint) => match endpoint.queue.peek() {
                    None => Next::Wait,
                    Some(p) if p.at > Instant::now() => Next::SleepUntil(p.at),
                    Some(_) => match (endpoint.router.upgrade(), endpoint.queue.pop()) {
                        (Some(router), Some(p)) => Next::Deliver(router, p.from, p.body),
                        _ => Next::Stop,
                    },
                },
            }
        };
        match next {
            Next::Deliver(router, from, body) => {
                if router.handle_pm(from, body).await.is_err() {
                    return;
                }
                if let Some(inner) = fabric.upgrade() {
                    inner.carried.fetch_add(1, Relaxed);
                }
            }
            Next::SleepUntil(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = wake.notified() => {}
                }
            }
            Next::Wait => wake.notified().await,
            Next::Stop => return,
        }
    }
}

/// Sends PMs from one identity through a [`Fabric`].
#[derive(Debug, Clone)]
pub struct MemSender {
    fabric: Fabric,
    from: PeerId,
}

impl PmSender for MemSender {
    type Error = MemError;

    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), MemError> {
        self.fabric.send(self.from, to, body)
    }
}

/// A server router and a client router on one fabric: the usual test setup.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Pair {
    /// The fabric between them.
    pub fabric: Fabric,
    /// The router that accepts sessions, identity [`uid(1)`](uid).
    pub server: Router,
    /// The router that dials, identity [`uid(2)`](uid).
    pub client: Router,
    /// The server's identity.
    pub server_id: PeerId,
    /// The client's identity.
    pub client_id: PeerId,
}

impl Pair {
    /// A pair with default configs on a fabric with `faults` drawn from `seed`.
    pub fn new(seed: u64, faults: Faults) -> Self {
        Self::with_configs(seed, faults, RouterConfig::server(), RouterConfig::client())
    }

    /// A pair with the given configs.
    pub fn with_configs(
        seed: u64,
        faults: Faults,
        server: RouterConfig,
        client: RouterConfig,
    ) -> Self {
        let fabric = Fabric::with_faults(seed, faults);
        let (server_id, client_id) = (uid(1), uid(2));
        Self {
            server: fabric.router(server_id, server),
            client: fabric.router(client_id, client),
            fabric,
            server_id,
            client_id,
        }
    }
}

/// SplitMix64: tiny, seedable, good enough to draw faults.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform draw in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// `true` with probability `percent` / 100.
    #[allow(clippy::cast_precision_loss)] // 53 bits of a uniform draw
    fn chance(&mut self, percent: f64) -> bool {
        percent > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) * 100.0 < percent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn same_seed_same_faults() {
        let run = |seed| async move {
            let fabric = Fabric::with_faults(seed, Faults::none().drop_percent(50.0));
            let _a = fabric.router(uid(1), RouterConfig::client());
            let _b = fabric.router(uid(2), RouterConfig::client());
            for i in 0..200 {
                fabric.send(uid(1), &uid(2), format!("chat {i}")).unwrap();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
            fabric.stats()
        };
        let first = run(42).await;
        assert_eq!(first, run(42).await);
        assert_ne!(first.dropped, run(43).await.dropped);
        assert_eq!(first.carried + first.dropped, 200);
    }

    #[tokio::test(start_paused = true)]
    async fn offline_peer_gets_stored_pms_in_order() {
        let fabric = Fabric::new(1);
        let a = fabric.router(uid(1), RouterConfig::client());
        fabric.set_online(&uid(1), false);
        for i in 0..5 {
            fabric.send(uid(2), &uid(1), format!("chat {i}")).unwrap();
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(fabric.carried(), 0);
        fabric.set_online(&uid(1), true);
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(fabric.carried(), 5);
        assert_eq!(a.stats().dropped_foreign, 5);
    }

    #[test]
    fn unknown_peer_is_an_error() {
        let fabric = Fabric::new(1);
        assert_eq!(
            fabric.send(uid(1), &uid(2), "hi".into()),
            Err(MemError::UnknownPeer(uid(2)))
        );
    }
}
