//! Group commit: one fsync for every transaction that reached it.
//!
//! The serving ledger's connection commits with `synchronous = NORMAL`: a commit
//! writes its WAL frames (so it survives the process being killed) without syncing
//! them. A commit that must survive a power cut before its caller acts on it takes a
//! [`Ticket`] and waits in [`GroupSync::durable`] until the WAL has been synced past
//! it. One waiter syncs while the others wait; what the sync covers is every commit
//! ticketed before it began, so concurrent callers share one fsync, and a lone caller
//! pays the one it paid under `synchronous = FULL`.
//!
//! SQLite itself syncs the WAL before a checkpoint copies frames into the database
//! and the database after, so a commit whose frames a checkpoint already moved is
//! durable by then; syncing the WAL file covers the rest.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// A committed transaction's place in commit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Ticket(u64);

impl Ticket {
    /// The ticket numbered `n` (a [`Commit`](crate::server::Commit) handed back).
    pub(super) const fn new(n: u64) -> Self {
        Self(n)
    }

    /// Its number.
    pub(super) const fn get(self) -> u64 {
        self.0
    }
}

/// The serving connection's commits and how far the WAL is synced.
#[derive(Debug)]
pub(super) struct GroupSync {
    /// The database file; its WAL is beside it.
    db: PathBuf,
    wal: PathBuf,
    /// Commits ticketed so far.
    committed: AtomicU64,
    state: Mutex<Synced>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct Synced {
    /// Every ticket up to this one is durable.
    durable: u64,
    /// A waiter is syncing now.
    syncing: bool,
}

impl GroupSync {
    pub(super) fn new(db: &Path) -> Self {
        let mut wal = db.as_os_str().to_owned();
        wal.push("-wal");
        Self {
            db: db.to_owned(),
            wal: wal.into(),
            committed: AtomicU64::new(0),
            state: Mutex::default(),
            changed: Condvar::new(),
        }
    }

    /// The ticket of a transaction that has just committed. Taken after the commit
    /// returned, so a sync that sees it covers that commit's frames.
    pub(super) fn ticket(&self) -> Ticket {
        Ticket(self.committed.fetch_add(1, Ordering::SeqCst) + 1)
    }

    /// Returns once the commit of `ticket` is on disk: synced by this caller, or by
    /// another whose sync began after it.
    ///
    /// # Errors
    ///
    /// The sync's failure, to the caller that ran it (the others try again).
    pub(super) fn durable(&self, ticket: Ticket) -> io::Result<()> {
        // A ticket never handed out (a made-up commit) waits for every commit so far,
        // not for ever.
        let wanted = ticket.0.min(self.committed.load(Ordering::SeqCst));
        let mut state = self.lock();
        loop {
            if state.durable >= wanted {
                return Ok(());
            }
            if state.syncing {
                state = self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            state.syncing = true;
            drop(state);
            // Every commit ticketed by now wrote its frames before its ticket.
            let upto = self.committed.load(Ordering::SeqCst);
            let synced = self.sync_wal();
            state = self.lock();
            state.syncing = false;
            if synced.is_ok() {
                state.durable = state.durable.max(upto);
            }
            self.changed.notify_all();
            synced?;
        }
    }

    /// Syncs the WAL file's data (any descriptor of a file syncs the file). Without a
    /// WAL file every frame was checkpointed, and SQLite synced the database after.
    fn sync_wal(&self) -> io::Result<()> {
        match std::fs::File::open(&self.wal) {
            Ok(wal) => wal.sync_data(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                std::fs::File::open(&self.db)?.sync_data()
            }
            Err(e) => Err(e),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Synced> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_ticket_is_durable_once_a_sync_that_began_after_it_ends() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        std::fs::write(&db, b"x").unwrap();
        let sync = Arc::new(GroupSync::new(&db));
        let first = sync.ticket();
        sync.durable(first).unwrap();
        assert_eq!(sync.lock().durable, 1);
        // Many waiters at once: each returns, and the syncs cover every ticket.
        let tickets: Vec<_> = (0..16).map(|_| sync.ticket()).collect();
        let waiters: Vec<_> = tickets
            .into_iter()
            .map(|t| {
                let sync = sync.clone();
                std::thread::spawn(move || sync.durable(t))
            })
            .collect();
        for w in waiters {
            w.join().unwrap().unwrap();
        }
        assert_eq!(sync.lock().durable, 17);
        assert!(!sync.lock().syncing);
    }

    #[test]
    fn a_failed_sync_fails_its_caller_and_proves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        // Neither the WAL nor the database exists: the sync fails.
        let sync = GroupSync::new(&dir.path().join("gone"));
        let t = sync.ticket();
        assert!(sync.durable(t).is_err());
        assert_eq!(sync.lock().durable, 0);
    }
}
