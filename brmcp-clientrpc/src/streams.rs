//! The streams a bot consumes (PMStream, TipStream, TipProgress, KXStream, PostsStream)
//! and when their items may be acknowledged ([`AckWindow`]).
//!
//! brclient stores every item before delivering it and replays, on every stream open,
//! the items not yet acknowledged whose sequence id is above the open's `unackedFrom`.
//! Acknowledgements are cumulative: an ack of N clears every stored item up to N. Tip
//! events are sent from several goroutines, so ids can reach us out of order. Each
//! item goes through, in this order:
//!
//! 1. **record**: the handler runs and returns `Ok` once the item is durable (a
//!    failing handler is retried with backoff, and nothing later on that stream is
//!    handled meanwhile);
//! 2. **ack**: an acknowledgement of N goes out only when every item received with an
//!    id up to N is recorded, and N was received at least
//!    [`ack_settle`](super::ClientRpcConfig::ack_settle) ago (for stragglers with lower
//!    ids still on their way);
//! 3. **cleared**: once the server confirmed the acknowledgement of N, the handler is
//!    told ([`PmHandler::cleared`](super::PmHandler::cleared)): the server will not
//!    deliver any item up to N again, so an item with such an id that arrives later is
//!    new (a straggler, or a tip after brclient's logs were reset).
//!
//! The host itself drops nothing as a duplicate: a stream is always opened with
//! `unackedFrom` 0 (the server replays only what it has not cleared, and an id above
//! 0 would skip every item after brclient's ids were reset), and the handler's durable
//! record (the ledger for tips, the PM journal for PMs) is the one deduplication.
//!
//! The window left open by the server's design: an item delayed inside brclient by
//! more than the settle time behind a later one is cleared by the later one's
//! acknowledgement before it arrives, and lost if the process dies before it does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};

use super::proto::method;

/// A stream the host consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StreamKind {
    /// `ChatService.PMStream`: PMs received.
    Pm,
    /// `PaymentsService.TipProgress`: progress of tips we send.
    TipProgress,
    /// `PaymentsService.TipStream`: tips received.
    TipReceived,
    /// `ChatService.KXStream`: key exchanges completed.
    Kx,
    /// `PostsService.PostsStream`: posts received from the users subscribed to.
    Posts,
}

impl StreamKind {
    /// Every kind.
    pub const ALL: [Self; 5] = [
        Self::Pm,
        Self::TipProgress,
        Self::TipReceived,
        Self::Kx,
        Self::Posts,
    ];

    /// The kind's position in [`ALL`](Self::ALL): an index for per-kind tables.
    pub const fn index(self) -> usize {
        match self {
            Self::Pm => 0,
            Self::TipProgress => 1,
            Self::TipReceived => 2,
            Self::Kx => 3,
            Self::Posts => 4,
        }
    }

    /// The stream's method, without suffix.
    pub const fn method(self) -> &'static str {
        match self {
            Self::Pm => method::PM_STREAM,
            Self::TipProgress => method::TIP_PROGRESS,
            Self::TipReceived => method::TIP_STREAM,
            Self::Kx => method::KX_STREAM,
            Self::Posts => method::POSTS_STREAM,
        }
    }

    /// The method acknowledging its items.
    pub const fn ack_method(self) -> &'static str {
        match self {
            Self::Pm => method::ACK_RECEIVED_PM,
            Self::TipProgress => method::ACK_TIP_PROGRESS,
            Self::TipReceived => method::ACK_TIP_RECEIVED,
            Self::Kx => method::ACK_KX_COMPLETED,
            Self::Posts => method::ACK_RECEIVED_POST,
        }
    }

    /// A short name for logs (`pm`, `tipprogress`, `tipstream`, `kx`, `posts`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Pm => "pm",
            Self::TipProgress => "tipprogress",
            Self::TipReceived => "tipstream",
            Self::Kx => "kx",
            Self::Posts => "posts",
        }
    }
}

