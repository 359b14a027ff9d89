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
//!
//! The changes and their records are in `ops`, the state they apply to in `snapshot`,
//! reading a directory in `load`, and the running journal in `journal`.

use std::path::Path;
use std::time::Duration;

use super::DevnetError;

mod journal;
mod load;
mod ops;
mod snapshot;
pub(crate) use journal::{Journal, open};
use load::read_state;
pub(crate) use ops::{Op, PendingTip, TipRecord, Uid, hex32};
pub(crate) use snapshot::{NodeSnap, Snapshot, push_recent};

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
    use std::io::Write as _;

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
