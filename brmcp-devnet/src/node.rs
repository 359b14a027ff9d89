//! One simulated brclient: identity, address book, relay connectivity, live streams,
//! injected failures and the requests it received. Its replay logs (`replay_log`) and
//! the stream items they store (`event`) are modules of their own.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use super::durable::{Op, TipRecord, Uid, hex32};
use super::envelope::notification_line;

mod event;
mod replay_log;

pub use brmcp_clientrpc::StreamKind;
pub(crate) use event::Event;
pub use replay_log::LogEntry;
pub(crate) use replay_log::{Log, ReplayLog};

/// How many received requests a node keeps for inspection (the oldest are dropped).
pub(crate) const REQUEST_LOG_LIMIT: usize = 4096;

/// An address-book entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Contact {
    #[serde(with = "hex32")]
    pub(crate) uid: [u8; 32],
    pub(crate) nick: String,
}

/// A live stream registered on a connection.
#[derive(Debug)]
pub(crate) struct Sub {
    pub(crate) conn: u64,
    pub(crate) kind: Log,
    /// The method exactly as requested, suffix included; notifications echo it.
    pub(crate) method: String,
    pub(crate) out: mpsc::UnboundedSender<String>,
}

/// What connections of a node watch: a generation bump drops them, `frozen` stops
/// them reading and writing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct NodeCtl {
    pub(crate) generation: u64,
    pub(crate) frozen: bool,
}

/// Injected failures.
#[derive(Debug, Default)]
pub(crate) struct Faults {
    /// Method (without suffix) -> (calls left to fail, error text).
    pub(crate) fail_next: HashMap<String, (u32, String)>,
    /// Method (without suffix) -> delay before handling.
    pub(crate) delays: HashMap<String, Duration>,
}

/// A request as the node received it, for inspection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ReceivedRequest {
    /// The connection it came on (a per-devnet counter).
    pub connection: u64,
    /// Its `method`, if it had a string one.
    pub method: Option<String>,
    /// Its `id`, if it had a non-null one.
    pub id: Option<serde_json::Value>,
    /// The whole WebSocket message as text.
    pub raw: String,
}

/// Tip gating as brclient's `rpcallowremotesendtip` / `rpcmaxremotesendtipamt`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TipGate {
    pub(crate) allow: bool,
    /// In DCR; <= 0 means unlimited.
    pub(crate) max_dcr: f64,
}

/// One simulated brclient.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) nick: String,
    pub(crate) uid: [u8; 32],
    pub(crate) sig_key: [u8; 32],
    pub(crate) app_name: &'static str,
    pub(crate) contacts: Vec<Contact>,
    pub(crate) online: bool,
    pub(crate) logs: [ReplayLog; Log::COUNT],
    /// Who subscribed to this node's posts (brclient keeps this on the author's side).
    pub(crate) post_subscribers: Vec<[u8; 32]>,
    pub(crate) subs: Vec<Sub>,
    pub(crate) conns: usize,
    pub(crate) ctl: watch::Sender<NodeCtl>,
    pub(crate) faults: Faults,
    pub(crate) can_invoice: bool,
    pub(crate) tip_gate: TipGate,
    pub(crate) requests: VecDeque<ReceivedRequest>,
    /// TCP connections accepted (handshakes that failed included).
    pub(crate) accepts: u64,
    /// The most requests in flight seen on one connection, streams included.
    pub(crate) peak_in_flight: usize,
    /// When the node (re)started: TipUser waits for the warm-up from here.
    pub(crate) started_at: Instant,
    /// Tips paid and received, newest last (at most `RECENT_TIPS`).
    pub(crate) recent_tips: VecDeque<TipRecord>,
    /// Changes to journal when the state lock is released.
    pub(crate) pending: Vec<Op>,
    /// Stream lines to send once the changes that made them are journaled.
    pub(crate) outbox: Vec<(mpsc::UnboundedSender<String>, String)>,
}

impl Node {
    pub(crate) fn new(
        nick: String,
        uid: [u8; 32],
        sig_key: [u8; 32],
        app_name: &'static str,
        online: bool,
        replay_file_size: u64,
    ) -> Self {
        Self {
            nick,
            uid,
            sig_key,
            app_name,
            contacts: Vec::new(),
            online,
            logs: Log::ALL.map(|_| ReplayLog::new(replay_file_size)),
            post_subscribers: Vec::new(),
            subs: Vec::new(),
            conns: 0,
            ctl: watch::Sender::new(NodeCtl::default()),
            faults: Faults::default(),
            can_invoice: true,
            tip_gate: TipGate {
                allow: true,
                max_dcr: -1.0,
            },
            requests: VecDeque::new(),
            accepts: 0,
            peak_in_flight: 0,
            started_at: Instant::now(),
            recent_tips: VecDeque::new(),
            pending: Vec::new(),
            outbox: Vec::new(),
        }
    }

