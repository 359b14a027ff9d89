//! The three streams a bot consumes (PMStream, TipStream, TipProgress), where their
//! progress is recorded ([`AckStore`]), and how redeliveries are recognised.
//!
//! brclient stores every item before delivering it and replays, on every stream open,
//! the items not yet acknowledged whose sequence id is above the open's `unackedFrom`.
//! Acknowledgements are cumulative. Each item goes through, in this order:
//!
//! 1. **process**: the handler runs (a failing handler is retried with backoff, and
//!    nothing later on that stream is processed meanwhile);
//! 2. **record**: the id is written to the [`AckStore`] as the last processed one;
//! 3. **ack**: the server is told.
//!
//! On every (re)connection a stream is reopened from the last id the server confirmed
//! acknowledging in this process (0 after a start), so whatever the server still holds
//! is redelivered; redeliveries are recognised by sequence id and acknowledged without
//! being processed again. An item is a redelivery when its id is at most the recorded
//! id found at start, or when it was processed since.
//!
//! Known limits, from the server's design: if brclient's replay logs are all removed
//! its ids restart low, and items below the recorded id are then taken for redeliveries
//! (clear the store with the logs). Tip events may reach the wire slightly out of id
//! order; a cumulative ack of a later one also clears an earlier one still on its way,
//! which is lost only if the process dies before that earlier one arrives.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;
use tokio::sync::mpsc;

use super::error::ClientRpcError;
use super::lock;
use super::proto::method;
use crate::error::BoxError;

/// Ids processed in this process that are remembered for dedupe, per stream.
///
/// The server redelivers only what is not yet acknowledged, and every item is
/// acknowledged right after it is processed, so a handful would do; ids evicted past
/// this bound still count as seen when not above the largest evicted one.
pub const SEEN_IDS: usize = 1024;

/// A stream the host consumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StreamKind {
    /// `ChatService.PMStream`: PMs received.
    Pm,
    /// `PaymentsService.TipProgress`: progress of tips we send.
    TipProgress,
    /// `PaymentsService.TipStream`: tips received.
    TipReceived,
}

impl StreamKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Pm, Self::TipProgress, Self::TipReceived];

    /// The stream's method, without suffix.
    pub const fn method(self) -> &'static str {
        match self {
            Self::Pm => method::PM_STREAM,
            Self::TipProgress => method::TIP_PROGRESS,
            Self::TipReceived => method::TIP_STREAM,
        }
    }

    /// The method acknowledging its items.
    pub const fn ack_method(self) -> &'static str {
        match self {
            Self::Pm => method::ACK_RECEIVED_PM,
            Self::TipProgress => method::ACK_TIP_PROGRESS,
            Self::TipReceived => method::ACK_TIP_RECEIVED,
        }
    }

    /// A short name: brclient's replay log name (`pm`, `tipprogress`, `tipstream`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Pm => "pm",
            Self::TipProgress => "tipprogress",
            Self::TipReceived => "tipstream",
        }
    }

    const fn index(self) -> usize {
        match self {
            Self::Pm => 0,
            Self::TipProgress => 1,
            Self::TipReceived => 2,
        }
    }
}

/// Where the last processed sequence id of each stream is recorded.
///
/// [`save`](Self::save) must be durable when it returns: the item is acknowledged
/// next, and the server then forgets it. Calls run on tokio's blocking pool, so a
/// store may block (a file, SQLite).
pub trait AckStore: Send + Sync + 'static {
    /// The last processed id of `kind`; 0 when none was recorded.
    ///
    /// # Errors
    /// The store could not be read; the host does not start.
    fn load(&self, kind: StreamKind) -> Result<u64, BoxError>;

    /// Records `sequence_id` as the last processed id of `kind`. Ids passed only grow.
    ///
    /// # Errors
    /// The record is not durable; the item is then not acknowledged.
    fn save(&self, kind: StreamKind, sequence_id: u64) -> Result<(), BoxError>;
}

/// An [`AckStore`] in memory: nothing survives the process. For tests, and for a host
/// whose handlers dedupe by sequence id themselves.
#[derive(Debug, Default)]
pub struct MemoryAckStore {
    ids: Mutex<[u64; 3]>,
}

impl MemoryAckStore {
    /// A store that starts with these ids recorded.
    pub fn with(ids: impl IntoIterator<Item = (StreamKind, u64)>) -> Self {
        let store = Self::default();
        for (kind, id) in ids {
            lock(&store.ids)[kind.index()] = id;
        }
        store
    }
}

impl AckStore for MemoryAckStore {
    fn load(&self, kind: StreamKind) -> Result<u64, BoxError> {
        Ok(lock(&self.ids)[kind.index()])
    }

    fn save(&self, kind: StreamKind, sequence_id: u64) -> Result<(), BoxError> {
        lock(&self.ids)[kind.index()] = sequence_id;
        Ok(())
    }
}

/// The default [`AckStore`]: one small JSON file in a data directory,
/// `{"pm":N,"tipprogress":N,"tipstream":N}`, replaced atomically (written to a
/// temporary file, synced, renamed over the old one, directory synced) on every save.
#[derive(Debug)]
pub struct FileAckStore {
    path: PathBuf,
    ids: Mutex<[u64; 3]>,
}

/// The file's contents.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(default)]
struct AckFile {
    pm: u64,
    tipprogress: u64,
    tipstream: u64,
}

impl FileAckStore {
    /// The file's name inside the data directory.
    pub const FILE_NAME: &'static str = "clientrpc-acks.json";

