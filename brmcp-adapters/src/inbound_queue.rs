//! The queue between [`Router::handle_pm`](crate::Router::handle_pm) and the router task:
//! bounded in PMs and in bytes, served round robin per peer.
//!
//! A PM is admitted while the queue holds fewer than its PM bound and the PM fits its
//! byte bound, and while its peer holds at most a [`PEER_SHARE_DIVISOR`]th of either; an
//! empty queue takes one PM of any size, so every PM the host can hand over gets through.
//! Past a bound `push` waits: the backpressure reaches the host, as a bounded channel
//! would. The task takes PMs one peer at a time in turn, so one peer's flood delays
//! another peer's PM by at most one PM of each other busy peer, whatever it has queued.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use crate::peer::PeerId;
use crate::stats::Counters;

/// A peer may hold at most `1 / PEER_SHARE_DIVISOR` of the queue's PMs and bytes: a
/// flooding peer fills its share and waits there, leaving the rest of the queue to the
/// others (with a host that hands PMs over from several tasks).
pub(crate) const PEER_SHARE_DIVISOR: usize = 4;

/// One inbound PM as the host handed it over.
#[derive(Debug)]
pub(crate) struct InboundPm {
    /// The sender.
    pub(crate) from: PeerId,
    /// The PM text.
    pub(crate) body: String,
}

/// The router's side: pushes PMs; dropping it closes the queue.
#[derive(Debug)]
pub(crate) struct QueueTx(Arc<Shared>);

/// The router task's side: takes PMs; dropping it closes the queue.
#[derive(Debug)]
pub(crate) struct QueueRx(Arc<Shared>);

/// The queue was closed: the router stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Closed;

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Signalled when a PM is queued or the queue closes.
    ready: Notify,
    /// Signalled when room frees or the queue closes.
    room: Notify,
    max_pms: usize,
    max_bytes: usize,
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct State {
    /// Each peer's PMs in arrival order; a peer is here only while it has PMs queued.
    peers: HashMap<PeerId, PeerQueue>,
    /// The peers with PMs queued, in serving order.
    turn: VecDeque<PeerId>,
    pms: usize,
    bytes: usize,
    closed: bool,
}

#[derive(Debug, Default)]
struct PeerQueue {
    pms: VecDeque<InboundPm>,
    bytes: usize,
}

/// A queue of at most `max_pms` PMs (at least 1) and `max_bytes` bytes of PM text.
pub(crate) fn inbound_queue(
    max_pms: usize,
    max_bytes: usize,
    counters: Arc<Counters>,
) -> (QueueTx, QueueRx) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        ready: Notify::new(),
        room: Notify::new(),
        max_pms: max_pms.max(1),
        max_bytes,
        counters,
    });
    (QueueTx(shared.clone()), QueueRx(shared))
}

impl State {
    fn admits(&self, from: &PeerId, len: usize, max_pms: usize, max_bytes: usize) -> bool {
        if self.pms == 0 {
            return true;
        }
        let (peer_pms, peer_bytes) = self
            .peers
            .get(from)
            .map_or((0, 0), |q| (q.pms.len(), q.bytes));
        let fits = |held: usize, add: usize, max: usize| held.saturating_add(add) <= max;
        let share = |max: usize| (max / PEER_SHARE_DIVISOR).max(1);
        self.pms < max_pms
            && fits(self.bytes, len, max_bytes)
            // A peer with nothing queued may always take a PM the queue has room for.
            && (peer_pms == 0
                || peer_pms < share(max_pms) && fits(peer_bytes, len, share(max_bytes)))
    }

    fn push(&mut self, pm: InboundPm) {
        let len = pm.body.len();
        let queue = self.peers.entry(pm.from).or_default();
        if queue.pms.is_empty() {
            self.turn.push_back(pm.from);
        }
        queue.bytes += len;
        queue.pms.push_back(pm);
        self.pms += 1;
        self.bytes += len;
    }

    fn pop(&mut self) -> Option<InboundPm> {
        let peer = self.turn.pop_front()?;
        let queue = self.peers.get_mut(&peer)?;
        let pm = queue.pms.pop_front()?;
        queue.bytes -= pm.body.len();
        if queue.pms.is_empty() {
            self.peers.remove(&peer);
        } else {
            self.turn.push_back(peer);
        }
        self.pms -= 1;
        self.bytes -= pm.body.len();
        Some(pm)
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::lock(&self.state)
    }

    fn publish(&self, state: &State) {
        let c = &self.counters;
        c.queue_pms.store(state.pms as u64, Relaxed);
        c.queue_bytes.store(state.bytes as u64, Relaxed);
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
        self.room.notify_waiters();
    }
}

