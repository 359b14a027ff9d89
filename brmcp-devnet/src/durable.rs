//! What the devnet keeps across any stop, SIGKILL included: the wallets, the relay's
//! queues, each node's address book and replay logs (with what was acknowledged),
//! the tips in flight and each node's recent tips.
//!
//! Write-ahead: every change made under the state lock is recorded as a group of
//! [`Op`]s, written as one line of [`JOURNAL_FILE`] when the lock is released and
//! before anything it caused is visible (a stream item sent, a reply written). A
//! group is applied whole or not at all: a SIGKILL mid-write leaves a line without
//! its newline, a torn tail that loading drops (nothing of it was shown). A tip's
//! payment (debit, credit, the payee's `ReceivedTip`, the payer's outcome, the tip's
//! end) is one group, so it happens exactly once across restarts.
//!
//! Loading reads [`SNAPSHOT_FILE`] (the state up to its `seq`), applies the journal's
//! later lines in order, then compacts: the state is written atomically as the new
//! snapshot and the journal truncated; a journal past [`COMPACT_BYTES`] is compacted
//! the same way while running. A complete line or snapshot that does not parse is
//! corruption and is refused with the file named.
//!
//! Durability: each group reaches the operating system before its effects are seen,
//! so a killed devnet loses nothing; the journal is fsynced at most every
//! [`SYNC_INTERVAL`] by a background thread (a power cut may lose that much), and
//! snapshots are fsynced when written.

use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::DevnetError;
use super::node::{Contact, Event, Log, ReplayLog};
use super::relay::Queued;

/// The snapshot's name in the devnet directory.
pub(crate) const SNAPSHOT_FILE: &str = "devnet-state.json";

/// The journal's name in the devnet directory.
pub(crate) const JOURNAL_FILE: &str = "devnet-journal.jsonl";

/// The snapshot format this build writes and reads.
const SNAPSHOT_VERSION: u32 = 1;

/// Journal size that triggers a compaction while running, by default: large enough
/// that it is rare, small enough that loading stays quick.
pub(crate) const COMPACT_BYTES: u64 = 16 << 20;

/// How often the journal is fsynced when it was written to: often enough that a power
/// cut loses little, rare enough that no request waits for a disk flush.
pub(crate) const SYNC_INTERVAL: Duration = Duration::from_millis(200);

/// Recent tips kept per node for `brmcp devnet wallets`.
pub(crate) const RECENT_TIPS: usize = 20;

/// A 32-byte user id, written as 64 lowercase hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Uid(pub(crate) [u8; 32]);

impl Serialize for Uid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(self.0))
    }
}

impl<'de> Deserialize<'de> for Uid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(&text, &mut out).map_err(serde::de::Error::custom)?;
        Ok(Self(out))
    }
}

/// `[u8; 32]` fields as hex (for the stored stream items).
pub(crate) mod hex32 {
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(v))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        super::Uid::deserialize(d).map(|u| u.0)
    }
}

/// A log by its name (`pm`, `tipprogress`, `tipstream`, `kx`, `posts`, `poststatus`).
mod kind_name {
    use serde::{Deserialize as _, Deserializer, Serializer};

    use super::Log;

    pub(crate) fn serialize<S: Serializer>(k: &Log, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.name())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Log, D::Error> {
        let name = String::deserialize(d)?;
        Log::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown stream {name:?}")))
    }
}

/// A tip scheduled by `TipUser` and not yet ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PendingTip {
    pub(crate) id: u64,
    pub(crate) payer: Uid,
    pub(crate) payee: Uid,
    pub(crate) matoms: i64,
    pub(crate) max_attempts: i32,
    /// Invoice requests made so far.
    pub(crate) attempts: i32,
}

/// A tip paid, as both wallets list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TipRecord {
    /// Devnet clock, unix milliseconds.
    pub(crate) at_ms: i64,
    pub(crate) payer: Uid,
    pub(crate) payee: Uid,
    pub(crate) matoms: i64,
}

