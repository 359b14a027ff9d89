//! A node's replay logs: what makes its streams store-and-forward, kept apart from the
//! node because the id arithmetic and brclient's edge cases are a model of their own.
//!
//! Each stream type has a log shaped like brclient's `replaymsglog`: entries are JSON
//! lines in numbered files, and an entry's `sequence_id` is `file_index << 32 |
//! end_offset`. The first file is 1, so ids are above 2^32, and consecutive ids differ
//! by the entry's length, not by one. Files rotate at
//! [`DevnetConfig::replay_file_size`](crate::DevnetConfig::replay_file_size).
//!
//! An ack of id N blanks everything up to N in N's file and removes every older file.
//! The model keeps brclient's edges: an ack past the end of the current file pads it
//! (the next id jumps), an ack naming a later file removes every file and restarts ids
//! at file 1, and a stream opened with an `unackedFrom` inside an entry skips that
//! entry (its partial line does not decode).

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::{Event, StreamKind};

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
}