    fn me(&self) -> Uid {
        Uid(self.uid)
    }

    /// brclient's `UserByNick`: the first contact whose nick matches ignoring case,
    /// or whose lowercase hex id starts with `user` when `user` is longer than 4
    /// characters. The local user is never found.
    pub(crate) fn resolve(&self, user: &str) -> Option<&Contact> {
        let lower = user.to_lowercase();
        self.contacts.iter().find(|c| {
            c.nick.to_lowercase() == lower
                || (user.len() > 4 && hex::encode(c.uid).starts_with(user))
        })
    }

    pub(crate) fn contact(&self, uid: &[u8; 32]) -> Option<&Contact> {
        self.contacts.iter().find(|c| &c.uid == uid)
    }

    /// Adds or renames a contact.
    pub(crate) fn add_contact(&mut self, uid: [u8; 32], nick: &str) {
        match self.contacts.iter_mut().find(|c| c.uid == uid) {
            Some(c) if c.nick == nick => return,
            Some(c) => nick.clone_into(&mut c.nick),
            None => self.contacts.push(Contact {
                uid,
                nick: nick.to_owned(),
            }),
        }
        self.pending.push(Op::Contact {
            node: self.me(),
            uid: Uid(uid),
            nick: nick.to_owned(),
        });
    }

    /// Stores `event` in its log, then queues it for every live stream of that kind
    /// (sent once the change is journaled).
    pub(crate) fn append(&mut self, kind: impl Into<Log>, event: Event) -> u64 {
        let kind = kind.into();
        let id = self.logs[kind.index()].store(event.clone());
        let params = event.encode(id);
        self.subs.retain(|s| !s.out.is_closed());
        for s in self.subs.iter().filter(|s| s.kind == kind) {
            self.outbox
                .push((s.out.clone(), notification_line(&s.method, &params)));
        }
        self.pending.push(Op::Store {
            node: self.me(),
            kind,
            event,
        });
        id
    }

    /// A cumulative acknowledgement of `kind`'s log.
    pub(crate) fn ack(&mut self, kind: impl Into<Log>, seq: u64) {
        let kind = kind.into();
        self.logs[kind.index()].ack(seq);
        self.pending.push(Op::Ack {
            node: self.me(),
            kind,
            seq,
        });
    }

    /// Makes the next entry of `kind`'s log open file `fid`.
    pub(crate) fn set_next_file(&mut self, kind: impl Into<Log>, fid: u32) {
        let kind = kind.into();
        self.logs[kind.index()].set_next_file(fid);
        self.pending.push(Op::NextFile {
            node: self.me(),
            kind,
            fid,
        });
    }

    /// Replays what `unacked_from` asks for onto `sub`, then registers it, in one step
    /// (the caller holds the lock), so nothing is missed or doubled at the switch.
    pub(crate) fn open_stream(&mut self, unacked_from: u64, sub: Sub) {
        for (id, event) in self.logs[sub.kind.index()].replay(unacked_from) {
            if sub
                .out
                .send(notification_line(&sub.method, &event.encode(id)))
                .is_err()
            {
                return;
            }
        }
        self.subs.push(sub);
    }

    /// Adds or removes `subscriber` from this node's post subscribers.
    pub(crate) fn set_post_subscriber(&mut self, subscriber: [u8; 32], on: bool) {
        let had = self.post_subscribers.contains(&subscriber);
        if had == on {
            return;
        }
        if on {
            self.post_subscribers.push(subscriber);
        } else {
            self.post_subscribers.retain(|s| s != &subscriber);
        }
        self.pending.push(Op::PostSub {
            author: self.me(),
            subscriber: Uid(subscriber),
            on,
        });
    }

    pub(crate) fn record(&mut self, request: ReceivedRequest) {
        if self.requests.len() == REQUEST_LOG_LIMIT {
            self.requests.pop_front();
        }
        self.requests.push_back(request);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nick_and_hex_prefix_resolution() {
        let mut node = Node::new("bob".into(), [0xaa; 32], [0; 32], "brclient", true, 1 << 23);
        node.add_contact([0x12; 32], "Alice");
        node.add_contact([0x34; 32], "carol");
        node.add_contact([0xab; 32], "dave");
        assert_eq!(node.resolve("alice").unwrap().uid, [0x12; 32]);
        assert_eq!(node.resolve("34343").unwrap().nick, "carol");
        assert!(
            node.resolve("3434").is_none(),
            "a prefix must be longer than 4"
        );
        assert_eq!(node.resolve("ababab").unwrap().nick, "dave");
        assert!(
            node.resolve("ABABAB").is_none(),
            "hex prefixes are lowercase"
        );
        assert!(
            node.resolve("bob").is_none(),
            "the local user is never found"
        );
    }
}
