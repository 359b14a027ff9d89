//! A session's inbound queue, bounded in messages and in bytes.
//!
//! One lock around a deque, its byte count and the receiver's waker, shared by the
//! router task (the only sender) and the session's transport (the only receiver). Not
//! a channel: tokio's allocates a 32-slot block and a cache-padded header up front,
//! about 1 KiB a session even boxed, where an empty deque allocates nothing and grows
//! only as deep as the session's queue ever was.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};

/// Slots an emptied queue keeps: 8, more than a session's usual depth (a request and
/// its notifications), so a burst past it (a flood, up to the queue's capacity) does
/// not leave the session holding its high-water mark for the rest of its life.
const KEPT_SLOTS: usize = 8;

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Over the message or byte bound: the session is overflowing.
    Full,
    /// The transport is gone.
    Gone,
}

/// What both ends share.
#[derive(Debug)]
struct Queue<T> {
    /// Messages, each boxed (a JSON-RPC message is hundreds of bytes inline) with its
    /// encoded size.
    messages: VecDeque<(Box<T>, usize)>,
    /// The encoded sizes of `messages`, summed.
    bytes: usize,
    /// The receiver closed or dropped its end: nothing more is queued.
    closed: bool,
    /// The sender dropped its end: the receiver ends once the queue is empty.
    sender_gone: bool,
    /// The receiver waiting for a message.
    waker: Option<Waker>,
}

#[derive(Debug)]
struct Shared<T> {
    queue: Mutex<Queue<T>>,
    capacity: usize,
    max_bytes: usize,
}

impl<T> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        // Nothing panics while holding the lock; a poisoned one is still consistent.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The router's end.
#[derive(Debug)]
pub(crate) struct InboxTx<T>(Arc<Shared<T>>);

/// The transport's end.
#[derive(Debug)]
pub(crate) struct InboxRx<T>(Arc<Shared<T>>);

/// A queue of at most `capacity` messages (at least 1) and `max_bytes` of their
/// encoded sizes; a message larger than `max_bytes` is still taken into an empty
/// queue, so any message the reassembler let through can be delivered.
pub(crate) fn inbox<T>(capacity: usize, max_bytes: usize) -> (InboxTx<T>, InboxRx<T>) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue {
            messages: VecDeque::new(),
            bytes: 0,
            closed: false,
            sender_gone: false,
            waker: None,
        }),
        capacity: capacity.max(1),
        max_bytes,
    });
    (InboxTx(shared.clone()), InboxRx(shared))
}

impl<T> InboxTx<T> {
    /// Queues `message`, whose encoded size is `len` bytes.
    pub(crate) fn try_send(&self, message: T, len: usize) -> Result<(), Refused> {
        let mut queue = self.0.lock();
        if queue.closed {
            return Err(Refused::Gone);
        }
        if queue.messages.len() >= self.0.capacity
            || (queue.bytes > 0 && queue.bytes.saturating_add(len) > self.0.max_bytes)
        {
            return Err(Refused::Full);
        }
        queue.messages.push_back((Box::new(message), len));
        queue.bytes = queue.bytes.saturating_add(len);
        wake_unlocked(queue);
        Ok(())
    }

    /// Whether the transport has taken every message queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().messages.is_empty()
    }
}

impl<T> Drop for InboxTx<T> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.sender_gone = true;
        wake_unlocked(queue);
    }
}

/// Wakes the receiver after releasing `queue`'s lock, so the woken task never
/// contends for it.
fn wake_unlocked<T>(mut queue: MutexGuard<'_, Queue<T>>) {
    let waker = queue.waker.take();
    drop(queue);
    if let Some(waker) = waker {
        waker.wake();
    }
}

impl<T> InboxRx<T> {
    /// The next message; `None` once the router dropped its end or this one was closed,
    /// and the queue is empty.
    /// Cancel-safe: a message is taken only by the poll that returns it.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        poll_fn(|cx| {
            let mut queue = self.0.lock();
            if let Some((message, len)) = queue.messages.pop_front() {
                queue.bytes = queue.bytes.saturating_sub(len);
                if queue.messages.is_empty() && queue.messages.capacity() > KEPT_SLOTS {
                    queue.messages.shrink_to(KEPT_SLOTS);
                }
                return Poll::Ready(Some(*message));
            }
            if queue.sender_gone || queue.closed {
                return Poll::Ready(None);
            }
            match &mut queue.waker {
                Some(waker) => waker.clone_from(cx.waker()),
                none => *none = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }

    /// Refuses further messages; those queued can still be received.
    pub(crate) fn close(&mut self) {
        self.0.lock().closed = true;
    }
}

impl<T> Drop for InboxRx<T> {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        queue.closed = true;
        // What nobody will receive is freed now, not with the sender's end (and outside
        // the lock).
        let unreceived = std::mem::take(&mut queue.messages);
        queue.bytes = 0;
        queue.waker = None;
        drop(queue);
        drop(unreceived);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bounded_by_count_and_by_bytes() {
        let (tx, mut rx) = inbox::<u32>(3, 100);
        // Larger than the byte bound, but the queue is empty: taken.
        tx.try_send(1, 150).unwrap();
        assert_eq!(tx.try_send(2, 1), Err(Refused::Full), "over the bytes");
        assert_eq!(rx.recv().await, Some(1));
        tx.try_send(2, 60).unwrap();
        tx.try_send(3, 40).unwrap();
        assert_eq!(tx.try_send(4, 1), Err(Refused::Full), "101 > 100 bytes");
        assert_eq!(rx.recv().await, Some(2));
        tx.try_send(4, 10).unwrap();
        tx.try_send(5, 10).unwrap();
        assert_eq!(tx.try_send(6, 0), Err(Refused::Full), "three messages");
        for want in 3..=5 {
            assert_eq!(rx.recv().await, Some(want));
        }
        assert_eq!(tx.0.lock().bytes, 0);
        tx.try_send(6, 1).unwrap();
        rx.close();
        assert_eq!(tx.try_send(7, 1), Err(Refused::Gone));
        assert_eq!(tx.0.lock().bytes, 1, "a refused message is not counted");
        assert_eq!(
            rx.recv().await,
            Some(6),
            "what was queued is still received"
        );
        assert_eq!(
            rx.recv().await,
            None,
            "closed and drained, the sender still there"
        );
        drop(tx);
        assert_eq!(rx.recv().await, None);
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_and_a_dropped_wait_loses_nothing() {
        let (tx, mut rx) = inbox::<u32>(4, 100);
        // A wait dropped before anything came takes nothing with it.
        let pending = tokio::time::timeout(std::time::Duration::from_millis(20), rx.recv());
        assert!(pending.await.is_err());
        let sender = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            tx.try_send(7, 1).unwrap();
            tx.try_send(8, 1).unwrap();
            // The sender's end goes: the receiver still gets what was queued.
        });
        assert_eq!(rx.recv().await, Some(7));
        sender.await.unwrap();
        assert_eq!(rx.recv().await, Some(8));
        assert_eq!(
            rx.recv().await,
            None,
            "the sender is gone and the queue empty"
        );
    }

    #[tokio::test]
    async fn a_drained_burst_gives_back_its_room() {
        let (tx, mut rx) = inbox::<u32>(128, usize::MAX);
        for n in 0..100 {
            tx.try_send(n, 1).unwrap();
        }
        assert!(tx.0.lock().messages.capacity() >= 100);
        for n in 0..100 {
            assert_eq!(rx.recv().await, Some(n));
        }
        assert!(tx.0.lock().messages.capacity() <= KEPT_SLOTS);
    }

    #[test]
    fn a_dropped_receiver_refuses_and_frees_what_was_queued() {
        let (tx, rx) = inbox::<Arc<()>>(4, 100);
        let held = Arc::new(());
        tx.try_send(held.clone(), 1).unwrap();
        assert!(!tx.is_empty());
        drop(rx);
        assert_eq!(Arc::strong_count(&held), 1, "freed with the receiver");
        assert_eq!(tx.try_send(held.clone(), 1), Err(Refused::Gone));
        assert!(tx.is_empty());
    }
}