impl QueueTx {
    /// Queues `pm`, waiting while the queue or its peer's share is full.
    ///
    /// Cancellation-safe: a cancelled push queued nothing.
    pub(crate) async fn push(&self, pm: InboundPm) -> Result<(), Closed> {
        let shared = &*self.0;
        loop {
            // Registered before the check, so room freed in between is not missed.
            let room = shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            {
                let mut state = shared.lock();
                if state.closed {
                    return Err(Closed);
                }
                if state.admits(&pm.from, pm.body.len(), shared.max_pms, shared.max_bytes) {
                    state.push(pm);
                    shared.publish(&state);
                    drop(state);
                    shared.ready.notify_one();
                    return Ok(());
                }
            }
            room.await;
        }
    }
}

impl Drop for QueueTx {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl QueueRx {
    /// The next PM in round-robin order; `None` once the queue is closed.
    ///
    /// Cancellation-safe: a cancelled pop took nothing.
    pub(crate) async fn pop(&self) -> Option<InboundPm> {
        let shared = &*self.0;
        // A queue that never empties must not keep the router task from yielding.
        tokio::task::coop::consume_budget().await;
        loop {
            {
                let mut state = shared.lock();
                if state.closed {
                    return None;
                }
                if let Some(pm) = state.pop() {
                    shared.publish(&state);
                    drop(state);
                    shared.room.notify_waiters();
                    return Some(pm);
                }
            }
            // `notify_one` stores a permit: a push after the check above wakes this.
            shared.ready.notified().await;
        }
    }
}

impl Drop for QueueRx {
    fn drop(&mut self) {
        self.0.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u8) -> PeerId {
        PeerId::from_bytes([n; 32])
    }

    fn pm(n: u8, len: usize) -> InboundPm {
        InboundPm {
            from: peer(n),
            body: "x".repeat(len),
        }
    }

    fn queue(max_pms: usize, max_bytes: usize) -> (QueueTx, QueueRx, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let (tx, rx) = inbound_queue(max_pms, max_bytes, counters.clone());
        (tx, rx, counters)
    }

    /// Pushes without waiting: `true` if the PM was admitted at once.
    async fn try_push(tx: &QueueTx, pm: InboundPm) -> bool {
        tokio::time::timeout(std::time::Duration::from_millis(1), tx.push(pm))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    #[tokio::test(start_paused = true)]
    async fn served_round_robin_per_peer() {
        let (tx, rx, _) = queue(64, 1 << 20);
        for _ in 0..10 {
            assert!(try_push(&tx, pm(1, 10)).await);
        }
        assert!(try_push(&tx, pm(2, 10)).await);
        assert!(try_push(&tx, pm(3, 10)).await);
        let order: Vec<u8> = {
            let mut v = Vec::new();
            for _ in 0..5 {
                v.push(rx.pop().await.expect("pm").from.as_bytes()[0]);
            }
            v
        };
        assert_eq!(
            order,
            [1, 2, 3, 1, 1],
            "peers 2 and 3 wait one PM of peer 1"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_in_bytes_with_a_share_per_peer() {
        let (tx, rx, counters) = queue(1024, 4000);
        // Peer 1 alone: its share is a quarter of the bytes.
        assert!(try_push(&tx, pm(1, 900)).await);
        assert!(
            !try_push(&tx, pm(1, 200)).await,
            "past peer 1's 1000-byte share"
        );
        // Others still get in, up to the total.
        assert!(try_push(&tx, pm(2, 1000)).await);
        assert!(try_push(&tx, pm(3, 1000)).await);
        assert!(try_push(&tx, pm(4, 1000)).await);
        assert!(!try_push(&tx, pm(5, 101)).await, "past the 4000-byte total");
        assert_eq!(counters.snapshot().queue_bytes, 3900);
        assert_eq!(counters.snapshot().queue_pms, 4);
        // Taking a PM frees room, and a waiting push completes.
        let waiting = tokio::spawn(async move {
            tx.push(pm(5, 101)).await.expect("admitted");
            tx
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        assert_eq!(rx.pop().await.expect("pm").from, peer(1));
        let tx = waiting.await.expect("task");
        assert_eq!(counters.snapshot().queue_bytes, 3101);
        drop(rx);
        assert_eq!(tx.push(pm(1, 1)).await, Err(Closed));
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_queue_takes_any_pm_and_closing_ends_pop() {
        let (tx, rx, _) = queue(2, 10);
        assert!(
            try_push(&tx, pm(1, 100)).await,
            "larger than the bound, queue empty"
        );
        assert!(!try_push(&tx, pm(2, 1)).await);
        assert_eq!(rx.pop().await.expect("pm").body.len(), 100);
        assert!(try_push(&tx, pm(2, 1)).await);
        drop(tx);
        assert!(rx.pop().await.is_none(), "closed: queued PMs are dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn bounded_in_pms() {
        let (tx, _rx, _) = queue(8, 1 << 20);
        assert!(try_push(&tx, pm(1, 1)).await);
        assert!(try_push(&tx, pm(1, 1)).await);
        assert!(!try_push(&tx, pm(1, 1)).await, "peer 1's share: 2 of 8 PMs");
        for n in 2..=7 {
            assert!(try_push(&tx, pm(n, 1)).await);
        }
        assert!(!try_push(&tx, pm(9, 1)).await, "8 PMs queued");
    }
}
