//! Which process is the bridge of a data directory, and where it listens.
//!
//! One process consumes a Bison Relay client (its acknowledgements are per client),
//! so every other command on the same data directory goes through that process:
//! `bridge stdio` attaches to it, `bridge approvals` asks it. The owner holds an
//! exclusive lock on [`BRIDGE_LOCK_FILE`] for its lifetime (the operating system
//! releases it when the process dies, however it dies) and records its listener's
//! address in [`ENDPOINT_FILE`] after each bind, removing it when the listener stops.
//! A record whose lock no one holds is a killed process's and names no bridge.

use std::io::{self, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::lock;
use crate::secure_fs;

/// The lock file the bridge of a data directory holds.
const BRIDGE_LOCK_FILE: &str = "bridge.lock";

/// The running bridge's listener address, as JSON `{"addr": .., "pid": ..}`.
pub const ENDPOINT_FILE: &str = "bridge.endpoint";

/// Bytes of the record read at most: an address and a pid fit in far less; a file
/// planted there cannot make a reader read without bound.
const MAX_RECORD: u64 = 1024;

/// How often [`Ownership::claim_within`] tries the lock.
const CLAIM_RETRY: Duration = Duration::from_millis(50);

/// A data directory's bridge files could not be used.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {source}")]
pub struct PresenceError {
    /// The file.
    pub path: PathBuf,
    /// The operating system's error (a symbolic link is refused as one).
    #[source]
    pub source: io::Error,
}

/// What the endpoint record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointRecord {
    /// The listener's bound address.
    pub addr: SocketAddr,
    /// The owner's process id (for messages).
    pub pid: u32,
}

/// Being the bridge of a data directory: the held lock, and the endpoint record while
/// the listener runs. Dropping it removes the record, then releases the lock.
#[derive(Debug)]
pub struct Ownership {
    data_dir: PathBuf,
    published: Mutex<Option<SocketAddr>>,
    _lock: std::fs::File,
}

impl Ownership {
    /// Takes the lock of `data_dir` if no process holds it.
    ///
    /// # Errors
    /// [`PresenceError`] when the lock file cannot be made or opened.
    pub fn claim(data_dir: &Path) -> Result<Option<Self>, PresenceError> {
        let file = open_lock(data_dir)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(Self {
                data_dir: data_dir.to_owned(),
                published: Mutex::new(None),
                _lock: file,
            })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(source)) => Err(PresenceError {
                path: data_dir.join(BRIDGE_LOCK_FILE),
                source,
            }),
        }
    }

    /// As [`claim`](Self::claim), trying for up to `wait`: rides out a reader's brief
    /// look and a previous run still closing.
    ///
    /// # Errors
    /// As [`claim`](Self::claim).
    pub fn claim_within(data_dir: &Path, wait: Duration) -> Result<Option<Self>, PresenceError> {
        let deadline = Instant::now() + wait;
        loop {
            if let Some(owned) = Self::claim(data_dir)? {
                return Ok(Some(owned));
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(CLAIM_RETRY);
        }
    }

    /// Records `addr` as the bridge's listener.
    pub(crate) fn publish(&self, addr: SocketAddr) -> Result<(), PresenceError> {
        let path = self.data_dir.join(ENDPOINT_FILE);
        let record = EndpointRecord {
            addr,
            pid: std::process::id(),
        };
        let json = serde_json::to_vec(&record).map_err(|e| PresenceError {
            path: path.clone(),
            source: io::Error::other(e),
        })?;
        secure_fs::write_atomic(&path, &json).map_err(|source| PresenceError { path, source })?;
        *lock(&self.published) = Some(addr);
        Ok(())
    }

    /// Removes the record if it names `addr` (a listener stopped).
    pub(crate) fn withdraw(&self, addr: SocketAddr) {
        let mut published = lock(&self.published);
        if *published == Some(addr) {
            let _ = std::fs::remove_file(self.data_dir.join(ENDPOINT_FILE));
            *published = None;
        }
    }
}

impl Drop for Ownership {
    fn drop(&mut self) {
        if lock(&self.published).take().is_some() {
            let _ = std::fs::remove_file(self.data_dir.join(ENDPOINT_FILE));
        }
    }
}

/// A running bridge of a data directory, as a reader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningBridge {
    /// Its listener, when one runs (none yet while it starts, or none enabled).
    pub endpoint: Option<EndpointRecord>,
}