/// One change to the kept state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Op {
    /// A node exists (its record is created if missing; the nick is its latest).
    Node { uid: Uid, nick: String },
    /// An address-book entry added or renamed.
    Contact { node: Uid, uid: Uid, nick: String },
    /// An item stored in a replay log.
    Store {
        node: Uid,
        #[serde(with = "kind_name")]
        kind: Log,
        event: Event,
    },
    /// A cumulative acknowledgement.
    Ack {
        node: Uid,
        #[serde(with = "kind_name")]
        kind: Log,
        seq: u64,
    },
    /// The next item of a log opens this file.
    NextFile {
        node: Uid,
        #[serde(with = "kind_name")]
        kind: Log,
        fid: u32,
    },
    /// A wallet's balance, in milliatoms.
    Balance { uid: Uid, matoms: i64 },
    /// A PM queued at the relay.
    Enqueue { to: Uid, item: Queued },
    /// A queue handed to its node (what was delivered is in `Store`s of the same
    /// group); `expired` of it were dropped as too old.
    Flush { to: Uid, expired: u64 },
    /// The first PM of a queue handed to its node (in a `Store` of the same group),
    /// or dropped as too old when `expired` is 1.
    Dequeue { to: Uid, expired: u64 },
    /// A tip scheduled.
    TipStart { tip: PendingTip },
    /// A tip's invoice requests so far.
    TipAttempt { id: u64, attempts: i32 },
    /// A tip ended (paid or given up).
    TipEnd { id: u64 },
    /// A tip paid, for the wallets' recent tips.
    Tipped { record: TipRecord },
    /// A user subscribed to (`on`) or unsubscribed from an author's posts.
    PostSub {
        author: Uid,
        subscriber: Uid,
        on: bool,
    },
}

/// A node's kept state.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeSnap {
    pub(crate) nick: String,
    pub(crate) contacts: Vec<Contact>,
    /// By [`StreamKind::index`](super::node::StreamKind::index).
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
    replay_file_size: u64,
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
    fn apply(&mut self, op: Op) -> Result<(), String> {
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

/// One journal line as written.
#[derive(Serialize)]
struct LineOut<'a> {
    seq: u64,
    ops: &'a [Op],
}

/// One journal line as read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LineIn {
    seq: u64,
    ops: Vec<Op>,
}

fn corrupt(path: &Path, detail: impl Into<String>) -> DevnetError {
    DevnetError::CorruptState {
        path: path.to_path_buf(),
        detail: detail.into(),
    }
}

/// Reads a file; `None` when missing.
fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, DevnetError> {
    brmcp_fs::refuse_symlink(path)?;
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(std::io::Error::new(e.kind(), format!("{}: {e}", path.display())).into()),
    }
}

/// The state in `dir` from its snapshot and journal: the journal is read first, so a
/// compaction by a running devnet in between leaves a snapshot that covers what was
/// read. `None` when neither file exists (a directory of an older devnet, or none).
fn read_state(dir: &Path, replay_file_size: u64) -> Result<Option<Snapshot>, DevnetError> {
    let journal_path = dir.join(JOURNAL_FILE);
    let snapshot_path = dir.join(SNAPSHOT_FILE);
    let journal = read_opt(&journal_path)?;
    let snapshot = read_opt(&snapshot_path)?;
    if journal.is_none() && snapshot.is_none() {
        return Ok(None);
    }
    let mut state = match snapshot {
        Some(bytes) => {
            let mut s: Snapshot = serde_json::from_slice(&bytes)
                .map_err(|e| corrupt(&snapshot_path, e.to_string()))?;
            if s.version != SNAPSHOT_VERSION {
                return Err(corrupt(
                    &snapshot_path,
                    format!(
                        "version {} (this build reads {SNAPSHOT_VERSION})",
                        s.version
                    ),
                ));
            }
            s.replay_file_size = replay_file_size;
            s
        }
        None => Snapshot::empty(replay_file_size),
    };
    apply_journal(
        &mut state,
        journal.as_deref().unwrap_or_default(),
        &journal_path,
    )?;
    Ok(Some(state))
}

