//! Supervision: each upstream in its own task, connected, listed and mirrored into the
//! harness's [`DynamicTools`]; reconnected (a command restarted) with exponential
//! backoff when it fails; re-listed when it says its lists changed, at most once per
//! [`relist_window`](UpstreamLimits::relist_window), its tools replaced (and callers
//! told) only when their definitions changed. A re-listing gives way at once to the
//! connection's end or the server's stop. Each state change is logged and written to
//! the status file `brmcp serve status` reads.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use rmcp::model::Tool;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::catalog::UpstreamCatalog;
use super::client::{Connection, Link, connect};
use super::config::UpstreamConfig;
use super::limits::UpstreamLimits;
use super::listing;
use super::mirror::{Health, mirror_tools};
use crate::secure_fs;
use crate::server::{Catalog, Clock, DynamicTools, SystemClock};

/// The status file's name in the data directory.
pub const STATUS_FILE: &str = "upstreams-status.json";

/// The first wait before a restart.
pub const BACKOFF_MIN: Duration = Duration::from_secs(1);

/// The longest wait between restarts: a broken upstream is retried at least this often.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// An upstream up this long before failing starts again from [`BACKOFF_MIN`]; one that
/// fails sooner keeps backing off (a crash loop is not retried every second).
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);

/// How long starting an upstream (spawn or connect, handshake, first listing) may take:
/// `npx` may first fetch its package.
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The longest error message kept in the status, in bytes.
const MAX_ERROR_LEN: usize = 300;

/// How often [`Upstreams::settled`] looks at the states.
const SETTLE_POLL: Duration = Duration::from_millis(50);

/// What an upstream is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UpstreamState {
    /// Being started or connected.
    Starting,
    /// Connected; its tools are served.
    Up,
    /// Failed; retried after a backoff. Its tools answer an error and charge nothing.
    Down,
    /// The server stopped.
    Stopped,
}

/// One upstream's state, as `brmcp serve status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct UpstreamStatus {
    /// The upstream's name.
    pub name: String,
    /// `"command"` or `"url"`.
    pub kind: String,
    /// What it is doing.
    pub state: UpstreamState,
    /// Unix seconds since it is in this state.
    pub since: i64,
    /// Tools exposed from it.
    pub tools: usize,
    /// Restarts (reconnections) so far.
    pub restarts: u32,
    /// The process id of a running command upstream.
    pub pid: Option<u32>,
    /// Why it last failed.
    pub error: Option<String>,
    /// When down: the seconds until the next try.
    pub retry_in_secs: Option<u64>,
    /// Tools `brmcp.json` prices that the upstream does not list (a typo, or another
    /// version of the server).
    pub unlisted: Vec<String>,
}

impl std::fmt::Display for UpstreamStatus {
    /// One line: `everything (command): up, 12 tool(s), pid 4242`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): ", self.name, self.kind)?;
        match self.state {
            UpstreamState::Starting if self.restarts > 0 => {
                write!(f, "restarting (restart {})", self.restarts)?;
            }
            UpstreamState::Starting => f.write_str("starting")?,
            UpstreamState::Up if self.restarts > 0 => write!(
                f,
                "up again after {} restart(s), {} tool(s)",
                self.restarts, self.tools
            )?,
            UpstreamState::Up => write!(f, "up, {} tool(s)", self.tools)?,
            UpstreamState::Down => {
                write!(f, "down: {}", self.error.as_deref().unwrap_or("failed"))?;
                if let Some(secs) = self.retry_in_secs {
                    write!(f, "; retrying in {secs} s")?;
                }
            }
            UpstreamState::Stopped => f.write_str("stopped")?,
        }
        if let Some(pid) = self.pid {
            write!(f, ", pid {pid}")?;
        }
        if !self.unlisted.is_empty() {
            write!(f, "; not listed by it: {}", self.unlisted.join(", "))?;
        }
        Ok(())
    }
}

/// Told of every state change of an upstream (to log it).
pub type StatusHook = Arc<dyn Fn(&UpstreamStatus) + Send + Sync>;

