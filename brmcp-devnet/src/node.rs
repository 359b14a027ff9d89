//! One simulated brclient: identity, address book, relay connectivity, and the replay
//! logs that make its streams store-and-forward.
//!
//! # Replay logs
//!
//! Each stream type has a log shaped like brclient's `replaymsglog`: entries are JSON
//! lines in numbered files, and an entry's `sequence_id` is `file_index << 32 |
//! end_offset`. The first file is 1, so ids are above 2^32, and consecutive ids differ
//! by the entry's length, not by one. Files rotate at
//! [`DevnetConfig::replay_file_size`](super::DevnetConfig::replay_file_size).
//!
//! An ack of id N blanks everything up to N in N's file and removes every older file.
//! The model keeps brclient's edges: an ack past the end of the current file pads it
//! (the next id jumps), an ack naming a later file removes every file and restarts ids
//! at file 1, and a stream opened with an `unackedFrom` inside an entry skips that
//! entry (its partial line does not decode).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use brmcp_clientrpc::proto::{self, RmPrivateMessage};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};

use super::codec::encode;
use super::durable::{Op, TipRecord, Uid, hex32};
use super::envelope::notification_line;

pub use brmcp_clientrpc::StreamKind;

/// A node's replay log: one per stream the clientrpc client reads, and the posts
/// stream (`PostsService.PostsStream`), which brclient keeps the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Log {
    Stream(StreamKind),
    Posts,
    /// Post status updates (comments, hearts): `PostsService.PostsStatusStream`.
    PostStatus,
}

impl Log {
    /// How many logs a node has.
    pub(crate) const COUNT: usize = 6;

    /// Every log, by [`index`](Self::index).
    pub(crate) const ALL: [Self; Self::COUNT] = [
        Self::Stream(StreamKind::ALL[0]),
        Self::Stream(StreamKind::ALL[1]),
        Self::Stream(StreamKind::ALL[2]),
        Self::Stream(StreamKind::ALL[3]),
        Self::Posts,
        Self::PostStatus,
    ];

    /// The log's position in a node's table.
    pub(crate) const fn index(self) -> usize {
        match self {
            Self::Stream(k) => k.index(),
            // The clientrpc client's own kind for the posts stream is this log.
            Self::Posts => StreamKind::Posts.index(),
            Self::PostStatus => StreamKind::Posts.index() + 1,
        }
    }

    /// brclient's replay log name.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Self::Stream(k) => k.name(),
            Self::Posts => "posts",
            Self::PostStatus => "poststatus",
        }
    }
}

impl From<StreamKind> for Log {
    fn from(k: StreamKind) -> Self {
        match k {
            StreamKind::Posts => Self::Posts,
            k => Self::Stream(k),
        }
    }
}

/// How many received requests a node keeps for inspection (the oldest are dropped).
pub(crate) const REQUEST_LOG_LIMIT: usize = 4096;

/// One entry of a node's replay log, for inspection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LogEntry {
    /// The entry's `sequence_id`.
    pub sequence_id: u64,
    /// Whether an ack has cleared it (it will not be replayed).
    pub acked: bool,
    /// The notification params exactly as a stream would carry them.
    pub params: serde_json::Value,
}

