//! Checkpoints of the serving connection's write-ahead log, kept off the paths that
//! may not wait.
//!
//! SQLite checkpoints on the thread of the commit that grows the log past
//! `wal_autocheckpoint` pages, and a checkpoint syncs the log and the database. The
//! serving connection makes some commits on the harness's own task ([`at_once`]), where
//! no sync may run, so it replaces SQLite's checkpoints by a log hook that only notes
//! the log's size after each commit, and checkpoints once the log holds
//! [`CHECKPOINT_PAGES`], from a path that may block: a group sync's waiter, or a
//! charge on the blocking pool. The immediate paths decline while a checkpoint is
//! due, so the log stays bounded whatever the mix of calls.
//!
//! [`at_once`]: super::at_once

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU64, Ordering};

use rusqlite::hooks::Wal;
use rusqlite::{Connection, Transaction};

/// Log pages after which the log is checkpointed: 1,000, SQLite's own default (about
/// 4 MiB), so the log's lookups stay short and a checkpoint copies little at a time.
pub const CHECKPOINT_PAGES: u64 = 1_000;

thread_local! {
    /// The log's pages after this thread's last commit on a hooked connection; -1
    /// until the hook runs.
    static LOG_PAGES: Cell<c_int> = const { Cell::new(-1) };
}

/// The log hook: runs on the committing thread after each commit that wrote the log.
#[allow(clippy::unnecessary_wraps)] // the hook's signature
fn note_pages(_: &Wal, pages: c_int) -> rusqlite::Result<()> {
    LOG_PAGES.set(pages);
    Ok(())
}

/// The serving connection's log: its size, and when it is checkpointed.
#[derive(Debug, Default)]
pub(super) struct Checkpoints {
    /// Log pages after the last commit seen.
    pages: AtomicU64,
}

impl Checkpoints {
    /// Makes `conn`'s commits note the log's size instead of checkpointing it.
    pub(super) fn hook(conn: &Connection) {
        conn.wal_hook(Some(note_pages));
    }

    /// Commits `tx`, noting the log's size.
    pub(super) fn commit(&self, tx: Transaction<'_>) -> rusqlite::Result<()> {
        LOG_PAGES.set(-1);
        tx.commit()?;
        if let Ok(pages) = u64::try_from(LOG_PAGES.get()) {
            self.pages.store(pages, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A checkpoint is due.
    pub(super) fn due(&self) -> bool {
        self.pages.load(Ordering::Relaxed) >= CHECKPOINT_PAGES
    }

    /// Checkpoints `conn`'s log if one is due: passive, so it copies what no reader
    /// still needs and never waits for one. The next commit notes what is left.
    pub(super) fn run_if_due(&self, conn: &Connection) -> rusqlite::Result<()> {
        if !self.due() {
            return Ok(());
        }
        conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
        self.pages.store(0, Ordering::Relaxed);
        Ok(())
    }
}
