//! Reading a directory's kept state: the snapshot, then the journal's later lines in
//! order, a torn last line dropped and anything else that does not parse refused
//! with its file named.

use std::path::Path;

use serde::Deserialize;

use super::{JOURNAL_FILE, Op, SNAPSHOT_FILE, SNAPSHOT_VERSION, Snapshot};
use crate::DevnetError;

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
pub(super) fn read_state(
    dir: &Path,
    replay_file_size: u64,
) -> Result<Option<Snapshot>, DevnetError> {
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
