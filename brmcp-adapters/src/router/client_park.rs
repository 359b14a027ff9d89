//! The driver's side of parking dialed sessions held by a [`Client`](crate::Client) or
//! another [`ServiceSlot`]: parking an idle one, and reviving it for a lease (an
//! unpark) or for the server's message. Every revival runs here, on the driver, so a
//! session never gets two services.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Weak};

use brmcp_wire::SessionId;
use rmcp::model::ServerJsonRpcMessage;
use tokio::sync::oneshot;

use super::{CloseReason, Driver, Entry, Inbox};
use crate::ServiceSlot;
use crate::inbox::inbox;
use crate::peer::PeerId;
use crate::stats::Counters;
use crate::transport::{BrTransport, Waits};

type Key = (PeerId, SessionId);

impl Driver {
    /// The dialed session `key` (if it is still the one with router-unique `id`) is held
    /// by a client, which may park it.
    pub(super) fn parkable(&mut self, key: Key, id: u64, slot: Weak<dyn ServiceSlot>) {
        let Some(entry) = self.sessions.get_mut(&key) else {
            return;
        };
        if entry.inbound || entry.shared.id != id {
            return;
        }
        entry.slot = Some(slot);
        // Held now, at rest until its first use: parked a park delay later, whatever
        // its rests reported before.
        let id = entry.shared.id;
        let _ = entry.shared.claim_rest_report();
        self.at_rest(key, id);
        self.schedule_idle(self.config.client_park_scan_after());
    }

    /// A client closed: its session goes with it, if it is still that client's (a
    /// parked one has no transport to close it).
    pub(super) fn unslot(&mut self, key: Key, slot: &Weak<dyn ServiceSlot>) {
        if self.held_by(key, slot).is_some() {
            self.close(key, CloseReason::Transport);
        }
    }

    /// The session `key`'s entry, if it is the one `slot`'s client holds: a dial on the
    /// same sid (a resumed sid, or a random one that collided) replaces the entry.
    fn held_by(&self, key: Key, slot: &Weak<dyn ServiceSlot>) -> Option<&Entry> {
        self.sessions.get(&key).filter(|entry| {
            entry
                .slot
                .as_ref()
                .is_some_and(|held| Weak::ptr_eq(held, slot))
        })
    }

    /// Parks the client session `key` if its client holds no lease: its service goes
    /// (after the session's state is swapped, so the dropped transport's close is
    /// stale), its entry stays. `false` if it was left running.
    pub(super) fn park_client(&mut self, key: Key) -> bool {
        let Some(entry) = self.sessions.get_mut(&key) else {
            return true;
        };
        let Some(slot) = entry.slot.as_ref().and_then(Weak::upgrade) else {
            // The client is gone; its close is on the way.
            return true;
        };
        let Some(service) = slot.park() else {
            return false;
        };
        let id = self.next_id.fetch_add(1, Relaxed);
        let parked = Arc::new(entry.shared.parked(id));
        std::mem::replace(&mut entry.shared, parked).mark_closed();
        entry.inbox = Inbox::ClientParked;
        drop(service);
        Counters::bump(&self.counters.client_parked);
        tracing::debug!(peer = %key.0, sid = %key.1, "client session parked");
        true
    }

    /// A lease of `slot`'s client wants the client session `key` running: revived if
    /// parked. `done` is told once it runs, dropped if the session is gone or is no
    /// longer that client's (its lease then ends closed rather than asking again).
    pub(super) fn revive_for_lease(
        &mut self,
        key: Key,
        slot: &Weak<dyn ServiceSlot>,
        done: oneshot::Sender<()>,
    ) {
        let Some(entry) = self.held_by(key, slot) else {
            return;
        };
        if matches!(entry.inbox, Inbox::ClientParked) && !self.revive_client(key, None) {
            return;
        }
        let _ = done.send(());
    }

    /// Revives the parked client session `key`: a new inbox, holding `first` (the
    /// server's message that revived it, with its size) if given, and a new transport
    /// on the same state, handed to the client. `false` if the session is gone.
    pub(super) fn revive_client(
        &mut self,
        key: Key,
        first: Option<(ServerJsonRpcMessage, usize)>,
    ) -> bool {
        let Some(ctl) = self.ctl_weak.upgrade() else {
            return false;
        };
        let Some(entry) = self.sessions.get(&key) else {
            return false;
        };
        let Some(slot) = entry.slot.as_ref().and_then(Weak::upgrade) else {
            self.close(key, CloseReason::Transport);
            return false;
        };
        let shared = entry.shared.clone();
        let (inbox_tx, inbox_rx) = inbox(self.config.inbox_capacity, self.config.max_inbox_bytes);
        if let Some((message, len)) = first {
            // An empty inbox takes one message of any size.
            let _ = inbox_tx.try_send(message, len);
        }
        let mut transport = BrTransport::new(
            shared.clone(),
            inbox_rx,
            ctl,
            self.outlet.clone(),
            Waits {
                request_timeout: self.config.request_timeout,
                silence_probe: self.config.silence_probe,
            },
            self.config.max_outbound_bytes,
        );
        // Should the server have lost the session, the revived service recovers it
        // with the first service's `initialize`.
        transport.seed_handshake();
        if !slot.revive(transport) {
            self.close(key, CloseReason::Transport);
            return false;
        }
        if let Some(entry) = self.sessions.get_mut(&key) {
            entry.inbox = Inbox::Client(inbox_tx);
        }
        shared.touch();
        Counters::bump(&self.counters.client_revived);
        tracing::debug!(peer = %key.0, sid = %key.1, "client session revived");
        // Looked at a park delay from now: parked again then if the message that
        // revived it left it at rest (a request it serves, or a lease, reports the
        // next rest).
        if shared.claim_rest_report() {
            self.at_rest(key, shared.id);
        }
        self.schedule_idle(self.config.client_park_scan_after());
        true
    }
}
