//! Parking sessions at rest: a session a peer opened parks
//! [`server_park_after`](crate::RouterConfig::server_park_after) after it came to rest
//! (its writer drained with no request in progress), and a session we dialed for a
//! [`Client`](crate::Client) parks
//! [`client_park_after`](crate::RouterConfig::client_park_after) after it came to rest
//! (connected, or its last lease dropped), if nothing happened since.
//!
//! The writer or the client reports a rest once (`SessionShared::claim_rest_report`);
//! the session then waits in a heap by due time, so each rest costs one push and one
//! pop, never a scan of every session. A session active again by its due time is put
//! back for its new due time, without a new report; one busy then reports its next
//! rest. The timer's scan catches a session that came to rest unreported.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

use brmcp_wire::SessionId;
use tokio::time::Instant;

use super::{Driver, Entry, Inbox};
use crate::peer::PeerId;

/// The sessions at rest, soonest due first.
#[derive(Default)]
pub(super) struct Resting {
    due: BinaryHeap<Reverse<Due>>,
}

/// One session at rest: its key, its state's router-unique id (a state a park or a
/// close retired is stale) and when it is due to park.
struct Due {
    at: Instant,
    id: u64,
    key: (PeerId, SessionId),
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.id) == (other.at, other.id)
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.id).cmp(&(other.at, other.id))
    }
}

impl Resting {
    /// When the soonest session at rest is due to park.
    pub(super) fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse(due)| due.at)
    }
}

impl Driver {
    /// Session `key` (state `id`) reported at rest: by its writer, or (one we dialed)
    /// by its client.
    pub(super) fn at_rest(&mut self, key: (PeerId, SessionId), id: u64) {
        let Some(entry) = self.sessions.get(&key) else {
            return;
        };
        // A session not to be parked (a dialed one no client holds yet, say) keeps its
        // report claimed, so it reports no more; a client that comes to hold it has it
        // looked at then (`parkable`).
        let Some(after) = self.park_after(entry) else {
            return;
        };
        if entry.shared.id != id {
            return;
        }
        if let Some(at) = entry.shared.last_active().checked_add(after) {
            self.resting.due.push(Reverse(Due { at, id, key }));
        }
    }

    /// The park delay of `entry`'s session if it may be parked now: one a peer opened,
    /// or one we dialed that a client holds, neither parked.
    fn park_after(&self, entry: &Entry) -> Option<Duration> {
        match entry.inbox {
            Inbox::Server(_) if entry.inbound => self.config.server_park_after,
            Inbox::Client(_) if entry.slot.is_some() => self.config.client_park_after,
            _ => None,
        }
    }

    /// Parks every session at rest whose time has come and that stayed at rest; puts
    /// back one active since, for its new due time.
    pub(super) fn park_rested(&mut self, now: Instant) {
        while let Some(Reverse(due)) = self.resting.due.peek() {
            if due.at > now {
                break;
            }
            let Some(Reverse(Due { id, key, .. })) = self.resting.due.pop() else {
                break;
            };
            let Some(entry) = self.sessions.get(&key) else {
                continue;
            };
            if entry.shared.id != id {
                continue;
            }
            let Some(after) = self.park_after(entry) else {
                continue;
            };
            if entry.shared.is_busy() || (entry.inbound && entry.shared.has_outbound()) {
                // Its writer (or the end of its last request) reports the next rest.
                entry.shared.rest_unreported();
                continue;
            }
            // A dialed session's writer reports nothing: one still sending, or whose
            // service has the server's messages still to take, is looked at again.
            let untaken = matches!(&entry.inbox, Inbox::Client(inbox) if !inbox.is_empty());
            if !entry.inbound
                && (entry.shared.has_outbound() || untaken)
                && let Some(at) = now.checked_add(after)
            {
                self.resting.due.push(Reverse(Due { at, id, key }));
                continue;
            }
            match entry.shared.last_active().checked_add(after) {
                Some(at) if at > now => self.resting.due.push(Reverse(Due { at, id, key })),
                // A session left running (a notification not yet taken, or a lease
                // held) reports its next rest; the scan catches it meanwhile.
                Some(_) => {
                    entry.shared.rest_unreported();
                    if entry.inbound {
                        self.park(key);
                    } else {
                        self.park_client(key);
                    }
                }
                None => entry.shared.rest_unreported(),
            }
        }
    }
}