/// Applies the journal's complete lines after the snapshot's `seq`; a last line
/// without its newline is a torn write and is dropped.
fn apply_journal(state: &mut Snapshot, bytes: &[u8], path: &Path) -> Result<(), DevnetError> {
    let mut rest = bytes;
    let mut number = 0usize;
    while let Some(end) = rest.iter().position(|b| *b == b'\n') {
        number += 1;
        let line = &rest[..end];
        rest = &rest[end + 1..];
        let at = |detail: String| corrupt(path, format!("line {number}: {detail}"));
        let parsed: LineIn = serde_json::from_slice(line).map_err(|e| at(e.to_string()))?;
        if parsed.seq <= state.seq {
            continue;
        }
        if parsed.seq != state.seq + 1 {
            return Err(at(format!("seq {} after {}", parsed.seq, state.seq)));
        }
        for op in parsed.ops {
            state.apply(op).map_err(at)?;
        }
        state.seq = parsed.seq;
    }
    if !rest.is_empty() {
        tracing::info!(file = %path.display(), bytes = rest.len(), "devnet journal: dropping a torn last line");
    }
    Ok(())
}

/// What the fsync thread shares with the journal.
#[derive(Debug)]
struct SyncShared {
    file: Mutex<Arc<File>>,
    dirty: AtomicBool,
}

/// The open journal of a running devnet.
#[derive(Debug)]
pub(crate) struct Journal {
    dir: PathBuf,
    file: Arc<File>,
    seq: u64,
    bytes: u64,
    compact_at: u64,
    sync: Arc<SyncShared>,
}

/// Opens the kept state of `dir`: loaded (an empty one for a new or older
/// directory), compacted, and the journal ready for appends.
///
/// # Errors
/// A file that cannot be read or written, or a corrupt one (named).
pub(crate) fn open(
    dir: &Path,
    replay_file_size: u64,
    compact_at: u64,
) -> Result<(Snapshot, Journal), DevnetError> {
    let state =
        read_state(dir, replay_file_size)?.unwrap_or_else(|| Snapshot::empty(replay_file_size));
    write_snapshot(dir, &state)?;
    let file = Arc::new(fresh_journal(dir)?);
    let sync = Arc::new(SyncShared {
        file: Mutex::new(file.clone()),
        dirty: AtomicBool::new(false),
    });
    spawn_syncer(Arc::downgrade(&sync));
    let journal = Journal {
        dir: dir.to_path_buf(),
        file,
        seq: state.seq,
        bytes: 0,
        compact_at,
        sync,
    };
    Ok((state, journal))
}

fn write_snapshot(dir: &Path, state: &Snapshot) -> Result<(), DevnetError> {
    let path = dir.join(SNAPSHOT_FILE);
    let mut text = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    text.push(b'\n');
    brmcp_fs::write_atomic(&path, &text)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    Ok(())
}

/// The journal, emptied (after a snapshot covering it was written).
fn fresh_journal(dir: &Path) -> Result<File, DevnetError> {
    let path = dir.join(JOURNAL_FILE);
    let file = brmcp_fs::open_append(&path)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    file.set_len(0)?;
    Ok(file)
}