    /// Opens (or starts) the store in `dir`, creating the directory if needed.
    ///
    /// # Errors
    /// [`ClientRpcError::Io`] when the directory cannot be created or the file read;
    /// [`ClientRpcError::Store`] when the file is not the store's JSON.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, ClientRpcError> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| ClientRpcError::io(dir, e))?;
        let path = dir.join(Self::FILE_NAME);
        let file = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<AckFile>(&bytes)
                .map_err(|e| ClientRpcError::Store(format!("{}: {e}", path.display()).into()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => AckFile::default(),
            Err(e) => return Err(ClientRpcError::io(path, e)),
        };
        Ok(Self {
            path,
            ids: Mutex::new([file.pm, file.tipprogress, file.tipstream]),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn write(&self, ids: [u64; 3]) -> std::io::Result<()> {
        use std::io::Write as _;
        let file = AckFile {
            pm: ids[0],
            tipprogress: ids[1],
            tipstream: ids[2],
        };
        let bytes = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        // The rename is durable once the directory is synced. Not every platform can
        // open a directory for that; there the rename alone is what we get.
        if let Some(dir) = self.path.parent()
            && let Ok(d) = std::fs::File::open(dir)
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl AckStore for FileAckStore {
    fn load(&self, kind: StreamKind) -> Result<u64, BoxError> {
        Ok(lock(&self.ids)[kind.index()])
    }

    fn save(&self, kind: StreamKind, sequence_id: u64) -> Result<(), BoxError> {
        let mut ids = lock(&self.ids);
        let mut next = *ids;
        next[kind.index()] = sequence_id;
        self.write(next)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        *ids = next;
        Ok(())
    }
}

/// Per-stream state shared by the consumer task and the connection supervisor.
#[derive(Debug)]
pub(crate) struct Progress {
    /// The recorded id found at start: anything at or below it was processed before.
    floor: u64,
    /// The largest id recorded.
    recorded: u64,
    /// The largest id the server confirmed acknowledging, in this process.
    acked: u64,
    /// Ids processed in this process (bounded by [`SEEN_IDS`]).
    seen: BTreeSet<u64>,
    /// The largest id evicted from `seen`.
    evicted: u64,
}

impl Progress {
    pub(crate) const fn new(recorded: u64) -> Self {
        Self {
            floor: recorded,
            recorded,
            acked: 0,
            seen: BTreeSet::new(),
            evicted: 0,
        }
    }

    /// Whether the item was processed already.
    pub(crate) fn is_duplicate(&self, id: u64) -> bool {
        id <= self.floor || id <= self.evicted || self.seen.contains(&id)
    }

    /// Whether recording `id` moves the record forward.
    pub(crate) const fn needs_record(&self, id: u64) -> bool {
        id > self.recorded
    }

    /// Notes `id` as processed, and as recorded when `recorded` (the store took it).
    pub(crate) fn processed(&mut self, id: u64, recorded: bool) {
        if recorded {
            self.recorded = self.recorded.max(id);
        }
        self.seen.insert(id);
        if self.seen.len() > SEEN_IDS
            && let Some(oldest) = self.seen.pop_first()
        {
            self.evicted = self.evicted.max(oldest);
        }
    }

    pub(crate) fn acked(&mut self, id: u64) {
        self.acked = self.acked.max(id);
    }

    /// Where a reopened stream starts: after the last confirmed acknowledgement.
    pub(crate) const fn unacked_from(&self) -> u64 {
        self.acked
    }
}

/// One consumed stream's progress, shared by its consumer and the supervisor (which
/// also holds the sending side of the queue its items go to, from whichever connection
/// they arrive on; the consumer ends when that side is dropped).
#[derive(Debug)]
pub(crate) struct StreamRuntime {
    pub(crate) kind: StreamKind,
    pub(crate) progress: Mutex<Progress>,
}

/// A stream's runtime and the sending side of its queue.
pub(crate) type StreamEntry = (std::sync::Arc<StreamRuntime>, mpsc::UnboundedSender<Value>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_dedupes_by_floor_seen_and_eviction() {
        let mut p = Progress::new(100);
        assert!(p.is_duplicate(100) && p.is_duplicate(5));
        assert!(!p.is_duplicate(101));
        p.processed(150, true);
        assert!(p.is_duplicate(150));
        // An earlier id arriving late (tips can be reordered) is still new.
        assert!(!p.is_duplicate(120));
        assert!(!p.needs_record(120));
        for id in 1000..1000 + SEEN_IDS as u64 {
            p.processed(id, true);
        }
        assert!(p.is_duplicate(150), "evicted, below the largest evicted id");
        assert_eq!(p.unacked_from(), 0);
        p.acked(1000);
        p.acked(900);
        assert_eq!(p.unacked_from(), 1000);
    }

    #[test]
    fn file_store_round_trips_and_replaces_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let store = FileAckStore::open(dir.path()).unwrap();
        assert_eq!(store.load(StreamKind::Pm).unwrap(), 0);
        store.save(StreamKind::Pm, 4_294_967_461).unwrap();
        store.save(StreamKind::TipReceived, u64::MAX).unwrap();
        let again = FileAckStore::open(dir.path()).unwrap();
        assert_eq!(again.load(StreamKind::Pm).unwrap(), 4_294_967_461);
        assert_eq!(again.load(StreamKind::TipReceived).unwrap(), u64::MAX);
        assert_eq!(again.load(StreamKind::TipProgress).unwrap(), 0);
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [FileAckStore::FILE_NAME], "no temporary file left");
    }
}