/// The bridge running on `data_dir`, if a process holds its lock.
///
/// # Errors
/// [`PresenceError`] when the lock file or the record cannot be read (a symbolic
/// link included).
pub fn running_bridge(data_dir: &Path) -> Result<Option<RunningBridge>, PresenceError> {
    let lock_path = data_dir.join(BRIDGE_LOCK_FILE);
    secure_fs::refuse_symlink(&lock_path).map_err(|source| PresenceError {
        path: lock_path.clone(),
        source,
    })?;
    let file = match std::fs::File::open(&lock_path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(PresenceError {
                path: lock_path,
                source,
            });
        }
    };
    match file.try_lock_shared() {
        // No owner: a record there is a killed process's.
        Ok(()) => return Ok(None),
        Err(std::fs::TryLockError::WouldBlock) => {}
        Err(std::fs::TryLockError::Error(source)) => {
            return Err(PresenceError {
                path: lock_path,
                source,
            });
        }
    }
    Ok(Some(RunningBridge {
        endpoint: read_record(&data_dir.join(ENDPOINT_FILE))?,
    }))
}

fn read_record(path: &Path) -> Result<Option<EndpointRecord>, PresenceError> {
    let err = |source| PresenceError {
        path: path.to_owned(),
        source,
    };
    secure_fs::refuse_symlink(path).map_err(err)?;
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err(e)),
    };
    let mut text = String::new();
    file.take(MAX_RECORD)
        .read_to_string(&mut text)
        .map_err(err)?;
    // Replaced atomically, so a partial record is not the owner's: as none yet.
    Ok(serde_json::from_str(&text).ok())
}

fn open_lock(data_dir: &Path) -> Result<std::fs::File, PresenceError> {
    let path = data_dir.join(BRIDGE_LOCK_FILE);
    let err = |source| PresenceError {
        path: path.clone(),
        source,
    };
    secure_fs::write_new(&path, b"").map_err(err)?;
    secure_fs::refuse_symlink(&path).map_err(err)?;
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_owner_and_its_record() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(running_bridge(dir.path()).unwrap(), None);
        let owner = Ownership::claim(dir.path()).unwrap().expect("free");
        assert!(Ownership::claim(dir.path()).unwrap().is_none(), "held");
        assert_eq!(
            running_bridge(dir.path()).unwrap(),
            Some(RunningBridge { endpoint: None }),
            "running, not listening yet"
        );
        let addr: SocketAddr = "127.0.0.1:4321".parse().unwrap();
        owner.publish(addr).unwrap();
        let seen = running_bridge(dir.path())
            .unwrap()
            .unwrap()
            .endpoint
            .unwrap();
        assert_eq!((seen.addr, seen.pid), (addr, std::process::id()));
        // A reader's look does not keep the owner's lock from being held.
        assert!(Ownership::claim(dir.path()).unwrap().is_none());

        owner.withdraw("127.0.0.1:1".parse().unwrap());
        assert!(dir.path().join(ENDPOINT_FILE).exists(), "another address");
        owner.withdraw(addr);
        assert!(!dir.path().join(ENDPOINT_FILE).exists());
        owner.publish(addr).unwrap();
        drop(owner);
        assert!(!dir.path().join(ENDPOINT_FILE).exists(), "removed on drop");
        assert_eq!(running_bridge(dir.path()).unwrap(), None);
        assert!(
            Ownership::claim_within(dir.path(), Duration::ZERO)
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn a_dead_owners_record_names_no_bridge() {
        let dir = tempfile::tempdir().unwrap();
        let owner = Ownership::claim(dir.path()).unwrap().unwrap();
        owner.publish("127.0.0.1:4321".parse().unwrap()).unwrap();
        // As a killed process leaves it: the record stays, the lock goes.
        owner.published.lock().unwrap().take();
        drop(owner);
        assert!(dir.path().join(ENDPOINT_FILE).exists());
        assert_eq!(running_bridge(dir.path()).unwrap(), None);
    }

    #[cfg(unix)]
    #[test]
    fn files_are_the_owners_only_and_never_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let owner = Ownership::claim(dir.path()).unwrap().unwrap();
        owner.publish("127.0.0.1:4321".parse().unwrap()).unwrap();
        for name in [BRIDGE_LOCK_FILE, ENDPOINT_FILE] {
            let meta = std::fs::symlink_metadata(dir.path().join(name)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
        }
        drop(owner);

        let other = tempfile::tempdir().unwrap();
        let target = other.path().join("target");
        std::fs::write(&target, b"{}").unwrap();
        // A link at the record: the owner refuses to write through it.
        let record = dir.path().join(ENDPOINT_FILE);
        std::os::unix::fs::symlink(&target, &record).unwrap();
        let owner = Ownership::claim(dir.path()).unwrap().unwrap();
        let e = owner.publish("127.0.0.1:1".parse().unwrap()).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"{}");
        let e = running_bridge(dir.path()).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        drop(owner);
        std::fs::remove_file(&record).unwrap();

        // A link at the lock: neither claimed nor read through.
        let lock = dir.path().join(BRIDGE_LOCK_FILE);
        std::fs::remove_file(&lock).unwrap();
        std::os::unix::fs::symlink(&target, &lock).unwrap();
        let e = Ownership::claim(dir.path()).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = running_bridge(dir.path()).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }
}
