//! One session's outbound side: a writer task that chunks each message, stamps its
//! deadline and sends its PMs in order; and the state a session shares with the router.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use brmcp_wire::{Chunks, MessageId, SessionId, encode_part};
use rmcp::model::RequestId;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::clock::Clock;
use crate::error::AdapterError;
use crate::host::DynSender;
use crate::peer::PeerId;
use crate::stats::Counters;

/// What every session's writer needs from its router.
pub(crate) struct Outlet {
    pub(crate) sender: Arc<dyn DynSender>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) chunk_len: usize,
    pub(crate) ttl: Duration,
}

impl Outlet {
    /// Sends one serialized message to `peer` in session `sid`: one `String` per PM, the
    /// parts in order, stopping at the first failed send.
    pub(crate) async fn send_message(
        &self,
        peer: &PeerId,
        sid: SessionId,
        payload: &[u8],
    ) -> Result<(), AdapterError> {
        let mid = MessageId::random().map_err(|e| AdapterError::Entropy(Box::new(e)))?;
        let ttl = i64::try_from(self.ttl.as_secs()).unwrap_or(i64::MAX);
        let exp = self.clock.now().0.saturating_add(ttl).max(1);
        let chunks = Chunks::new(sid, mid, exp, payload, self.chunk_len)?;
        for (header, chunk) in chunks {
            let mut pm = vec![0u8; header.encoded_len(chunk.len())];
            let n = encode_part(&header, chunk, &mut pm)?;
            pm.truncate(n);
            // The encoder writes ASCII only.
            let body = String::from_utf8(pm).map_err(|e| AdapterError::Send {
                peer: *peer,
                source: Box::new(e),
            })?;
            if let Err(source) = self.sender.send_pm_dyn(peer, body).await {
                Counters::bump(&self.counters.send_errors);
                return Err(AdapterError::Send {
                    peer: *peer,
                    source,
                });
            }
            Counters::bump(&self.counters.pms_sent);
        }
        Ok(())
    }
}

/// State a session shares between its transport, its writer and the router task.
#[derive(Debug)]
pub(crate) struct SessionShared {
    pub(crate) peer: PeerId,
    pub(crate) sid: SessionId,
    /// Unique per router, so a stale close never removes a newer session on the same key.
    pub(crate) id: u64,
    epoch: Instant,
    /// Milliseconds since `epoch` of the last inbound or outbound message.
    last_active: AtomicU64,
    closed: AtomicBool,
    /// Requests the peer sent that we have not answered (server role): a session
    /// running a long call is not idle.
    unanswered: Mutex<HashSet<RequestId>>,
}

impl SessionShared {
    pub(crate) fn new(peer: PeerId, sid: SessionId, id: u64, epoch: Instant) -> Self {
        let this = Self {
            peer,
            sid,
            id,
            epoch,
            last_active: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            unanswered: Mutex::new(HashSet::new()),
        };
        this.touch();
        this
    }

    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn last_active(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_active.load(Ordering::Relaxed))
    }

    fn unanswered(&self) -> MutexGuard<'_, HashSet<RequestId>> {
        self.unanswered
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request from the peer is being handled.
    pub(crate) fn request_started(&self, id: RequestId) {
        self.unanswered().insert(id);
    }

    /// A request from the peer was answered or cancelled.
    pub(crate) fn request_ended(&self, id: &RequestId) {
        self.unanswered().remove(id);
    }

    /// Whether a request from the peer is still being handled.
    pub(crate) fn is_busy(&self) -> bool {
        !self.unanswered().is_empty()
    }

    /// Marks the session closed; `true` the first time.
    pub(crate) fn mark_closed(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }
}

/// One message queued for the writer.
pub(crate) struct Outbound {
    pub(crate) payload: Arc<Vec<u8>>,
    /// Told the outcome once every part is sent (or the first send failed).
    pub(crate) ack: Option<oneshot::Sender<Result<(), AdapterError>>>,
}

/// Starts the writer of one session: it sends queued messages one after another, so the
/// PMs leave in the order the messages were queued. It ends when every queue handle is
/// dropped, after sending what was queued.
pub(crate) fn spawn_writer(
    outlet: Arc<Outlet>,
    session: Arc<SessionShared>,
) -> mpsc::UnboundedSender<Outbound> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Outbound>();
    tokio::spawn(async move {
        while let Some(Outbound { payload, ack }) = rx.recv().await {
            session.touch();
            let result = outlet
                .send_message(&session.peer, session.sid, &payload)
                .await;
            if let Err(e) = &result {
                tracing::debug!(peer = %session.peer, sid = %session.sid, error = %e, "send failed");
            }
            if let Some(ack) = ack {
                let _ = ack.send(result);
            }
        }
    });
    tx
}
