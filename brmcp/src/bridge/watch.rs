//! Following `mcpclient.json` while the bridge runs, polled as the server polls
//! `brmcp.json`. The file is the source of truth:
//! `brmcp bridge token rotate`, `bots add|remove` and hand edits all land there, so the
//! running bridge reads it again whenever its bytes change and applies it through the
//! same path as [`Bridge::apply_settings`] (a new token refuses the old one at once,
//! a removed bot's sessions close, sessions of kept bots stay). A file that fails
//! strict parsing is not applied: the last good settings stay and the refusal, naming
//! the file, key and reason, is logged once per edit.

use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Bridge, BridgeError, Inner, SETTINGS_FILE, Settings, SettingsError, lock};

/// How often a running bridge looks at `mcpclient.json` for edits: 1 s. Reading one
/// small file a second costs nothing, needs no file-watch dependency, sees edits from
/// any tool (even across renames), and a rotated token stops working within a second.
pub(super) const SETTINGS_POLL: Duration = Duration::from_secs(1);

/// What [`Bridge::reload`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reload {
    /// The file differed from the live settings; it is now applied.
    Applied,
    /// The file holds the live settings.
    Unchanged,
    /// There is no file; the live settings stay.
    Missing,
}

impl Bridge {
    /// Reads `mcpclient.json` again and applies it if it differs from the live
    /// settings. A missing file changes nothing.
    ///
    /// # Errors
    /// [`BridgeError::Settings`] for a file that cannot be read or is refused (the
    /// live settings stay); a listener that cannot bind, after applying.
    pub async fn reload(&self) -> Result<Reload, BridgeError> {
        let path = self.inner.config.data_dir.join(SETTINGS_FILE);
        match read(&path)? {
            Some(text) => self.reload_from(&path, &text).await,
            None => Ok(Reload::Missing),
        }
    }

    async fn reload_from(&self, path: &Path, text: &[u8]) -> Result<Reload, BridgeError> {
        let settings = Settings::parse(path, text)?;
        if settings == *lock(&self.inner.settings) {
            return Ok(Reload::Unchanged);
        }
        // Written back only when a token is minted, so hand edits keep their layout.
        self.apply(settings, false).await?;
        Ok(Reload::Applied)
    }

    /// Follows `mcpclient.json` every [`Config::settings_poll`](super::Config) until
    /// the bridge is dropped: see the module's documentation. Hosts call this once
    /// after [`Bridge::new`]; the task holds the bridge weakly.
    pub fn watch_settings(&self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(watch(Arc::downgrade(&self.inner)))
    }
}

async fn watch(inner: Weak<Inner>) {
    let Some(path) = inner
        .upgrade()
        .map(|i| i.config.data_dir.join(SETTINGS_FILE))
    else {
        return;
    };
    let every = |inner: &Inner| inner.config.settings_poll;
    crate::file_watch::follow(inner, path, every, None, |inner, path, text| async move {
        let bridge = Bridge { inner };
        match bridge.reload_from(&path, &text).await {
            Ok(Reload::Applied) => {
                tracing::info!(file = %path.display(), "settings reloaded");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "settings not applied; the last good ones stay");
            }
        }
    })
    .await;
}

/// The file's bytes, `None` when it does not exist. A symlink is refused.
fn read(path: &Path) -> Result<Option<Vec<u8>>, SettingsError> {
    crate::file_watch::read(path).map_err(|source| SettingsError::Io {
        path: path.to_owned(),
        source,
    })
}
