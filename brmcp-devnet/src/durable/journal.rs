//! The journal of a running devnet: opening a directory's state (loaded, then
//! compacted), appending one line per group of changes, the fsync thread, and
//! compaction into a new snapshot.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde::Serialize;

use super::load::read_state;
use super::{JOURNAL_FILE, Op, SNAPSHOT_FILE, SYNC_INTERVAL, Snapshot};
use crate::DevnetError;

/// One journal line as written.
#[derive(Serialize)]
struct LineOut<'a> {
    seq: u64,
    ops: &'a [Op],
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
