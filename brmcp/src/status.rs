//! The status a running `brmcp serve` or `brmcp bridge` publishes for `status`
//! commands: one owner-only JSON file in its data directory ([`STATUS_FILE`]),
//! replaced atomically every [`PUBLISH_EVERY`] and on change, and once more, marked
//! stopped, at a clean stop. A snapshot older than [`STALE_AFTER_SECS`] was left by a
//! process that died (or hangs): the status command says it is not running.
//!
//! The snapshot holds the router's counters by name (drop reasons are the
//! `dropped_*` ones), the sessions, the clientrpc connection's state, and the money
//! totals of the role: the ledger's for a server, the spend log's for a bridge.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use brmcp_adapters::RouterStats;
use brmcp_clientrpc::HostStatus;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::server::LedgerTotals;
use crate::server::upstream::UpstreamStatus;

/// The snapshot's file name in the data directory.
pub const STATUS_FILE: &str = "status.json";

/// How often a running process rewrites its snapshot: 2 s, so counters read at most
/// that old, for one small file write.
pub const PUBLISH_EVERY: Duration = Duration::from_secs(2);

/// A snapshot older than this is a dead process's: 10 s, five missed publishes, so a
/// busy machine's late write is not mistaken for a death.
pub const STALE_AFTER_SECS: u64 = 10;

/// The longest error message kept in a snapshot, in bytes.
const MAX_ERROR_LEN: usize = 300;

/// What a running process published.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Snapshot {
    /// `"serve"` or `"bridge"`.
    pub role: String,
    /// The process id.
    pub pid: u32,
    /// When the process started, unix seconds.
    pub started_at: i64,
    /// When this snapshot was written, unix seconds.
    pub written_at: i64,
    /// Written by a clean stop: the process is gone.
    pub stopped: bool,
    /// The router's counters by name (see `RouterStats`).
    pub router: BTreeMap<String, u64>,
    /// The sessions.
    pub sessions: Sessions,
    /// The clientrpc connection.
    pub connection: Connection,
    /// A server's allowlist and rate.
    pub config: Option<ServeSummary>,
    /// A server's ledger totals.
    pub ledger: Option<LedgerTotals>,
    /// A server's upstream MCP servers.
    #[serde(default)]
    pub upstreams: Vec<UpstreamStatus>,
    /// A bridge's spend totals.
    pub spend: Option<SpendTotals>,
    /// The last remote address a bridge's `allowed_ips` refused.
    #[serde(default)]
    pub refused_address: Option<RefusedAddress>,
    /// Where a server's operator page listens, when it does.
    #[serde(default)]
    pub ui: Option<String>,
}

/// A remote address refused, and when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct RefusedAddress {
    /// The address.
    pub address: String,
    /// When, unix seconds.
    pub at: i64,
}

impl RefusedAddress {
    /// `address` refused at `at`.
    pub fn new(address: String, at: i64) -> Self {
        Self { address, at }
    }
}

/// Sessions of the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Sessions {
    /// Open now.
    pub open: u64,
    /// The cap per peer.
    pub max_per_peer: usize,
}

/// The clientrpc connection's state.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Connection {
    /// Up now.
    pub connected: bool,
    /// Since when it is in this state (connected or not), unix seconds, as seen by
    /// the publisher (within [`PUBLISH_EVERY`]).
    pub since: i64,
    /// Connections made so far (more than one: it reconnected).
    pub connects: u64,
    /// Why the last attempt failed or the last connection ended.
    pub last_error: Option<String>,
}

/// A server's live settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct ServeSummary {
    /// Callers allowed.
    pub allowed_callers: usize,
    /// Calls per minute per caller.
    pub calls_per_minute: u32,
}

/// A bridge's spending.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct SpendTotals {
    /// `autopay` or `approval`.
    pub mode: String,
    /// Atoms paid in the last 24 hours.
    pub paid_atoms_24h: u64,
    /// Payments whose outcome is not known yet.
    pub pending: u64,
    /// Their atoms (counted against the daily cap).
    pub pending_atoms: u64,
    /// The cap per call, atoms (0: never pay).
    pub per_call_cap_atoms: u64,
    /// The cap per 24 hours, atoms (0: never pay).
    pub per_day_cap_atoms: u64,
}

impl Snapshot {
    /// A snapshot of a process of `role` started at `started_at`, written at `now`,
    /// with its router's `stats`, its per-peer session cap and its connection; the
    /// role's parts (config, ledger, upstreams, spend) empty.
    pub fn new(
        role: &str,
        started_at: i64,
        now: i64,
        stats: &RouterStats,
        max_per_peer: usize,
        connection: Connection,
    ) -> Self {
        Self {
            role: role.to_owned(),
            pid: std::process::id(),
            started_at,
            written_at: now,
            stopped: false,
            router: router_counters(stats),
            sessions: Sessions {
                open: stats.sessions_open,
                max_per_peer,
            },
            connection,
            config: None,
            ledger: None,
            upstreams: Vec::new(),
            spend: None,
            refused_address: None,
            ui: None,
        }
    }
}