/// A stored stream item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Event {
    Pm {
        #[serde(with = "hex32")]
        uid: [u8; 32],
        nick: String,
        message: String,
        mode: i32,
        timestamp_ms: i64,
    },
    TipProgress {
        #[serde(with = "hex32")]
        uid: [u8; 32],
        nick: String,
        amount_matoms: i64,
        completed: bool,
        attempt: i32,
        attempt_err: String,
        will_retry: bool,
    },
    TipReceived {
        #[serde(with = "hex32")]
        uid: [u8; 32],
        amount_matoms: i64,
    },
    Kx {
        #[serde(with = "hex32")]
        uid: [u8; 32],
        nick: String,
    },
    /// A post received from a subscription (the author relayed it).
    Post {
        #[serde(with = "hex32")]
        id: [u8; 32],
        #[serde(with = "hex32")]
        author: [u8; 32],
        author_nick: String,
        /// Unix seconds.
        date: i64,
        title: String,
        version: u64,
        attributes: BTreeMap<String, String>,
    },
    /// A status update of a post (a comment), as the receiving client records it.
    PostStatus {
        /// Who the update came from (the commenter, or the author relaying it).
        #[serde(with = "hex32")]
        relayer: [u8; 32],
        #[serde(with = "hex32")]
        post_id: [u8; 32],
        #[serde(with = "hex32")]
        status_from: [u8; 32],
        status_from_nick: String,
        version: u64,
        /// `PostMetadataStatus.from`: the status creator's id in hex.
        from: String,
        /// `PostMetadataStatus.link`: the post id in hex.
        link: String,
        attributes: BTreeMap<String, String>,
    },
}