/// The upstreams' states, kept in memory and in the status file.
struct Board {
    statuses: Mutex<Vec<UpstreamStatus>>,
    file: Option<PathBuf>,
    hook: Option<StatusHook>,
}

impl Board {
    fn update(&self, index: usize, f: impl FnOnce(&mut UpstreamStatus)) {
        let mut statuses = self.statuses.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(status) = statuses.get_mut(index) {
            f(status);
        }
        if let Some(file) = &self.file
            && let Err(e) = write_status(file, &statuses)
        {
            tracing::warn!(file = %file.display(), error = %e, "upstream status not written");
        }
    }

    fn set_state(&self, index: usize, state: UpstreamState, f: impl FnOnce(&mut UpstreamStatus)) {
        let mut changed = None;
        self.update(index, |status| {
            status.state = state;
            status.since = SystemClock.now().secs();
            status.retry_in_secs = None;
            f(status);
            changed = Some(status.clone());
        });
        if let (Some(hook), Some(status)) = (&self.hook, changed) {
            hook(&status);
        }
    }
}

/// Writes `statuses` to `file` atomically (a reader never sees half a file), owner-only
/// and following no link planted at it or at a temporary name.
fn write_status(file: &Path, statuses: &[UpstreamStatus]) -> std::io::Result<()> {
    secure_fs::write_atomic(file, &serde_json::to_vec_pretty(statuses)?)
}

/// Reads the status file a running (or stopped) `brmcp serve` wrote in `datadir`.
///
/// # Errors
///
/// The file is missing (no upstreams, or never served) or unreadable.
pub fn read_status(datadir: &Path) -> Result<Vec<UpstreamStatus>, String> {
    let file = datadir.join(STATUS_FILE);
    let text = std::fs::read_to_string(&file).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!(
                "{}: no upstream status (brmcp.json names no upstreams, or the server has not run with them)",
                file.display()
            )
        } else {
            format!("{}: {e}", file.display())
        }
    })?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))
}

/// The supervised upstreams. Dropping this stops them (and kills their processes).
pub struct Upstreams {
    board: Arc<Board>,
    catalog: Option<UpstreamCatalog>,
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Upstreams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upstreams")
            .field("statuses", &self.status())
            .finish()
    }
}

impl Upstreams {
    /// Starts supervising each of `configs`, mirroring their tools into `tools`; each
    /// state change goes to `status_file` and `hook` too, when given. The default
    /// [`UpstreamLimits`] apply.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start(
        configs: &[UpstreamConfig],
        tools: &DynamicTools,
        status_file: Option<PathBuf>,
        hook: Option<StatusHook>,
    ) -> Self {
        Self::start_with(
            configs,
            tools,
            status_file,
            hook,
            &UpstreamLimits::default(),
        )
    }

    /// [`start`](Self::start) with these `limits`.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub fn start_with(
        configs: &[UpstreamConfig],
        tools: &DynamicTools,
        status_file: Option<PathBuf>,
        hook: Option<StatusHook>,
        limits: &UpstreamLimits,
    ) -> Self {
        let now = SystemClock.now().secs();
        let statuses = configs
            .iter()
            .map(|c| UpstreamStatus {
                name: c.name.clone(),
                kind: c.endpoint.kind().to_owned(),
                state: UpstreamState::Starting,
                since: now,
                tools: 0,
                restarts: 0,
                pid: None,
                error: None,
                retry_in_secs: None,
                unlisted: Vec::new(),
            })
            .collect();
        let board = Arc::new(Board {
            statuses: Mutex::new(statuses),
            file: status_file,
            hook,
        });
        let cancel = CancellationToken::new();
        let catalog = UpstreamCatalog::new(configs);
        let tasks = configs
            .iter()
            .enumerate()
            .map(|(index, config)| {
                let supervisor = Supervisor {
                    index,
                    config: config.clone(),
                    tools: tools.clone(),
                    board: board.clone(),
                    health: Health::new(&config.name),
                    catalog: catalog.clone(),
                    cancel: cancel.clone(),
                    limits: limits.clone(),
                    published: Mutex::new(None),
                };
                tokio::spawn(supervisor.run())
            })
            .collect();
        let offered = catalog.offers();
        Self {
            board,
            catalog: (offered.0 || offered.1).then_some(catalog),
            cancel,
            tasks,
        }
    }

    /// The resources and prompts of the upstreams that offer them, for
    /// [`HarnessBuilder::catalog`](crate::server::HarnessBuilder::catalog); `None`
    /// when none does.
    pub fn catalog(&self) -> Option<Arc<dyn Catalog>> {
        self.catalog
            .clone()
            .map(|c| Arc::new(c) as Arc<dyn Catalog>)
    }

    /// None at all.
    pub fn none() -> Self {
        Self {
            board: Arc::new(Board {
                statuses: Mutex::default(),
                file: None,
                hook: None,
            }),
            catalog: None,
            cancel: CancellationToken::new(),
            tasks: Vec::new(),
        }
    }

    /// Waits until no upstream is still [`Starting`](UpstreamState::Starting) (each is up
    /// with its tools served, or down with its tools answering so), for at most
    /// `within`; whether all settled. A server waits on it before it takes calls, so a
    /// caller told at start to retry an interrupted call finds the tool listed.
    pub async fn settled(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self
                .status()
                .iter()
                .all(|s| s.state != UpstreamState::Starting)
            {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(SETTLE_POLL).await;
        }
    }

    /// Each upstream's state now.
    pub fn status(&self) -> Vec<UpstreamStatus> {
        self.board
            .statuses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stops every upstream (a command's process is killed) and waits for it.
    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
    }
}

