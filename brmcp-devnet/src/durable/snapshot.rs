//! The whole kept state as one value ([`Snapshot`]) and how a change applies to it:
//! what loading rebuilds from the journal and what a compaction writes.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{Op, PendingTip, RECENT_TIPS, SNAPSHOT_VERSION, TipRecord, Uid};
use crate::node::{Contact, Log, ReplayLog};
use crate::relay::Queued;

/// A node's kept state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeSnap {
    pub(crate) nick: String,
    pub(crate) contacts: Vec<Contact>,
    /// By [`StreamKind::index`](crate::node::StreamKind::index).
    pub(crate) logs: [ReplayLog; 4],
    /// The posts log; a directory kept before posts has none.
    #[serde(default = "empty_log")]
    pub(crate) posts: ReplayLog,
    /// The post status log; a directory kept before it has none.
    #[serde(default = "empty_log")]
    pub(crate) post_statuses: ReplayLog,
    /// Who subscribed to this node's posts.
    #[serde(default)]
    pub(crate) post_subscribers: Vec<Uid>,
    /// Newest last, at most [`RECENT_TIPS`].
    pub(crate) recent_tips: VecDeque<TipRecord>,
}

impl NodeSnap {
    fn new(nick: String, replay_file_size: u64) -> Self {
        Self {
            nick,
            contacts: Vec::new(),
            logs: std::array::from_fn(|_| ReplayLog::new(replay_file_size)),
            posts: ReplayLog::new(replay_file_size),
            post_statuses: ReplayLog::new(replay_file_size),
            post_subscribers: Vec::new(),
            recent_tips: VecDeque::new(),
        }
    }

    /// A log by [`Log::index`].
    pub(crate) fn log_mut(&mut self, log: Log) -> &mut ReplayLog {
        match log {
            Log::Stream(k) => &mut self.logs[k.index()],
            Log::Posts => &mut self.posts,
            Log::PostStatus => &mut self.post_statuses,
        }
    }
}

/// A posts log missing from an older directory (its file size is set on load).
fn empty_log() -> ReplayLog {
    ReplayLog::new(0)
}

/// Appends `record` to a bounded recent-tips list.
pub(crate) fn push_recent(list: &mut VecDeque<TipRecord>, record: TipRecord) {
    if list.len() == RECENT_TIPS {
        list.pop_front();
    }
    list.push_back(record);
}

/// The whole kept state, as of journal line `seq`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Snapshot {
    pub(crate) version: u32,
    pub(crate) seq: u64,
    pub(crate) balances: BTreeMap<Uid, i64>,
    pub(crate) queues: BTreeMap<Uid, VecDeque<Queued>>,
    pub(crate) expired: u64,
    pub(crate) nodes: BTreeMap<Uid, NodeSnap>,
    pub(crate) tips: BTreeMap<u64, PendingTip>,
    pub(crate) next_tip: u64,
    /// The replay-file size of logs created while applying.
    #[serde(skip)]
    pub(super) replay_file_size: u64,
}

impl Snapshot {
    pub(crate) fn empty(replay_file_size: u64) -> Self {
        Self {
            version: SNAPSHOT_VERSION,
            seq: 0,
            balances: BTreeMap::new(),
            queues: BTreeMap::new(),
            expired: 0,
            nodes: BTreeMap::new(),
            tips: BTreeMap::new(),
            next_tip: 1,
            replay_file_size,
        }
    }

    fn node(&mut self, uid: Uid) -> Result<&mut NodeSnap, String> {
        self.nodes
            .get_mut(&uid)
            .ok_or_else(|| format!("no node {}", hex::encode(uid.0)))
    }

    /// Applies one change, as the running devnet made it.
    pub(super) fn apply(&mut self, op: Op) -> Result<(), String> {
        match op {
            Op::Node { uid, nick } => {
                let size = self.replay_file_size;
                match self.nodes.get_mut(&uid) {
                    Some(n) => n.nick = nick,
                    None => {
                        self.nodes.insert(uid, NodeSnap::new(nick, size));
                    }
                }
            }
            Op::Contact { node, uid, nick } => {
                let contacts = &mut self.node(node)?.contacts;
                match contacts.iter_mut().find(|c| c.uid == uid.0) {
                    Some(c) => c.nick = nick,
                    None => contacts.push(Contact { uid: uid.0, nick }),
                }
            }
            Op::Store { node, kind, event } => {
                self.node(node)?.log_mut(kind).store(event);
            }
            Op::Ack { node, kind, seq } => self.node(node)?.log_mut(kind).ack(seq),
            Op::NextFile { node, kind, fid } => {
                self.node(node)?.log_mut(kind).set_next_file(fid);
            }
            Op::PostSub {
                author,
                subscriber,
                on,
            } => {
                let subs = &mut self.node(author)?.post_subscribers;
                subs.retain(|s| s != &subscriber);
                if on {
                    subs.push(subscriber);
                }
            }
            Op::Balance { uid, matoms } => {
                self.balances.insert(uid, matoms);
            }
            Op::Enqueue { to, item } => self.queues.entry(to).or_default().push_back(item),
            Op::Flush { to, expired } => {
                self.queues.remove(&to);
                self.expired = self.expired.saturating_add(expired);
            }
            Op::Dequeue { to, expired } => {
                let queue = self
                    .queues
                    .get_mut(&to)
                    .ok_or_else(|| format!("no queue for {}", hex::encode(to.0)))?;
                queue.pop_front();
                if queue.is_empty() {
                    self.queues.remove(&to);
                }
                self.expired = self.expired.saturating_add(expired);
            }
            Op::TipStart { tip } => {
                self.next_tip = self.next_tip.max(tip.id.saturating_add(1));
                self.tips.insert(tip.id, tip);
            }
            Op::TipAttempt { id, attempts } => {
                self.tips
                    .get_mut(&id)
                    .ok_or_else(|| format!("no tip {id}"))?
                    .attempts = attempts;
            }
            Op::TipEnd { id } => {
                self.tips.remove(&id);
            }
            Op::Tipped { record } => {
                for uid in [record.payer, record.payee] {
                    if let Some(n) = self.nodes.get_mut(&uid) {
                        push_recent(&mut n.recent_tips, record.clone());
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod posts_tests {
    use super::*;
    use crate::node::Event;

    /// A node kept by a devnet from before posts (no posts log, no subscribers)
    /// loads with both empty, and a kept one round-trips.
    #[test]
    fn a_node_kept_before_posts_loads_and_posts_round_trip() {
        let mut snap = NodeSnap::new("alice".into(), 1 << 20);
        let mut old = serde_json::to_value(&snap).unwrap();
        let map = old.as_object_mut().unwrap();
        assert!(map.remove("posts").is_some() && map.remove("post_subscribers").is_some());
        let loaded: NodeSnap = serde_json::from_value(old).unwrap();
        assert!(loaded.post_subscribers.is_empty() && loaded.posts.inspect().is_empty());

        let post = Event::Post {
            id: [1; 32],
            author: [2; 32],
            author_nick: "bob".into(),
            date: 5,
            title: "t".into(),
            version: 1,
            attributes: BTreeMap::from([("main".to_owned(), "hi".to_owned())]),
        };
        snap.log_mut(Log::Posts).store(post.clone());
        snap.post_subscribers.push(Uid([3; 32]));
        let text = serde_json::to_string(&snap).unwrap();
        let back: NodeSnap = serde_json::from_str(&text).unwrap();
        assert_eq!(back.post_subscribers, vec![Uid([3; 32])]);
        let entries = back.posts.inspect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].params["post"]["attributes"]["main"], "hi");
    }
}
