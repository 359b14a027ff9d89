//! The PM streams of a data directory on a client, written once for every role: each
//! PM recorded in the directory's journal before it is acknowledged, then handed to
//! the role (the harness, the bridge's router) from the journal; the directory bound to
//! the client's identity, and the client held by this process alone.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use brmcp_adapters::{BoxError, Clock as _, PeerId, SystemClock};
use brmcp_clientrpc::Streams;
use tokio::sync::Notify;

use super::journal::{self, JournalHandler, PmJournal, PmJournalError};

/// The streams that feed a role from a client through the journal of `datadir`: PMs
/// recorded, then acknowledged, then handed to `deliver` in order (also those a crash
/// left recorded and not handed on), and the directory bound to the client's identity
/// at every connect (`client_guard`). The role adds its own streams (tips, tip
/// outcomes, key exchanges) to the result.
///
/// # Errors
/// [`PmJournalError`] when the journal cannot be opened.
pub fn journal_streams<F, Fut>(datadir: &Path, deliver: F) -> Result<Streams, PmJournalError>
where
    F: Fn(PeerId, String) -> Fut + Send + 'static,
    Fut: Future<Output = Result<(), BoxError>> + Send + 'static,
{
    let journal = Arc::new(PmJournal::open(datadir)?);
    let wake = Arc::new(Notify::new());
    tokio::spawn(journal::forward(journal.clone(), wake.clone(), deliver));
    Ok(Streams::new()
        .pms(JournalHandler::new(journal.clone(), wake))
        .identity(client_guard(journal)))
}

/// How long a start waits for another consumer's hold on the client to go: rides out a
/// previous run of this process (or of a test) that is still closing.
const CLIENT_LOCK_WAIT: Duration = Duration::from_secs(3);

/// How often the hold is tried within [`CLIENT_LOCK_WAIT`].
const CLIENT_LOCK_RETRY: Duration = Duration::from_millis(50);

/// The file whose lock marks the one brmcp consuming the client `identity` on this
/// machine.
fn client_lock_path(identity: &PeerId) -> PathBuf {
    std::env::temp_dir().join(format!("brmcp-client-{identity}.lock"))
}

/// The identity check of a process consuming a client's streams: binds the data
/// directory to the first client it serves (refusing another one), and holds the
/// client for this process, refusing to start beside another brmcp consuming it.
///
/// One brmcp per client: the client's acknowledgements are per client, not per
/// connection, so a second consumer (a `brmcp serve` and a `brmcp bridge` on one
/// client, say) clears PMs and tips the first has not recorded. The hold is a lock
/// file in the temporary directory named by the client's identity, so it catches a
/// second consumer on this machine; one on another machine goes unseen.
fn client_guard(
    journal: Arc<PmJournal>,
) -> impl Fn(PeerId) -> Result<(), BoxError> + Send + Sync + 'static {
    let held: Mutex<Option<ClientLock>> = Mutex::new(None);
    move |identity: PeerId| {
        journal.bind(&identity, SystemClock.now())?;
        let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.as_ref().is_some_and(|lock| lock.identity == identity) {
            return Ok(());
        }
        *held = Some(ClientLock::take(identity)?);
        Ok(())
    }
}

/// The hold on one client: the locked file, removed again when the hold ends so the
/// temporary directory does not collect one file per client ever served.
struct ClientLock {
    identity: PeerId,
    path: PathBuf,
    file: std::fs::File,
}

impl ClientLock {
    fn take(identity: PeerId) -> Result<Self, BoxError> {
        let path = client_lock_path(&identity);
        let deadline = Instant::now() + CLIENT_LOCK_WAIT;
        loop {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                // Another user's file: a lock needs no write access.
                .or_else(|_| std::fs::File::open(&path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            match file.try_lock() {
                // The holder before us removes the file as it lets go: a lock on a file
                // no longer at the path holds nothing, so open the path again.
                Ok(()) if same_file(&file, &path) => {
                    return Ok(Self {
                        identity,
                        path,
                        file,
                    });
                }
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(CLIENT_LOCK_RETRY);
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(format!(
                        "another brmcp process consumes the Bison Relay client {identity} \
                         (it holds {}); the client's acknowledgements are per client, so \
                         two consumers would clear each other's PMs and tips: give each \
                         brmcp its own client",
                        path.display()
                    )
                    .into());
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(format!("{}: {e}", path.display()).into());
                }
            }
        }
    }
}

impl Drop for ClientLock {
    fn drop(&mut self) {
        // Removed while still locked, so a waiter that locks the old file sees it gone
        // (`same_file`) and opens a fresh one; only our own file is removed.
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

/// Whether `file` is the file now at `path`.
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        match (file.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client identity no other test uses: the lock files are per identity.
    fn random_peer() -> PeerId {
        let mut me = [0u8; 32];
        getrandom::fill(&mut me).unwrap();
        PeerId::from_bytes(me)
    }

    #[test]
    fn a_second_consumer_of_one_client_is_refused() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let me = random_peer();
        let first = client_guard(Arc::new(PmJournal::open(a.path()).unwrap()));
        first(me).unwrap();
        // Reconnecting is fine.
        first(me).unwrap();
        let second = client_guard(Arc::new(PmJournal::open(b.path()).unwrap()));
        let e = second(me).unwrap_err().to_string();
        assert!(e.contains("another brmcp process consumes"), "{e}");
        // Once the first is gone, the client is free, and its lock file gone with it.
        drop(first);
        assert!(!client_lock_path(&me).exists());
        second(me).unwrap();
        assert!(client_lock_path(&me).exists());
        drop(second);
        assert!(!client_lock_path(&me).exists());
    }

    #[test]
    fn a_waiter_takes_the_client_when_the_holder_goes_and_its_file_is_removed() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let me = random_peer();
        let first = client_guard(Arc::new(PmJournal::open(a.path()).unwrap()));
        first(me).unwrap();
        let second = client_guard(Arc::new(PmJournal::open(b.path()).unwrap()));
        let waiter = std::thread::spawn(move || second(me).map(|()| second));
        std::thread::sleep(CLIENT_LOCK_RETRY * 4);
        drop(first);
        let second = waiter.join().unwrap().unwrap();
        // The waiter holds the file now at the path, so a third is refused.
        let c = tempfile::tempdir().unwrap();
        let third = client_guard(Arc::new(PmJournal::open(c.path()).unwrap()));
        let e = third(me).unwrap_err().to_string();
        assert!(e.contains("another brmcp process consumes"), "{e}");
        drop(second);
        assert!(!client_lock_path(&me).exists());
    }

    #[test]
    fn a_data_directory_refuses_another_client() {
        let dir = tempfile::tempdir().unwrap();
        let mut ids = [[0u8; 32]; 2];
        for id in &mut ids {
            getrandom::fill(id).unwrap();
        }
        let [one, two] = ids.map(PeerId::from_bytes);
        let guard = client_guard(Arc::new(PmJournal::open(dir.path()).unwrap()));
        guard(one).unwrap();
        let e = guard(two).unwrap_err().to_string();
        assert!(
            e.contains(&one.to_string()) && e.contains("start fresh"),
            "{e}"
        );
        let _ = std::fs::remove_file(client_lock_path(&one));
    }
}