impl Drop for Upstreams {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

struct Supervisor {
    index: usize,
    config: UpstreamConfig,
    tools: DynamicTools,
    board: Arc<Board>,
    health: Arc<Health>,
    catalog: UpstreamCatalog,
    cancel: CancellationToken,
    limits: UpstreamLimits,
    /// The definitions of the tools last mirrored, to replace them only on a change.
    published: Mutex<Option<Vec<Tool>>>,
}

impl Supervisor {
    async fn run(self) {
        let name = &self.config.name;
        let mut backoff = BACKOFF_MIN;
        let mut restarts: u32 = 0;
        loop {
            tracing::info!(upstream = %name, restarts, "upstream starting");
            let started = tokio::select! {
                started = tokio::time::timeout(START_TIMEOUT, self.start()) => started,
                () = self.cancel.cancelled() => break,
            };
            let error = match started {
                Err(_) => format!("no answer in {START_TIMEOUT:?}"),
                Ok(Err(e)) => e,
                Ok(Ok((connection, link, count))) => {
                    self.health.set(Some(link.clone()));
                    if self.catalog.offers_any(self.index) {
                        self.catalog.set_link(self.index, Some(link.clone()));
                    }
                    let pid = connection.pid;
                    self.board.set_state(self.index, UpstreamState::Up, |s| {
                        s.tools = count;
                        s.pid = pid;
                        s.error = None;
                    });
                    tracing::info!(upstream = %name, tools = count, restarts, "upstream up");
                    let up_since = Instant::now();
                    let ended = self.watch(connection, &link).await;
                    self.health.set(None);
                    if self.catalog.offers_any(self.index) {
                        self.catalog.set_link(self.index, None);
                    }
                    let Some(reason) = ended else { break };
                    if up_since.elapsed() >= BACKOFF_RESET_AFTER {
                        backoff = BACKOFF_MIN;
                    }
                    reason
                }
            };
            let error = cut(&error);
            tracing::warn!(upstream = %name, %error, retry_in = ?backoff, "upstream failed");
            self.board.set_state(self.index, UpstreamState::Down, |s| {
                s.pid = None;
                s.error = Some(error);
                s.retry_in_secs = Some(backoff.as_secs());
            });
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.cancel.cancelled() => break,
            }
            backoff = (backoff * 2).min(BACKOFF_MAX);
            restarts = restarts.saturating_add(1);
            self.board
                .set_state(self.index, UpstreamState::Starting, |s| {
                    s.restarts = restarts;
                });
        }
        self.health.set(None);
        self.board
            .set_state(self.index, UpstreamState::Stopped, |s| s.pid = None);
    }

