//! Following a settings file while a process runs: the bridge's `mcpclient.json` and
//! the server's `brmcp.json`. The file is polled (reading one small file a second
//! costs nothing, needs no file-watch dependency, and sees edits from any tool, even
//! across renames) and handed on whenever its bytes change, or at once when woken (a
//! signal). The same bytes are handed on once: a refused edit is logged once, not
//! every poll.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::Notify;

/// The file's bytes, `None` when it does not exist. A symlink is refused.
///
/// # Errors
/// [`SymlinkRefused`](crate::secure_fs::SymlinkRefused) or the operating system's.
pub(crate) fn read(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match crate::secure_fs::refuse_symlink(path).and_then(|()| std::fs::read(path)) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Calls `apply` with the bytes of `path` whenever they differ from the last bytes it
/// was given, polling every `every(target)` or when `wake` is notified, until `target`
/// is dropped (the task holds it weakly between polls). A file that is missing or
/// cannot be read is skipped (the latter logged at warn).
pub(crate) async fn follow<T, F, Fut>(
    target: Weak<T>,
    path: PathBuf,
    every: impl Fn(&T) -> Duration,
    wake: Option<Arc<Notify>>,
    mut apply: F,
) where
    F: FnMut(Arc<T>, PathBuf, Vec<u8>) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut seen: Option<Vec<u8>> = None;
    loop {
        let Some(period) = target.upgrade().map(|t| every(&t)) else {
            return;
        };
        match &wake {
            Some(wake) => {
                tokio::select! {
                    () = tokio::time::sleep(period) => {}
                    () = wake.notified() => {}
                }
            }
            None => tokio::time::sleep(period).await,
        }
        let Some(target) = target.upgrade() else {
            return;
        };
        let text = match read(&path) {
            Ok(Some(text)) => text,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "not reloaded; the last good settings stay");
                continue;
            }
        };
        if seen.as_ref() == Some(&text) {
            continue;
        }
        seen = Some(text.clone());
        apply(target, path.clone(), text).await;
    }
}
