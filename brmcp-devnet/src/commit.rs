//! The state lock's write-ahead step: changes made under the lock are journaled as
//! one group when it is released, before the stream lines they made are sent; and
//! the conversions between the running state and the kept one (see `durable`).

use std::ops::{Deref, DerefMut};
use std::sync::MutexGuard;

use super::State;
use super::durable;
use super::node::Log;
use super::relay::Relay;

impl State {
    /// The state restored from `snap`, with no node started yet.
    pub(super) fn restored(snap: durable::Snapshot, journal: durable::Journal) -> Self {
        let relay = Relay {
            queues: snap.queues.into_iter().map(|(k, v)| (k.0, v)).collect(),
            balances: snap.balances.into_iter().map(|(k, v)| (k.0, v)).collect(),
            expired: snap.expired,
            tips: snap.tips,
            next_tip: snap.next_tip,
        };
        Self {
            nodes: Vec::new(),
            relay,
            dormant: snap.nodes.into_iter().collect(),
            pending: Vec::new(),
            journal: Some(journal),
        }
    }

    /// Everything kept, for a compaction.
    fn snapshot(&self) -> durable::Snapshot {
        let mut snap = durable::Snapshot::empty(0);
        snap.balances = self
            .relay
            .balances
            .iter()
            .map(|(k, v)| (durable::Uid(*k), *v))
            .collect();
        snap.queues = self
            .relay
            .queues
            .iter()
            .map(|(k, v)| (durable::Uid(*k), v.clone()))
            .collect();
        snap.expired = self.relay.expired;
        snap.tips = self.relay.tips.clone();
        snap.next_tip = self.relay.next_tip;
        snap.nodes = self.dormant.iter().map(|(k, v)| (*k, v.clone())).collect();
        for n in &self.nodes {
            snap.nodes.insert(
                durable::Uid(n.uid),
                durable::NodeSnap {
                    nick: n.nick.clone(),
                    contacts: n.contacts.clone(),
                    logs: std::array::from_fn(|i| n.logs[i].clone()),
                    posts: n.logs[Log::Posts.index()].clone(),
                    post_statuses: n.logs[Log::PostStatus.index()].clone(),
                    post_subscribers: n
                        .post_subscribers
                        .iter()
                        .map(|u| durable::Uid(*u))
                        .collect(),
                    recent_tips: n.recent_tips.clone(),
                },
            );
        }
        snap
    }

    /// Stops journaling: tasks still winding down after a stop change nothing kept,
    /// so a devnet started next on the directory owns it alone.
    pub(super) fn close_journal(&mut self) {
        self.journal = None;
    }

    /// Journals the changes made under this lock as one group, then sends the stream
    /// lines they made: nothing is seen before it is kept. Returns whether the
    /// changes are kept (none, or journaled); changes not kept (the journal closed
    /// by a stop, or a failed write) send no stream line, and a request that made
    /// them is not answered as if they were. Runs again when the lock is released,
    /// with nothing left to do.
    pub(crate) fn commit(&mut self) -> bool {
        let mut ops = std::mem::take(&mut self.pending);
        for n in &mut self.nodes {
            ops.append(&mut n.pending);
        }
        let kept = if ops.is_empty() {
            true
        } else if let Some(mut journal) = self.journal.take() {
            let written = match journal.append(&ops) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(error = %e, "devnet journal: write failed; this change is not kept");
                    false
                }
            };
            if journal.wants_compaction()
                && let Err(e) = journal.compact(self.snapshot())
            {
                tracing::error!(error = %e, "devnet journal: compaction failed");
            }
            self.journal = Some(journal);
            written
        } else {
            // Stopped: a task still winding down changes nothing kept and shows
            // nothing of it.
            false
        };
        for n in &mut self.nodes {
            for (out, line) in n.outbox.drain(..) {
                if kept {
                    let _ = out.send(line);
                }
            }
        }
        kept
    }
}

/// The state lock; releasing it commits the changes made under it
/// ([`State::commit`]).
pub(crate) struct StateGuard<'a>(pub(super) MutexGuard<'a, State>);

impl Deref for StateGuard<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.0
    }
}

impl DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.0
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        let _ = self.0.commit();
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;
    use crate::node::{Event, Node, StreamKind, Sub};

    fn tip() -> Event {
        Event::TipReceived {
            uid: [2; 32],
            amount_matoms: 1000,
        }
    }

    /// A change made after the journal closed (a stop) is reported not kept and sends
    /// no stream line; one made before is kept, sent, and back after a reload.
    #[test]
    fn nothing_after_the_close_is_kept_or_shown() {
        let dir = tempfile::tempdir().unwrap();
        let (snap, journal) = durable::open(dir.path(), 1 << 20, durable::COMPACT_BYTES).unwrap();
        let mut st = State::restored(snap, journal);
        let mut node = Node::new("bob".into(), [1; 32], [0; 32], "brclient", true, 1 << 20);
        let (out, mut lines) = mpsc::unbounded_channel();
        node.subs.push(Sub {
            conn: 1,
            kind: StreamKind::TipReceived.into(),
            method: "PaymentsService.TipStream".into(),
            out,
        });
        st.nodes.push(node);
        st.pending.push(durable::Op::Node {
            uid: durable::Uid([1; 32]),
            nick: "bob".into(),
        });
        let kept = st.nodes[0].append(StreamKind::TipReceived, tip());
        assert!(st.commit(), "journaled");
        assert!(lines.try_recv().is_ok(), "its stream line went out");

        st.close_journal();
        st.nodes[0].append(StreamKind::TipReceived, tip());
        st.nodes[0].ack(StreamKind::TipReceived, kept);
        assert!(!st.commit(), "not kept after the close");
        assert!(lines.try_recv().is_err(), "and nothing of it shown");
        assert!(st.commit(), "nothing left to keep");

        let back = durable::read_only(dir.path()).unwrap().unwrap();
        let log =
            back.nodes[&durable::Uid([1; 32])].logs[StreamKind::TipReceived.index()].inspect();
        assert_eq!(log.len(), 1, "only the change before the close");
        assert!(!log[0].acked, "the ack after the close was not kept");
    }
}
