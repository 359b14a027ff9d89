//! Parking sessions at rest: a session a peer opened parks
//! [`server_park_after`](crate::RouterConfig::server_park_after) after it came to rest
//! (its writer drained with no request in progress) if nothing happened since.
//!
//! The writer reports a rest once (`SessionShared::claim_rest_report`); the session
//! then waits in a heap by due time, so each rest costs one push and one pop, never a
//! scan of every session. A session active again by its due time is put back for
//! its new due time, without a new report; one busy then reports its next rest.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use brmcp_wire::SessionId;
use tokio::time::Instant;

use super::{Driver, Inbox};
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
    /// The writer of session `key` (state `id`) reported it at rest.
    pub(super) fn at_rest(&mut self, key: (PeerId, SessionId), id: u64) {
        let Some(after) = self.config.server_park_after else {
            return;
        };
        let Some(entry) = self.sessions.get(&key) else {
            return;
        };
        // A dialed session's rest is not this one's to park (its holder parks it after
        // `client_park_after`); one parked already has nothing to park.
        if entry.shared.id != id || !entry.inbound || matches!(entry.inbox, Inbox::Parked) {
            return;
        }
        if let Some(at) = entry.shared.last_active().checked_add(after) {
            self.resting.due.push(Reverse(Due { at, id, key }));
        }
    }

    /// Parks every session at rest whose time has come and that stayed at rest; puts
    /// back one active since, for its new due time.
    pub(super) fn park_rested(&mut self, now: Instant) {
        let Some(after) = self.config.server_park_after else {
            return;
        };
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
            if entry.shared.id != id || matches!(entry.inbox, Inbox::Parked) {
                continue;
            }
            if entry.shared.is_busy() || entry.shared.has_outbound() {
                // Its writer reports the next rest.
                entry.shared.rest_unreported();
                continue;
            }
            match entry.shared.last_active().checked_add(after) {
                Some(at) if at > now => self.resting.due.push(Reverse(Due { at, id, key })),
                // A session left running (a notification not yet taken, say) reports
                // its next rest; the scan catches it meanwhile.
                Some(_) => {
                    entry.shared.rest_unreported();
                    self.park(key);
                }
                None => entry.shared.rest_unreported(),
            }
        }
    }
}
