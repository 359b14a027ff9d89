//! A session's inbound queue, bounded in messages and in bytes.
//!
//! Only the router task sends, so the byte check and the add need no lock; the
//! session's transport subtracts as it receives.
//!
//! Messages are queued boxed: the channel allocates its slots in blocks of 32 up front,
//! and a JSON-RPC message is hundreds of bytes inline, so an idle session's empty queue
//! would hold about 12 KiB where a box per slot holds 512 bytes.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::TrySendError;

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Over the message or byte bound: the session is overflowing.
    Full,
    /// The transport is gone.
    Gone,
}

/// The router's end.
#[derive(Debug)]
pub(crate) struct InboxTx<T> {
    tx: mpsc::Sender<(Box<T>, usize)>,
    bytes: Arc<AtomicUsize>,
    max_bytes: usize,
}

/// The transport's end.
#[derive(Debug)]
pub(crate) struct InboxRx<T> {
    rx: mpsc::Receiver<(Box<T>, usize)>,
    bytes: Arc<AtomicUsize>,
}

/// A queue of at most `capacity` messages (at least 1) and `max_bytes` of their
/// encoded sizes; a message larger than `max_bytes` is still taken into an empty
/// queue, so any message the reassembler let through can be delivered.
pub(crate) fn inbox<T>(capacity: usize, max_bytes: usize) -> (InboxTx<T>, InboxRx<T>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let bytes = Arc::new(AtomicUsize::new(0));
    (
        InboxTx {
            tx,
            bytes: bytes.clone(),
            max_bytes,
        },
        InboxRx { rx, bytes },
    )
}

impl<T> InboxTx<T> {
    /// Queues `message`, whose encoded size is `len` bytes.
    pub(crate) fn try_send(&self, message: T, len: usize) -> Result<(), Refused> {
        let queued = self.bytes.load(Relaxed);
        if queued > 0 && queued.saturating_add(len) > self.max_bytes {
            return Err(if self.tx.is_closed() {
                Refused::Gone
            } else {
                Refused::Full
            });
        }
        // Counted before the send, so the receiver never subtracts what was not added.
        self.bytes.fetch_add(len, Relaxed);
        self.tx.try_send((Box::new(message), len)).map_err(|e| {
            self.bytes.fetch_sub(len, Relaxed);
            match e {
                TrySendError::Full(_) => Refused::Full,
                TrySendError::Closed(_) => Refused::Gone,
            }
        })
    }
}

impl<T> InboxTx<T> {
    /// Whether the transport has taken every message queued.
    pub(crate) fn is_empty(&self) -> bool {
        self.tx.capacity() == self.tx.max_capacity()
    }
}

impl<T> InboxRx<T> {
    /// The next message; `None` once the router dropped its end and the queue is empty.
    pub(crate) async fn recv(&mut self) -> Option<T> {
        let (message, len) = self.rx.recv().await?;
        self.bytes.fetch_sub(len, Relaxed);
        Some(*message)
    }

    /// Refuses further messages; those queued can still be received.
    pub(crate) fn close(&mut self) {
        self.rx.close();
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
        assert_eq!(tx.bytes.load(Relaxed), 0);
        rx.close();
        assert_eq!(tx.try_send(7, 1), Err(Refused::Gone));
        assert_eq!(
            tx.bytes.load(Relaxed),
            0,
            "a refused message is not counted"
        );
        drop(tx);
        assert_eq!(rx.recv().await, None);
    }
}