/// Which received items an acknowledgement may cover, for one stream.
///
/// Invariant: an id is in `unrecorded` from its delivery until its handler returned
/// `Ok`; an acknowledgement never covers an id in `unrecorded`.
#[derive(Debug, Default)]
pub(crate) struct AckWindow {
    /// Received and not yet recorded (queued, or being handled): id → deliveries.
    unrecorded: BTreeMap<u64, usize>,
    /// Recorded, not yet covered by a confirmed acknowledgement: id → when received.
    recorded: BTreeMap<u64, Instant>,
}

impl AckWindow {
    /// An item with this id was delivered.
    pub(crate) fn received(&mut self, id: u64) {
        *self.unrecorded.entry(id).or_default() += 1;
    }

    /// The item delivered at `at` is recorded. It is acknowledged even when its id is
    /// below one acknowledged already: that is a no-op for a straggler the server
    /// cleared, and clears an item whose id repeats after the server's ids were reset.
    pub(crate) fn recorded(&mut self, id: u64, at: Instant) {
        if let Some(count) = self.unrecorded.get_mut(&id) {
            *count -= 1;
            if *count == 0 {
                self.unrecorded.remove(&id);
            }
        }
        let first = self.recorded.entry(id).or_insert(at);
        *first = (*first).min(at);
    }

    /// The id to acknowledge now, if any, and when to look again otherwise.
    pub(crate) fn ackable(&self, now: Instant, settle: Duration) -> (Option<u64>, Option<Instant>) {
        let limit = self.unrecorded.keys().next().copied().unwrap_or(u64::MAX);
        let mut ack = None;
        let mut due = None::<Instant>;
        for (&id, &at) in self.recorded.range(..limit) {
            let settled = at + settle;
            if settled <= now {
                ack = Some(id);
            } else {
                due = Some(due.map_or(settled, |d| d.min(settled)));
            }
        }
        (ack, due)
    }

    /// Nothing received waits to be recorded or acknowledged.
    pub(crate) fn is_settled(&self) -> bool {
        self.unrecorded.is_empty() && self.recorded.is_empty()
    }

    /// The server confirmed acknowledging `id`: every recorded id up to it is done.
    pub(crate) fn acked(&mut self, id: u64) {
        self.recorded = match id.checked_add(1) {
            Some(next) => self.recorded.split_off(&next),
            None => BTreeMap::new(),
        };
    }
}

/// One consumed stream's state, shared by its consumer and the tasks that keep it open
/// on each connection (which hold the sending side of the queue its items go to, from
/// whichever connection they arrive on; the consumer ends when that side is dropped).
#[derive(Debug)]
pub(crate) struct StreamRuntime {
    pub(crate) kind: StreamKind,
    pub(crate) window: Mutex<AckWindow>,
}

/// One stream item as the connection received it, and when.
pub(crate) type Delivery = (Value, Instant);

/// A stream's runtime and the sending side of its queue.
pub(crate) type StreamEntry = (Arc<StreamRuntime>, StreamSink);

/// Items of one stream held by the host at most, received and not yet recorded: 1024.
/// A slow handler must not let a brclient replaying items, or reopening a stream, grow
/// the queue without end. Past it the connection ends that stream (its opener reopens
/// it after a backoff): brclient keeps and replays every item not acknowledged, so
/// nothing is lost, and no item is dropped by its id (ids repeat after a reset).
pub const MAX_QUEUED_PER_STREAM: usize = 1024;

/// The sending side of a stream's queue, bounded by [`MAX_QUEUED_PER_STREAM`] across
/// every connection: an item counts from its delivery until the consumer is done with
/// it ([`StreamQueue::done`]).
#[derive(Clone)]
pub(crate) struct StreamSink {
    tx: mpsc::UnboundedSender<Delivery>,
    queued: Arc<AtomicUsize>,
}

/// Why a stream item was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotQueued {
    /// [`MAX_QUEUED_PER_STREAM`] items wait already.
    Full,
    /// The consumer is gone.
    Gone,
}

