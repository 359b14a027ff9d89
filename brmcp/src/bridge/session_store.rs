//! The bridge's session to each bot, remembered across restarts.
//!
//! There is no close frame on the wire (WIRE.md §8): a bridge that exits leaves its
//! session open on the bot, and one that opens a new session on every start fills the
//! bot's per-peer bound. A session is named by (peer, sid) only, the sid is the
//! client's to choose, and every message carries a fresh mid, so a new process can go
//! on with the sid a previous one opened: the bot serves it if it is still open,
//! resumes it from its record if it expired it (§8 *Resuming*), and otherwise answers
//! session-not-found, on which the bridge opens a fresh session.
//!
//! What a resumed run cannot take over from the run before is its JSON-RPC request ids:
//! rmcp numbers them from 0 in every process, and an answer to a call the previous run
//! left running may still arrive. Each run on a saved session therefore has its own
//! *epoch*, saved before the run sends anything, and its request ids and progress
//! tokens are offset by `epoch · 2^32` on the wire (see `link`): an answer of another
//! run falls outside the range and is dropped.
//!
//! One file per bot, `sessions/<bot uid>.json`, 0600 in a 0700 directory. It is a
//! cache: one that cannot be read costs only a new session.

use std::io;
use std::path::{Path, PathBuf};

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::SessionId;
use rmcp::model::ServerPeerInfo;
use serde::{Deserialize, Serialize};

/// The directory, under the bridge's data directory, holding the saved sessions.
pub(crate) const SESSIONS_DIR: &str = "sessions";

/// Runs on one saved session before the bridge opens a fresh one: one past the last
/// [`IdRange`](brmcp_adapters::IdRange), as a run's ids are its epoch's range, so every
/// id stays exact as a JSON number in every reader.
pub(crate) const MAX_EPOCH: u64 = brmcp_adapters::MAX_ID_RANGE + 1;

/// A bot's session as saved.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Saved {
    /// The session id the bridge opened.
    pub(crate) sid: String,
    /// The last run's epoch on it; 0 for the run that opened it.
    pub(crate) epoch: u64,
    /// The bot's answer to the session's `initialize`.
    pub(crate) server: ServerPeerInfo,
}

impl Saved {
    /// The session id, if the file holds a valid one.
    pub(crate) fn session_id(&self) -> Option<SessionId> {
        self.sid.parse().ok()
    }
}

/// Where the bridge keeps its sessions.
#[derive(Debug, Clone)]
pub(crate) struct SessionStore {
    dir: PathBuf,
}

impl SessionStore {
    /// The store under the data directory `data_dir`.
    pub(crate) fn new(data_dir: &Path) -> Self {
        Self {
            dir: data_dir.join(SESSIONS_DIR),
        }
    }

    fn path(&self, bot: &PeerId) -> PathBuf {
        self.dir.join(format!("{bot}.json"))
    }

    /// The saved session of `bot`, if there is a readable one. A planted link, a
    /// damaged file or one of another version count as none (and are logged).
    pub(crate) fn load(&self, bot: &PeerId) -> Option<Saved> {
        let path = self.path(bot);
        let read = crate::secure_fs::refuse_symlink(&path).and_then(|()| std::fs::read(&path));
        let bytes = match read {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "saved session not read");
                return None;
            }
        };
        match serde_json::from_slice::<Saved>(&bytes) {
            Ok(saved) if saved.session_id().is_some() && saved.epoch < MAX_EPOCH => Some(saved),
            Ok(_) => {
                tracing::warn!(path = %path.display(), "saved session ignored: bad sid or epoch");
                None
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "saved session ignored");
                None
            }
        }
    }

    /// Saves `bot`'s session (atomically, 0600).
    pub(crate) fn save(&self, bot: &PeerId, saved: &Saved) -> io::Result<()> {
        let bytes = serde_json::to_vec_pretty(saved).map_err(io::Error::other)?;
        crate::secure_fs::write_atomic(&self.path(bot), &bytes)
    }

    /// Forgets `bot`'s session (the bot lost it).
    pub(crate) fn forget(&self, bot: &PeerId) {
        let path = self.path(bot);
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "saved session not removed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{ServerCapabilities, ServerConfig};

    fn saved(sid: &str, epoch: u64) -> Saved {
        Saved {
            sid: sid.into(),
            epoch,
            server: ServerConfig::new(ServerCapabilities::default()).into(),
        }
    }

    #[test]
    fn saves_loads_and_forgets() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let bot: PeerId = [7u8; 32].into();
        assert!(store.load(&bot).is_none());
        store.save(&bot, &saved("0123456789abcdef", 3)).unwrap();
        let back = store.load(&bot).unwrap();
        assert_eq!((back.sid.as_str(), back.epoch), ("0123456789abcdef", 3));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(store.path(&bot)).unwrap().permissions();
            assert_eq!(mode.mode() & 0o777, 0o600);
        }
        store.forget(&bot);
        assert!(store.load(&bot).is_none());
    }

    #[test]
    fn bad_records_count_as_none() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let bot: PeerId = [8u8; 32].into();
        store.save(&bot, &saved("NOT-HEX", 0)).unwrap();
        assert!(store.load(&bot).is_none(), "bad sid");
        store.save(&bot, &saved("abcd", MAX_EPOCH)).unwrap();
        assert!(store.load(&bot).is_none(), "epoch out of range");
        std::fs::write(store.path(&bot), b"{not json").unwrap();
        assert!(store.load(&bot).is_none(), "damaged");
    }

    #[cfg(unix)]
    #[test]
    fn a_planted_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let store = SessionStore::new(dir.path());
        let bot: PeerId = [9u8; 32].into();
        let target = dir.path().join("elsewhere");
        std::fs::write(&target, b"keep").unwrap();
        std::fs::create_dir_all(dir.path().join(SESSIONS_DIR)).unwrap();
        std::os::unix::fs::symlink(&target, store.path(&bot)).unwrap();
        assert!(store.load(&bot).is_none());
        assert!(store.save(&bot, &saved("abcd", 0)).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}