impl Event {
    /// The protojson params, with `sequence_id` set (0 leaves it out, as when stored).
    pub(crate) fn encode(&self, seq: u64) -> String {
        match self {
            Self::Pm {
                uid,
                nick,
                message,
                mode,
                timestamp_ms,
            } => encode(&proto::ReceivedPm {
                uid: uid.to_vec(),
                nick: nick.clone(),
                msg: Some(RmPrivateMessage {
                    message: message.clone(),
                    mode: *mode,
                }),
                timestamp_ms: *timestamp_ms,
                sequence_id: seq,
            }),
            Self::TipProgress {
                uid,
                nick,
                amount_matoms,
                completed,
                attempt,
                attempt_err,
                will_retry,
            } => encode(&proto::TipProgressEvent {
                sequence_id: seq,
                uid: uid.to_vec(),
                nick: nick.clone(),
                amount_matoms: *amount_matoms,
                completed: *completed,
                attempt: *attempt,
                attempt_err: attempt_err.clone(),
                will_retry: *will_retry,
            }),
            Self::TipReceived { uid, amount_matoms } => encode(&proto::ReceivedTip {
                uid: uid.to_vec(),
                amount_matoms: *amount_matoms,
                sequence_id: seq,
            }),
            Self::Kx { uid, nick } => encode(&proto::KxCompleted {
                sequence_id: seq,
                uid: uid.to_vec(),
                nick: nick.clone(),
                initial_rendezvous: Vec::new(),
            }),
            Self::Post {
                id,
                author,
                author_nick,
                date,
                title,
                version,
                attributes,
            } => encode(&proto::ReceivedPost {
                sequence_id: seq,
                relayer_id: author.to_vec(),
                summary: Some(proto::PostSummary {
                    id: id.to_vec(),
                    from: author.to_vec(),
                    author_id: author.to_vec(),
                    author_nick: author_nick.clone(),
                    date: *date,
                    // No status updates yet: brclient records the post's own date.
                    last_status_ts: *date,
                    title: title.clone(),
                }),
                post: Some(proto::PostMetadata {
                    version: *version,
                    attributes: attributes.clone().into_iter().collect(),
                }),
            }),
            Self::PostStatus {
                relayer,
                post_id,
                status_from,
                status_from_nick,
                version,
                from,
                link,
                attributes,
            } => encode(&proto::ReceivedPostStatus {
                sequence_id: seq,
                relayer_id: relayer.to_vec(),
                post_id: post_id.to_vec(),
                status_from: status_from.to_vec(),
                status_from_nick: status_from_nick.clone(),
                status: Some(proto::PostMetadataStatus {
                    version: *version,
                    from: from.clone(),
                    link: link.clone(),
                    attributes: attributes.clone().into_iter().collect(),
                }),
            }),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LogFile {
    /// Everything below this offset is blank (acked).
    blanked_to: u64,
    /// The file's length, padding included.
    size: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    fid: u32,
    start: u64,
    end: u64,
    event: Event,
}

impl Entry {
    fn id(&self) -> u64 {
        (u64::from(self.fid) << 32) | self.end
    }
}

/// One stream type's replay log (see the module docs).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayLog {
    max_file_size: u64,
    file_index: u32,
    current: Option<u32>,
    files: BTreeMap<u32, LogFile>,
    entries: VecDeque<Entry>,
}

impl ReplayLog {
    pub(crate) fn new(max_file_size: u64) -> Self {
        Self {
            // Offsets are the low 32 bits of an id.
            max_file_size: max_file_size.clamp(1, u64::from(u32::MAX)),
            file_index: 0,
            current: None,
            files: BTreeMap::new(),
            entries: VecDeque::new(),
        }
    }

    /// Stores `event` and returns its id.
    pub(crate) fn store(&mut self, event: Event) -> u64 {
        let len = event.encode(0).len() as u64 + 1;
        let rotate = match self.current.and_then(|fid| self.files.get(&fid)) {
            Some(f) => f.size + len > self.max_file_size,
            None => true,
        };
        if rotate {
            self.file_index = self.file_index.wrapping_add(1).max(1);
            self.files.insert(
                self.file_index,
                LogFile {
                    blanked_to: 0,
                    size: 0,
                },
            );
            self.current = Some(self.file_index);
        }
        let fid = self.file_index;
        let file = self.files.entry(fid).or_insert(LogFile {
            blanked_to: 0,
            size: 0,
        });
        let start = file.size;
        // A single entry longer than a file still goes in; its offset saturates.
        let end = (start + len).min(u64::from(u32::MAX));
        file.size = end;
        let entry = Entry {
            fid,
            start,
            end,
            event,
        };
        let id = entry.id();
        self.entries.push_back(entry);
        id
    }

    /// The entries a stream opened with `unacked_from` replays, in order.
    pub(crate) fn replay(&self, unacked_from: u64) -> Vec<(u64, &Event)> {
        let from_fid = u32::try_from(unacked_from >> 32).unwrap_or(u32::MAX);
        let from_off = unacked_from & 0xffff_ffff;
        self.entries
            .iter()
            .filter(|e| {
                if e.fid < from_fid {
                    return false;
                }
                let Some(file) = self.files.get(&e.fid) else {
                    return false;
                };
                let read_from = if e.fid == from_fid { from_off } else { 0 };
                // A line decodes only if reading started at or before it and no ack
                // blanked any of it.
                e.start >= read_from && e.start >= file.blanked_to
            })
            .map(|e| (e.id(), &e.event))
            .collect()
    }

    /// Clears everything up to and including `target` (cumulative ack).
    pub(crate) fn ack(&mut self, target: u64) {
        let target_fid = u32::try_from(target >> 32).unwrap_or(u32::MAX);
        let target_off = target & 0xffff_ffff;
        let fids: Vec<u32> = self
            .files
            .range(..=target_fid)
            .map(|(fid, _)| *fid)
            .collect();
        for fid in fids {
            if fid < target_fid {
                self.files.remove(&fid);
                self.entries.retain(|e| e.fid != fid);
                if self.current == Some(fid) {
                    self.current = None;
                    self.file_index = 0;
                }
                continue;
            }
            if let Some(file) = self.files.get_mut(&fid) {
                file.blanked_to = file.blanked_to.max(target_off);
                file.size = file.size.max(target_off);
            }
        }
    }

    /// Uses `size` as the file size from now on (the devnet's, for a restored log).
    pub(crate) fn set_max_file_size(&mut self, size: u64) {
        self.max_file_size = size.clamp(1, u64::from(u32::MAX));
    }

    /// Makes the next stored entry open file `fid` (a test hook for large ids).
    pub(crate) fn set_next_file(&mut self, fid: u32) {
        self.file_index = fid.saturating_sub(1);
        self.current = None;
    }

    /// Every entry still in a file, with its acked state.
    pub(crate) fn inspect(&self) -> Vec<LogEntry> {
        self.entries
            .iter()
            .filter_map(|e| {
                let file = self.files.get(&e.fid)?;
                let id = e.id();
                Some(LogEntry {
                    sequence_id: id,
                    acked: e.end <= file.blanked_to,
                    params: serde_json::from_str(&e.event.encode(id))
                        .unwrap_or(serde_json::Value::Null),
                })
            })
            .collect()
    }
}

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

    fn pm(text: &str) -> Event {
        Event::Pm {
            uid: [0x11; 32],
            nick: "alice".into(),
            message: text.into(),
            mode: 0,
            timestamp_ms: 1_765_900_000_123,
        }
    }

    #[test]
    fn ids_are_file_index_and_end_offset() {
        let mut log = ReplayLog::new(1 << 23);
        let a = log.store(pm("hi"));
        let b = log.store(pm("hello there"));
        let len_a = pm("hi").encode(0).len() as u64 + 1;
        let len_b = pm("hello there").encode(0).len() as u64 + 1;
        assert_eq!(a, (1 << 32) + len_a);
        assert_eq!(b, a + len_b);
        assert!(a > 1 << 32);
        assert_ne!(b - a, len_a, "steps follow the entry length");
    }

    #[test]
    fn ack_is_cumulative_and_replay_respects_unacked_from() {
        let mut log = ReplayLog::new(1 << 23);
        let ids: Vec<u64> = (0..4).map(|i| log.store(pm(&format!("m{i}")))).collect();
        assert_eq!(log.replay(0).len(), 4);
        assert_eq!(
            log.replay(ids[1])
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>(),
            &ids[2..]
        );
        log.ack(ids[1]);
        assert_eq!(
            log.replay(0).iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            &ids[2..]
        );
        // An old ack is a no-op.
        log.ack(ids[0]);
        assert_eq!(log.replay(0).len(), 2);
        let acked: Vec<bool> = log.inspect().iter().map(|e| e.acked).collect();
        assert_eq!(acked, [true, true, false, false]);
        // An unackedFrom inside an entry skips that entry.
        assert_eq!(
            log.replay(ids[1] + 3)
                .iter()
                .map(|(id, _)| *id)
                .collect::<Vec<_>>(),
            &ids[3..]
        );
    }

    #[test]
    fn rotation_removal_and_reset() {
        let one = pm("x").encode(0).len() as u64 + 1;
        let mut log = ReplayLog::new(one * 2);
        let ids: Vec<u64> = (0..5).map(|_| log.store(pm("x"))).collect();
        assert_eq!(
            ids.iter().map(|id| id >> 32).collect::<Vec<_>>(),
            [1, 1, 2, 2, 3]
        );
        // Acking into file 2 removes file 1 entirely.
        log.ack(ids[2]);
        assert_eq!(log.inspect().len(), 3);
        assert_eq!(log.replay(0).len(), 2);
        // Acking a later file than exists removes everything and ids restart at file 1.
        log.ack(10 << 32);
        assert!(log.inspect().is_empty());
        assert_eq!(log.store(pm("x")) >> 32, 1);
    }

    #[test]
    fn ack_past_the_end_pads_the_file() {
        let mut log = ReplayLog::new(1 << 23);
        let a = log.store(pm("x"));
        log.ack(a + 100);
        let b = log.store(pm("x"));
        assert_eq!(b, a + 100 + pm("x").encode(0).len() as u64 + 1);
        assert_eq!(
            log.replay(0).iter().map(|(id, _)| *id).collect::<Vec<_>>(),
            [b]
        );
    }

    #[test]
    fn next_file_hook_gives_large_ids() {
        let mut log = ReplayLog::new(1 << 23);
        log.set_next_file(1 << 21);
        let id = log.store(pm("x"));
        assert!(id > 1 << 53);
        assert_eq!(id >> 32, 1 << 21);
    }

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