/// The router's part of a snapshot.
pub fn router_counters(stats: &RouterStats) -> BTreeMap<String, u64> {
    stats.fields().map(|(k, v)| (k.to_owned(), v)).collect()
}

/// Follows a host's connection state between snapshots, to say since when it holds.
#[derive(Debug, Default)]
pub struct ConnectionWatch {
    last: Mutex<Option<(bool, u64, i64)>>,
}

impl ConnectionWatch {
    /// The connection's state at `now` given the host's `status`.
    pub fn observe(&self, status: &HostStatus, now: i64) -> Connection {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let since = match *last {
            Some((up, connects, since))
                if up == status.connected && connects == status.connects =>
            {
                since
            }
            _ => now,
        };
        *last = Some((status.connected, status.connects, since));
        Connection {
            connected: status.connected,
            since,
            connects: status.connects,
            last_error: status.last_error.as_deref().map(cut),
        }
    }
}

fn cut(text: &str) -> String {
    let mut end = text.len().min(MAX_ERROR_LEN);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// Where a snapshot's process stands at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Liveness {
    /// Written within [`STALE_AFTER_SECS`]: running.
    Running,
    /// Marked stopped by a clean stop.
    Stopped,
    /// Older than [`STALE_AFTER_SECS`] and not marked stopped: the process died.
    Stale {
        /// The snapshot's age, seconds.
        age_secs: u64,
    },
}

impl Snapshot {
    /// Where its process stands at `now` (unix seconds).
    pub fn liveness(&self, now: i64) -> Liveness {
        let age_secs = u64::try_from(now.saturating_sub(self.written_at)).unwrap_or(0);
        if self.stopped {
            Liveness::Stopped
        } else if age_secs > STALE_AFTER_SECS {
            Liveness::Stale { age_secs }
        } else {
            Liveness::Running
        }
    }
}