impl StreamSink {
    /// The count of items queued and not yet done with, shared with the queue.
    pub(crate) fn queued(&self) -> Arc<AtomicUsize> {
        self.queued.clone()
    }

    /// Queues `delivery` unless the queue is full or its consumer gone.
    pub(crate) fn offer(&self, delivery: Delivery) -> Result<(), NotQueued> {
        let before = self.queued.fetch_add(1, Ordering::AcqRel);
        if before >= MAX_QUEUED_PER_STREAM {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            return Err(NotQueued::Full);
        }
        self.tx.send(delivery).map_err(|_| {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            NotQueued::Gone
        })
    }
}

/// The receiving side of a stream's queue.
pub(crate) struct StreamQueue {
    pub(crate) rx: mpsc::UnboundedReceiver<Delivery>,
    queued: Arc<AtomicUsize>,
}

impl StreamQueue {
    /// The consumer is done with one item (recorded, or dropped as undecodable).
    pub(crate) fn done(&self) {
        self.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A stream's queue, bounded by [`MAX_QUEUED_PER_STREAM`].
pub(crate) fn stream_queue() -> (StreamSink, StreamQueue) {
    let (tx, rx) = mpsc::unbounded_channel();
    let queued = Arc::new(AtomicUsize::new(0));
    (
        StreamSink {
            tx,
            queued: queued.clone(),
        },
        StreamQueue { rx, queued },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTLE: Duration = Duration::from_millis(500);

    #[test]
    fn an_ack_never_covers_an_unrecorded_item() {
        let t0 = Instant::now();
        let mut w = AckWindow::default();
        // 200 arrives before 100 (tip events are sent from several goroutines).
        w.received(200);
        w.received(100);
        w.recorded(200, t0);
        let late = t0 + SETTLE * 2;
        assert_eq!(w.ackable(late, SETTLE).0, None, "100 is not recorded yet");
        w.recorded(100, t0);
        assert_eq!(w.ackable(late, SETTLE).0, Some(200));
        w.acked(200);
        assert_eq!(w.ackable(late, SETTLE), (None, None));
    }

    #[test]
    fn an_ack_waits_for_the_settle_time_of_the_id_it_names() {
        let t0 = Instant::now();
        let mut w = AckWindow::default();
        w.received(100);
        w.recorded(100, t0);
        w.received(300);
        w.recorded(300, t0 + SETTLE);
        assert_eq!(w.ackable(t0, SETTLE), (None, Some(t0 + SETTLE)));
        assert_eq!(
            w.ackable(t0 + SETTLE, SETTLE),
            (Some(100), Some(t0 + SETTLE * 2))
        );
        assert_eq!(w.ackable(t0 + SETTLE * 2, SETTLE).0, Some(300));
    }

    #[test]
    fn an_item_below_an_earlier_ack_is_acknowledged_again() {
        let t0 = Instant::now();
        let mut w = AckWindow::default();
        w.received(200);
        w.recorded(200, t0);
        w.acked(200);
        // A straggler (a no-op ack), or an id repeating after a reset (a needed one).
        w.received(100);
        w.recorded(100, t0);
        assert_eq!(w.ackable(t0 + SETTLE, SETTLE).0, Some(100));
        w.acked(u64::MAX);
        assert_eq!(w.ackable(t0 + SETTLE, SETTLE), (None, None));
    }

    #[test]
    fn a_redelivery_in_flight_holds_the_ack_back_until_recorded_again() {
        let t0 = Instant::now();
        let mut w = AckWindow::default();
        w.received(100);
        w.recorded(100, t0);
        w.received(100);
        assert_eq!(w.ackable(t0 + SETTLE, SETTLE).0, None);
        w.recorded(100, t0 + SETTLE);
        assert_eq!(
            w.ackable(t0 + SETTLE, SETTLE).0,
            Some(100),
            "the first arrival counts"
        );
    }
}
