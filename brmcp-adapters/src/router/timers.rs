//! The driver's timers: reassembly deadlines, idle expiry, and the parking of idle
//! sessions of either role.

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use brmcp_wire::Assembler;
use tokio::time::Instant;

use super::{CloseReason, Driver, Inbox, PeerKey};
use crate::config::ASSEMBLER_SLOTS;

/// How much early a session may be parked, so that one scan of the sessions parks every
/// one due within it: 100 ms. Sessions opened one after another come due one after
/// another; without it, each would cost a scan of all of them.
const PARK_SCAN_GAP: Duration = Duration::from_millis(100);

impl Driver {
    pub(super) fn next_wake(
        &self,
        assembler: &Assembler<'_, PeerKey, ASSEMBLER_SLOTS>,
    ) -> Option<Instant> {
        let reassembly = assembler.next_deadline().and_then(|deadline| {
            let secs = deadline.0.saturating_sub(self.config.clock.now().0).max(0);
            Instant::now().checked_add(Duration::from_secs(secs.unsigned_abs()))
        });
        [reassembly, self.next_idle_check, self.resting.next_due()]
            .into_iter()
            .flatten()
            .min()
    }

    pub(super) fn on_timer(&mut self, assembler: &mut Assembler<'_, PeerKey, ASSEMBLER_SLOTS>) {
        let expired = assembler.expire(self.config.clock.now());
        self.counters
            .partials_expired
            .fetch_add(expired as u64, Relaxed);
        self.update_buffered(assembler);

        let now = Instant::now();
        self.park_rested(now);
        if self.next_idle_check.is_some_and(|at| at <= now) {
            let mut next: Option<Instant> = None;
            let mut idle = Vec::new();
            let mut park = Vec::new();
            let mut park_clients = Vec::new();
            let park_after = self.config.park_scan_after();
            let client_park_after = self.config.client_park_scan_after();
            for (key, entry) in &self.sessions {
                // A session with a request in progress is busy, not idle. A timeout too
                // large to add means never.
                let busy = entry.shared.is_busy();
                let base = if busy {
                    now
                } else {
                    entry.shared.last_active()
                };
                // A session whose writer still has bytes to send (a stalled host) is
                // not parked either: it is looked at again a park delay later.
                let writing = entry.shared.has_outbound();
                let park_base = if writing { now } else { base };
                if let Some(after) = park_after
                    && entry.inbound
                    && !matches!(entry.inbox, Inbox::Parked)
                    && let Some(due) = park_base.checked_add(after)
                {
                    if !busy && !writing && due <= now + PARK_SCAN_GAP {
                        park.push(*key);
                    } else {
                        next = Some(next.map_or(due, |n| n.min(due)));
                    }
                }
                // A client session parks on the same terms, and not while its
                // service has messages still to take from its inbox.
                if let Some(after) = client_park_after
                    && entry.slot.is_some()
                    && let Inbox::Client(inbox) = &entry.inbox
                {
                    let taken = inbox.is_empty();
                    let park_base = if taken { park_base } else { now };
                    if let Some(due) = park_base.checked_add(after) {
                        if !busy && !writing && taken && due <= now + PARK_SCAN_GAP {
                            park_clients.push((*key, after));
                        } else {
                            next = Some(next.map_or(due, |n| n.min(due)));
                        }
                    }
                }
                let Some(due) = entry.idle.and_then(|timeout| base.checked_add(timeout)) else {
                    continue;
                };
                if due <= now {
                    idle.push(*key);
                } else {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
            for key in idle {
                self.close(key, CloseReason::Idle);
            }
            for key in park {
                self.park(key);
            }
            for (key, after) in park_clients {
                // A lease held: looked at again a park delay later (its end counts
                // as activity).
                if !self.park_client(key)
                    && let Some(due) = now.checked_add(after)
                {
                    next = Some(next.map_or(due, |n| n.min(due)));
                }
            }
            self.next_idle_check = next;
        }
    }

    pub(super) fn schedule_idle(&mut self, timeout: Option<Duration>) {
        if let Some(due) = timeout.and_then(|t| Instant::now().checked_add(t)) {
            self.next_idle_check = Some(self.next_idle_check.map_or(due, |n| n.min(due)));
        }
    }
}