/// fsyncs the journal every [`SYNC_INTERVAL`] it was written in; ends with the devnet.
fn spawn_syncer(shared: Weak<SyncShared>) {
    let spawned = std::thread::Builder::new()
        .name("devnet-journal-sync".into())
        .spawn(move || {
            loop {
                std::thread::sleep(SYNC_INTERVAL);
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                if shared.dirty.swap(false, Ordering::AcqRel) {
                    let file = shared
                        .file
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    if let Err(e) = file.sync_data() {
                        tracing::warn!(error = %e, "devnet journal: fsync failed");
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "devnet journal: no fsync thread; writes reach the OS only");
    }
}

impl Journal {
    /// Writes one group of changes as one line.
    ///
    /// # Errors
    /// The write failed; the group may be partly written (a torn tail).
    pub(crate) fn append(&mut self, ops: &[Op]) -> std::io::Result<()> {
        let seq = self.seq + 1;
        let mut line = serde_json::to_vec(&LineOut { seq, ops }).map_err(std::io::Error::other)?;
        line.push(b'\n');
        (&*self.file).write_all(&line)?;
        self.seq = seq;
        self.bytes += line.len() as u64;
        self.sync.dirty.store(true, Ordering::Release);
        Ok(())
    }

    /// Whether the journal has grown enough to compact.
    pub(crate) fn wants_compaction(&self) -> bool {
        self.bytes >= self.compact_at
    }

    /// Writes `state` (the state as of the last line written) as the snapshot and
    /// empties the journal.
    ///
    /// # Errors
    /// A file could not be written; the journal is then kept as it is.
    pub(crate) fn compact(&mut self, mut state: Snapshot) -> Result<(), DevnetError> {
        state.seq = self.seq;
        write_snapshot(&self.dir, &state)?;
        let file = Arc::new(fresh_journal(&self.dir)?);
        *self
            .sync
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = file.clone();
        self.file = file;
        self.bytes = 0;
        Ok(())
    }
}

/// The kept state of a devnet directory, read without changing it (a running
/// devnet may be writing it): `None` when the directory has none.
///
/// # Errors
/// A file that cannot be read, or a corrupt one (named).
pub(crate) fn read_only(dir: &Path) -> Result<Option<Snapshot>, DevnetError> {
    read_state(dir, super::DevnetConfig::default().replay_file_size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uid(b: u8) -> Uid {
        Uid([b; 32])
    }

    #[test]
    fn journal_lines_replay_and_a_torn_tail_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let (state, mut journal) = open(dir.path(), 1 << 23, COMPACT_BYTES).unwrap();
        assert_eq!(state.seq, 0);
        journal
            .append(&[
                Op::Node {
                    uid: uid(1),
                    nick: "alice".into(),
                },
                Op::Balance {
                    uid: uid(1),
                    matoms: 7,
                },
            ])
            .unwrap();
        journal
            .append(&[Op::Balance {
                uid: uid(1),
                matoms: 9,
            }])
            .unwrap();
        // A torn write of a third group.
        let path = dir.path().join(JOURNAL_FILE);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(br#"{"seq":3,"ops":[{"balance":{"uid":"#)
            .unwrap();
        let back = read_only(dir.path()).unwrap().unwrap();
        assert_eq!(back.seq, 2);
        assert_eq!(back.balances[&uid(1)], 9);
        assert_eq!(back.nodes[&uid(1)].nick, "alice");
        drop(journal);
        // Reopening compacts: the snapshot holds it all and the journal is empty.
        let (again, _j) = open(dir.path(), 1 << 23, COMPACT_BYTES).unwrap();
        assert_eq!(again.balances[&uid(1)], 9);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn a_corrupt_line_or_snapshot_is_refused_with_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(JOURNAL_FILE);
        std::fs::write(&path, "{\"seq\":1,\"ops\":[]}\nnot json\n").unwrap();
        let err = read_only(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(JOURNAL_FILE) && err.contains("line 2"),
            "{err}"
        );
        std::fs::write(&path, "{\"seq\":2,\"ops\":[]}\n").unwrap();
        let err = read_only(dir.path()).unwrap_err().to_string();
        assert!(err.contains("seq 2 after 0"), "{err}");
        std::fs::remove_file(&path).unwrap();
        std::fs::write(dir.path().join(SNAPSHOT_FILE), "{\"version\":1,").unwrap();
        let err = open(dir.path(), 1 << 23, COMPACT_BYTES)
            .unwrap_err()
            .to_string();
        assert!(err.contains(SNAPSHOT_FILE), "{err}");
    }
}

#[cfg(test)]
mod posts_tests {
    use super::*;

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
