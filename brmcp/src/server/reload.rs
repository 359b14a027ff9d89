//! `brmcp.json` applied while serving. The allowlist (`allowed_uids`) and the rate
//! (`calls_per_minute`) change live: the gate the router checks for every part is
//! replaced, so a removed caller is refused from its next PM on while the sessions of
//! callers still allowed carry on; the rate applies to the next call. The file is
//! followed by polling (every [`CONFIG_POLL`]) and at once on a wake-up (`brmcp
//! serve` wakes it on SIGHUP). A file that fails to parse is not applied: the running
//! settings stay and the refusal, naming the file, key and reason, is logged once per
//! edit. Each applied reload logs one info line saying what changed. `upstreams` and
//! `directory` are read at start only; an edit to them is logged as waiting for the
//! next start.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::config::ServeConfig;
use super::gate::GateChange;
use super::harness::Harness;

/// How often a running server looks at `brmcp.json` for edits: 1 s, as the bridge
/// looks at `mcpclient.json` (a removed caller is refused within a second).
pub const CONFIG_POLL: Duration = Duration::from_secs(1);

/// What [`Harness::reconfigure`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reconfigured {
    /// Callers added to and removed from the allowlist.
    pub gate: GateChange,
    /// The rate, `(before, after)`, when it changed.
    pub rate: Option<(u32, u32)>,
}

impl Reconfigured {
    /// `true` when nothing changed.
    pub fn is_empty(&self) -> bool {
        self.gate.is_empty() && self.rate.is_none()
    }
}

impl fmt::Display for Reconfigured {
    /// `allowed +<uid>, -<uid>; calls_per_minute 30 -> 5`, or `no change`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("no change");
        }
        let mut parts = Vec::new();
        if !self.gate.is_empty() {
            let added = self.gate.added.iter().map(|p| format!("+{p}"));
            let removed = self.gate.removed.iter().map(|p| format!("-{p}"));
            let all: Vec<String> = added.chain(removed).collect();
            parts.push(format!("allowed {}", all.join(", ")));
        }
        if let Some((before, after)) = self.rate {
            parts.push(format!("calls_per_minute {before} -> {after}"));
        }
        f.write_str(&parts.join("; "))
    }
}

impl Harness {
    /// Applies `config`'s allowlist and rate to the running harness (see the module's
    /// documentation) and says what changed. Only a list gate is replaced: a harness
    /// built with a predicate ([`HarnessBuilder::allow`](super::HarnessBuilder::allow))
    /// becomes a list gate.
    pub fn reconfigure(&self, config: &ServeConfig) -> Reconfigured {
        let gate = self
            .gate()
            .replace_list(config.allowed_uids.iter().copied());
        let before = self
            .rate_limiter()
            .set_calls_per_minute(config.calls_per_minute);
        let after = self.rate_limiter().calls_per_minute();
        Reconfigured {
            gate,
            rate: (before != after).then_some((before, after)),
        }
    }
}

/// Follows `brmcp.json` for a running harness; stops when dropped.
#[derive(Debug)]
pub struct ConfigWatch {
    task: JoinHandle<()>,
}

impl Drop for ConfigWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Follows the settings file at `path` for `harness` (see the module's
/// documentation): polled every [`CONFIG_POLL`], read at once when `wake` is notified;
/// `changed` is notified after each applied change. `running` is the config the
/// harness was started with (its `upstreams` and `directory` are not applied live).
///
/// # Panics
/// Outside a tokio runtime.
pub fn follow_config(
    harness: &Harness,
    path: PathBuf,
    running: ServeConfig,
    wake: Option<Arc<Notify>>,
    changed: Option<Arc<Notify>>,
) -> ConfigWatch {
    let target = Arc::new(harness.clone());
    let weak = Arc::downgrade(&target);
    let task = tokio::spawn(async move {
        // Held by the task: the weak handle lives as long as the watch does.
        let _target = target;
        let every = |_: &Harness| CONFIG_POLL;
        crate::file_watch::follow(weak, path, every, wake, |harness, path, text| {
            if apply(&harness, &path, &text, &running)
                && let Some(changed) = &changed
            {
                changed.notify_one();
            }
            std::future::ready(())
        })
        .await;
    });
    ConfigWatch { task }
}

/// Parses `text` and applies it; `true` when something changed.
fn apply(harness: &Harness, path: &Path, text: &[u8], running: &ServeConfig) -> bool {
    let Ok(text) = std::str::from_utf8(text) else {
        tracing::error!(file = %path.display(), "config not applied: not UTF-8; the running settings stay");
        return false;
    };
    let config = match ServeConfig::parse(text, path) {
        Ok(config) => config,
        Err(e) => {
            tracing::error!(error = %e, "config not applied; the running settings stay");
            return false;
        }
    };
    let change = harness.reconfigure(&config);
    if change.is_empty() {
        tracing::debug!(file = %path.display(), "config reread: no change to apply");
    } else {
        tracing::info!(file = %path.display(), %change, "config reloaded");
    }
    #[cfg(feature = "directory")]
    let directory_changed = config.directory != running.directory;
    #[cfg(not(feature = "directory"))]
    let directory_changed = false;
    if config.upstreams != running.upstreams || directory_changed {
        tracing::warn!(
            file = %path.display(),
            "upstreams and directory are read at start: restart to apply their change"
        );
    }
    !change.is_empty()
}
