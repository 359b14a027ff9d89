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
/// cannot be read is skipped; a read error is logged at warn once, until it changes
/// or clears, not every poll.
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
    let mut failing: Option<String> = None;
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
            Ok(None) => {
                failing = None;
                continue;
            }
            Err(e) => {
                let error = e.to_string();
                if failing.as_ref() != Some(&error) {
                    tracing::warn!(file = %path.display(), %error, "not reloaded; the last good settings stay");
                    failing = Some(error);
                }
                continue;
            }
        };
        failing = None;
        if seen.as_ref() == Some(&text) {
            continue;
        }
        seen = Some(text.clone());
        apply(target, path.clone(), text).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Mutex;

    /// A writer into a shared buffer, for a fmt subscriber.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        fn warnings(&self) -> usize {
            let text = String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned();
            text.matches("not reloaded").count()
        }
    }

    const POLL: Duration = Duration::from_secs(1);

    /// Lets `polls` polls of the follower run.
    async fn polls(polls: u32) {
        for _ in 0..polls {
            tokio::time::sleep(POLL).await;
            tokio::task::yield_now().await;
        }
    }

    /// A file refused on every poll (a symlink) warns once, not each second; a
    /// different error warns again; after a good read the same error warns anew.
    #[cfg(unix)]
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_repeated_read_error_is_logged_once_until_it_changes_or_clears() {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, "{}").unwrap();
        let path = dir.path().join("brmcp.json");
        std::os::unix::fs::symlink(&real, &path).unwrap();

        let target = Arc::new(());
        let applied = Arc::new(Mutex::new(Vec::new()));
        let seen = applied.clone();
        let task = tokio::spawn(follow(
            Arc::downgrade(&target),
            path.clone(),
            |_| POLL,
            None,
            move |_, _, text| {
                seen.lock().unwrap().push(text);
                async {}
            },
        ));
        polls(10).await;
        assert_eq!(logs.warnings(), 1);

        // Another error: a directory where the file was.
        std::fs::remove_file(&path).unwrap();
        std::fs::create_dir(&path).unwrap();
        polls(5).await;
        assert_eq!(logs.warnings(), 2);

        // A good file clears it; the symlink again is a fresh failure.
        std::fs::remove_dir(&path).unwrap();
        std::fs::write(&path, "{\"calls_per_minute\": 3}").unwrap();
        polls(3).await;
        assert_eq!(applied.lock().unwrap().len(), 1);
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        polls(5).await;
        assert_eq!(logs.warnings(), 3);
        assert_eq!(applied.lock().unwrap().len(), 1);

        drop(target);
        polls(2).await;
        assert!(task.is_finished());
    }
}