    /// Connects and publishes the tools: the connection, its link and the tool count.
    async fn start(&self) -> Result<(Connection, Link, usize), String> {
        let (connection, link) =
            connect(&self.config.name, &self.config.endpoint, &self.limits).await?;
        let count = self.publish(&link).await?;
        Ok((connection, link, count))
    }

    /// Lists the upstream's tools (bounded in pages, items, bytes and time) and mirrors
    /// the exposed ones, replacing the served ones only if their definitions changed;
    /// notes the priced ones it does not list.
    async fn publish(&self, link: &Link) -> Result<usize, String> {
        let name = &self.config.name;
        let failed = |e: String| {
            link.fault()
                .map_or(e, |fault| format!("tools/list: {fault}"))
        };
        let listed = tokio::time::timeout(self.limits.list_timeout, listing::tools(link.peer()))
            .await
            .map_err(|_| {
                failed(format!(
                    "tools/list: no answer in {} s",
                    self.limits.list_timeout.as_secs()
                ))
            })?
            .map_err(|e| failed(format!("tools/list: {e}")))?;
        if let Some(bound) = listed.cut {
            tracing::warn!(upstream = %name, %bound, kept = listed.items.len(), "the upstream's tool list is cut short at its bound");
        }
        // A name listed twice (a page repeated) counts once: the first.
        let mut seen = HashSet::new();
        let listed: Vec<Tool> = listed
            .items
            .into_iter()
            .filter(|t| seen.insert(t.name.clone()))
            .collect();
        let unlisted: Vec<String> = self
            .config
            .tools
            .keys()
            .filter(|tool| !seen.contains(tool.as_str()))
            .cloned()
            .collect();
        if !unlisted.is_empty() {
            tracing::warn!(upstream = %name, ?unlisted, "priced tools the upstream does not list");
        }
        let specs = mirror_tools(&self.config, listed, &self.health);
        let count = specs.len();
        let definitions: Vec<Tool> = specs.iter().map(|s| s.definition().clone()).collect();
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if published.as_ref() != Some(&definitions) {
            self.tools.replace(name, specs);
            *published = Some(definitions);
        }
        drop(published);
        self.board.update(self.index, |s| s.unlisted = unlisted);
        Ok(count)
    }

    /// Serves until the connection ends (`Some(why)`) or the server stops (`None`),
    /// re-listing when the upstream says its lists changed: the changes of a window are
    /// one re-listing, after the window since the last one.
    async fn watch(&self, connection: Connection, link: &Link) -> Option<String> {
        let Connection {
            running, changes, ..
        } = connection;
        let name = &self.config.name;
        let done = running.waiting();
        tokio::pin!(done);
        let mut last = tokio::time::Instant::now();
        loop {
            let due = last + self.limits.relist_window;
            let relist = async {
                changes.notify.notified().await;
                tokio::time::sleep_until(due).await;
                let (tools, catalog) = changes.take();
                if catalog && self.catalog.offers_any(self.index) {
                    self.catalog.changed();
                }
                if tools {
                    Some(self.publish(link).await)
                } else {
                    None
                }
            };
            // The re-listing gives way to the connection's end and the server's stop.
            tokio::select! {
                quit = &mut done => {
                    return Some(match quit {
                        Ok(reason) => link.fault().map_or_else(
                            || format!("connection ended ({reason:?})"),
                            str::to_owned,
                        ),
                        Err(e) => format!("connection task failed: {e}"),
                    });
                }
                () = link.lost() => {
                    return Some(link.fault().unwrap_or("its connection was lost").to_owned());
                }
                () = self.cancel.cancelled() => return None,
                relisted = relist => {
                    last = tokio::time::Instant::now();
                    match relisted {
                        Some(Ok(count)) => {
                            tracing::info!(upstream = %name, tools = count, "upstream tools listed again");
                            self.board.update(self.index, |s| s.tools = count);
                        }
                        Some(Err(e)) => tracing::warn!(upstream = %name, error = %e, "upstream tools not listed again"),
                        None => {}
                    }
                }
            }
        }
    }
}

/// `message` cut to [`MAX_ERROR_LEN`] bytes on a char boundary.
fn cut(message: &str) -> String {
    let mut end = message.len().min(MAX_ERROR_LEN);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_owned()
}