/// Reads the snapshot in `datadir`; `None` when no process ever published one there.
///
/// # Errors
/// The file cannot be read (a symlink is refused) or is not a snapshot; the message
/// names the file.
pub fn read(datadir: &Path) -> Result<Option<Snapshot>, String> {
    let path = datadir.join(STATUS_FILE);
    match crate::file_watch::read(&path) {
        Ok(None) => Ok(None),
        Ok(Some(bytes)) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// A running publisher. [`stop`](Self::stop) writes the last snapshot, marked
/// stopped; dropping it without stopping leaves the last one to go stale.
pub struct Publisher {
    path: PathBuf,
    wake: Arc<Notify>,
    /// Ends the loop after its write in flight, if any.
    halt: Arc<Notify>,
    collect: Arc<dyn Fn() -> Snapshot + Send + Sync>,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Publishes `collect()` to `datadir`'s [`STATUS_FILE`] now, every
    /// [`PUBLISH_EVERY`] and whenever [`wake`](Self::wake) is notified. `collect` runs
    /// on the blocking pool (it may read SQLite).
    ///
    /// # Panics
    /// Outside a tokio runtime.
    pub fn start(datadir: &Path, collect: impl Fn() -> Snapshot + Send + Sync + 'static) -> Self {
        let path = datadir.join(STATUS_FILE);
        let (wake, halt) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        let collect: Arc<dyn Fn() -> Snapshot + Send + Sync> = Arc::new(collect);
        let task = tokio::spawn(run(
            path.clone(),
            wake.clone(),
            halt.clone(),
            collect.clone(),
        ));
        Self {
            path,
            wake,
            halt,
            collect,
            task,
        }
    }

    /// Notified, the publisher writes a snapshot at once (a change worth showing).
    pub fn wake(&self) -> Arc<Notify> {
        self.wake.clone()
    }

    /// Stops publishing and writes the last snapshot, marked stopped. The loop is
    /// halted and awaited, not aborted: aborting does not stop a write already on the
    /// blocking pool, which could land after the stopped one and make a clean stop
    /// look like a death.
    pub async fn stop(mut self) {
        self.halt.notify_one();
        let _ = (&mut self.task).await;
        let (path, collect) = (self.path.clone(), self.collect.clone());
        let _ = tokio::task::spawn_blocking(move || {
            let mut last = collect();
            last.stopped = true;
            write(&path, &last);
        })
        .await;
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn run(
    path: PathBuf,
    wake: Arc<Notify>,
    halt: Arc<Notify>,
    collect: Arc<dyn Fn() -> Snapshot + Send + Sync>,
) {
    loop {
        let (path, collect) = (path.clone(), collect.clone());
        let _ = tokio::task::spawn_blocking(move || write(&path, &collect())).await;
        tokio::select! {
            () = tokio::time::sleep(PUBLISH_EVERY) => {}
            () = wake.notified() => {}
            () = halt.notified() => return,
        }
    }
}

fn write(path: &Path, snapshot: &Snapshot) {
    let written = serde_json::to_vec_pretty(snapshot)
        .map_err(std::io::Error::other)
        .and_then(|bytes| crate::secure_fs::write_atomic(path, &bytes));
    if let Err(e) = written {
        tracing::warn!(file = %path.display(), error = %e, "status not written");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(written_at: i64, stopped: bool) -> Snapshot {
        let connection = ConnectionWatch::default().observe(&HostStatus::default(), 0);
        let mut s = Snapshot::new(
            "serve",
            0,
            written_at,
            &RouterStats::default(),
            8,
            connection,
        );
        s.stopped = stopped;
        s
    }

    #[test]
    fn a_snapshot_past_the_bound_is_stale_unless_marked_stopped() {
        let s = snapshot(100, false);
        assert_eq!(s.liveness(100 + STALE_AFTER_SECS as i64), Liveness::Running);
        assert_eq!(
            s.liveness(101 + STALE_AFTER_SECS as i64),
            Liveness::Stale {
                age_secs: STALE_AFTER_SECS + 1
            }
        );
        assert_eq!(snapshot(100, true).liveness(100), Liveness::Stopped);
        assert!(s.router.contains_key("dropped_disallowed"));
    }

    #[tokio::test]
    async fn a_publisher_rewrites_on_wake_and_marks_its_clean_stop() {
        let dir = tempfile::tempdir().unwrap();
        let calls = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let counter = calls.clone();
        let publisher = Publisher::start(dir.path(), move || {
            let n = counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            snapshot(1_000 + n, false)
        });
        let written = |min: i64| {
            read(dir.path())
                .unwrap()
                .is_some_and(|s| s.written_at >= min && !s.stopped)
        };
        for _ in 0..200 {
            if written(1_000) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(written(1_000), "published at start");
        // Woken, it writes again well before the next period.
        publisher.wake().notify_one();
        for _ in 0..100 {
            if written(1_001) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(written(1_001), "published on wake");
        publisher.stop().await;
        let last = read(dir.path()).unwrap().unwrap();
        assert!(last.stopped);
        assert_eq!(last.liveness(i64::MAX), Liveness::Stopped);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let meta = std::fs::metadata(dir.path().join(STATUS_FILE)).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        }
    }

    /// A clean stop while a periodic write is still on the blocking pool: that write
    /// lands before the stopped snapshot, never after it. Dropping the runtime waits
    /// for every blocking task, so the file is read after the slow write finished.
    #[test]
    fn a_stop_during_a_slow_write_leaves_the_file_marked_stopped() {
        use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
        let dir = tempfile::tempdir().unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let calls = Arc::new(AtomicI64::new(0));
        let slow = Arc::new(AtomicBool::new(false));
        let (counter, entered) = (calls.clone(), slow.clone());
        runtime.block_on(async {
            let publisher = Publisher::start(dir.path(), move || {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                if n == 1 {
                    entered.store(true, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(500));
                }
                snapshot(1_000 + n, false)
            });
            while calls.load(Ordering::SeqCst) == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            publisher.wake().notify_one();
            while !slow.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            publisher.stop().await;
        });
        drop(runtime);
        let last = read(dir.path()).unwrap().unwrap();
        assert!(last.stopped, "{last:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_file_that_is_not_a_snapshot_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()).unwrap(), None);
        std::fs::write(dir.path().join(STATUS_FILE), "{").unwrap();
        let err = read(dir.path()).unwrap_err();
        assert!(err.contains(STATUS_FILE), "{err}");
    }

    #[test]
    fn the_connection_keeps_its_since_until_its_state_changes() {
        let watch = ConnectionWatch::default();
        let mut status = HostStatus::default();
        status.connected = true;
        status.connects = 1;
        assert_eq!(watch.observe(&status, 10).since, 10);
        assert_eq!(watch.observe(&status, 20).since, 10);
        status.connected = false;
        status.last_error = Some("connection lost: eof".into());
        let down = watch.observe(&status, 30);
        assert_eq!((down.connected, down.since), (false, 30));
        assert_eq!(watch.observe(&status, 40).since, 30);
        // Reconnected between two looks: a new connection, a new since.
        status.connected = true;
        status.connects = 2;
        assert_eq!(watch.observe(&status, 50).since, 50);
    }
}
