//! What a node keeps across restarts of a devnet on the same directory, in
//! `<dir>/<nick>/`[`STATE_FILE`]: its identity, port and `rpcuser`/`rpcpass`, so the
//! commands the devnet printed stay valid, and how often it ran, so its stream
//! sequence ids (tip ids included) never repeat, as a brclient's persisted logs never
//! do.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::DevnetError;

/// The state file's name in the node's directory.
pub(crate) const STATE_FILE: &str = "devnet-node.json";

/// Replay-log files a node's stream opens in one run: run `n` starts its files at
/// `n * FILES_PER_RUN`, so ids of a later run are above every earlier one. A file
/// holds the default 8 MiB of events, so this allows 512 GiB a run, and 65,535 runs.
pub(crate) const FILES_PER_RUN: u32 = 1 << 16;

/// A node's persisted state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeState {
    /// The user id, 64 hex.
    pub(crate) uid: String,
    /// The signing key, 64 hex.
    pub(crate) sig_key: String,
    /// The clientrpc port.
    pub(crate) port: u16,
    /// `rpcuser`.
    pub(crate) rpc_user: String,
    /// `rpcpass`.
    pub(crate) rpc_pass: String,
    /// Runs so far, this one included.
    pub(crate) runs: u32,
}

fn bytes32(path: &Path, key: &str, hex_text: &str) -> Result<[u8; 32], DevnetError> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_text, &mut out)
        .map_err(|e| std::io::Error::other(format!("{}: {key}: {e}", path.display())))?;
    Ok(out)
}

impl NodeState {
    /// The state in `dir`, if a run left one.
    ///
    /// # Errors
    /// The file cannot be read, or is not a node state (named in the error).
    pub(crate) fn load(dir: &Path) -> Result<Option<Self>, DevnetError> {
        let path = dir.join(STATE_FILE);
        brmcp_fs::refuse_symlink(&path)?;
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let state: Self = serde_json::from_slice(&text)
            .map_err(|e| std::io::Error::other(format!("{}: {e}", path.display())))?;
        state.uid_bytes(dir)?;
        state.sig_key_bytes(dir)?;
        Ok(Some(state))
    }

    /// Writes the state to `dir`.
    ///
    /// # Errors
    /// The file cannot be written.
    pub(crate) fn save(&self, dir: &Path) -> Result<(), DevnetError> {
        let mut text = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        text.push(b'\n');
        brmcp_fs::write_atomic(&dir.join(STATE_FILE), &text)?;
        Ok(())
    }

    pub(crate) fn uid_bytes(&self, dir: &Path) -> Result<[u8; 32], DevnetError> {
        bytes32(&dir.join(STATE_FILE), "uid", &self.uid)
    }

    pub(crate) fn sig_key_bytes(&self, dir: &Path) -> Result<[u8; 32], DevnetError> {
        bytes32(&dir.join(STATE_FILE), "sig_key", &self.sig_key)
    }

    /// The first replay-log file of this run.
    pub(crate) fn first_file(&self) -> u32 {
        self.runs.saturating_sub(1).saturating_mul(FILES_PER_RUN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_a_bad_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(NodeState::load(dir.path()).unwrap(), None);
        let state = NodeState {
            uid: "ab".repeat(32),
            sig_key: "cd".repeat(32),
            port: 7676,
            rpc_user: "u".into(),
            rpc_pass: "p".into(),
            runs: 3,
        };
        state.save(dir.path()).unwrap();
        let back = NodeState::load(dir.path()).unwrap().unwrap();
        assert_eq!(back, state);
        assert_eq!(back.uid_bytes(dir.path()).unwrap(), [0xab; 32]);
        assert_eq!(back.first_file(), 2 * FILES_PER_RUN);
        std::fs::write(dir.path().join(STATE_FILE), r#"{"uid": "zz"}"#).unwrap();
        let err = NodeState::load(dir.path()).unwrap_err().to_string();
        assert!(err.contains(STATE_FILE), "{err}");
    }
}
