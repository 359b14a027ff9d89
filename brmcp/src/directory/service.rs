//! The directory: its state, its serving harness and its background work.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use brmcp_adapters::{PeerId, PmSender, Router, RouterConfig};
use brmcp_clientrpc::ACK_FLUSH_WAIT;
use tokio::sync::watch;

use super::client::{CLIENT_VERSION, Payer};
use super::config::Policy;
use super::federation::Introducer;
use super::money;
use super::snapshot::{KeyError, Signer};
use super::store::{DirError, Store, Stored, Table, refuse};
use super::types::{Entry, Listing, Outcome, State, StatsOut, StatusOut};
use crate::server::{AutoReply, Clock, Harness, HarnessError, SystemClock};

/// How often the maintenance sweep runs (expiry, free recrawls, funding checks).
pub(crate) const SWEEP_INTERVAL: Duration = Duration::from_secs(60);

/// Seconds in a day, for `expiry_days`.
const DAY_SECS: i64 = 86_400;

/// The note of a `register` refused because the previous registration is being
/// verified.
pub(crate) const BUSY_NOTE: &str = "verification in progress; the previous registration continues";

/// Why the directory cannot be built or started.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// No data directory.
    #[error("directory: a data directory is required")]
    NoDataDir,
    /// No payer.
    #[error("directory: a payer is required")]
    NoPayer,
    /// The snapshot key cannot be loaded.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// The state or the harness cannot be opened.
    #[error(transparent)]
    Store(#[from] DirError),
    /// The harness failed.
    #[error(transparent)]
    Harness(#[from] HarnessError),
}

/// Builds a [`Directory`].
#[must_use]
pub struct DirectoryBuilder {
    data_dir: Option<PathBuf>,
    policy: Policy,
    clock: Arc<dyn Clock>,
    payer: Option<Arc<dyn Payer>>,
    self_uid: Option<PeerId>,
    auto_reply: Option<AutoReply>,
    introducer: Option<Arc<dyn Introducer>>,
    router_config: Option<RouterConfig>,
}

impl std::fmt::Debug for DirectoryBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryBuilder")
            .field("data_dir", &self.data_dir)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// A clock shared by the directory and its harness.
struct SharedClock(Arc<dyn Clock>);

impl Clock for SharedClock {
    fn since_epoch(&self) -> Duration {
        self.0.since_epoch()
    }
}

impl DirectoryBuilder {
    /// The data directory: the directory's store and the harness ledger.
    pub fn data_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.data_dir = Some(dir.into());
        self
    }

    /// The operator's policy (defaults are applied).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = policy.with_defaults();
        self
    }

    /// The clock (default: the system's).
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }

    /// The router's settings (default [`RouterConfig::server`]); its authorizer is
    /// the harness's.
    pub fn router_config(mut self, config: RouterConfig) -> Self {
        self.router_config = Some(config);
        self
    }

    /// How the directory pays for test calls.
    pub fn payer(mut self, payer: impl Payer) -> Self {
        self.payer = Some(Arc::new(payer));
        self
    }

    /// The directory's own uid: it refuses to list itself.
    pub fn self_uid(mut self, uid: PeerId) -> Self {
        self.self_uid = Some(uid);
        self
    }

    /// How `pursue_lead` asks a peer directory to introduce a provider whose invite
    /// failed (default: none, and such a lead stays as it is).
    pub fn introducer(mut self, introducer: impl Introducer) -> Self {
        self.introducer = Some(Arc::new(introducer));
        self
    }

    /// Answers plain chat, at most once per sender per interval.
    pub fn auto_reply(mut self, reply: AutoReply) -> Self {
        self.auto_reply = Some(reply);
        self
    }

    /// Opens the store and the harness ledger and builds the tools.
    ///
    /// # Errors
    /// [`BuildError`].
    pub fn build(self) -> Result<Directory, BuildError> {
        let dir = self.data_dir.ok_or(BuildError::NoDataDir)?;
        let payer = self.payer.ok_or(BuildError::NoPayer)?;
        crate::secure_fs::create_dir(&dir)
            .map_err(|e| DirError::Ledger(format!("cannot create {}: {e}", dir.display())))?;
        let store = Store::open(&dir)?;
        let signer = Signer::load_or_create(&dir)?;
        let (shutdown, _) = watch::channel(false);
        let (running, _) = watch::channel(0usize);
        let core = Arc::new(Core {
            policy: self.policy,
            store,
            signer,
            data_dir: dir.clone(),
            clock: self.clock.clone(),
            payer,
            introducer: self.introducer,
            self_uid: self.self_uid.map(OnceLock::from).unwrap_or_default(),
            harness: OnceLock::new(),
            lock: tokio::sync::Mutex::new(()),
            in_flight: Mutex::new(HashSet::new()),
            shutdown,
            running,
        });
        let admins: HashSet<PeerId> = core.policy.admins().into_iter().collect();
        let weak = Arc::downgrade(&core);
        let mut builder = Harness::builder()
            .data_dir(&dir)
            .clock(SharedClock(self.clock))
            .allow(|_| true)
            .calls_per_minute(u32::try_from(core.policy.calls_per_minute).unwrap_or(u32::MAX))
            .server_info(core.policy.name.clone(), CLIENT_VERSION)
            .visibility(move |peer, tool| {
                !super::admin::ADMIN_TOOLS.contains(&tool) || admins.contains(peer)
            })
            .on_tip(move |event| {
                if let Some(core) = weak.upgrade()
                    && event.credited
                {
                    tokio::spawn(async move { core.poke_funding(event.caller).await });
                }
            });
        if let Some(reply) = self.auto_reply {
            builder = builder.auto_reply(reply);
        }
        if let Some(config) = self.router_config {
            builder = builder.router_config(config);
        }
        let mut tools: Vec<_> = super::tools::public(&core)
            .into_iter()
            .chain(super::admin::tools(&core))
            .chain(super::federation::tools(&core))
            .collect();
        // `tools/list` by name, as the Go directory lists them.
        tools.sort_by(|a, b| a.name().cmp(b.name()));
        for tool in tools {
            builder = builder.tool(tool);
        }
        let harness = builder.build()?;
        let _ = core.harness.set(harness);
        Ok(Directory { core })
    }
}

/// The longest [`Directory::close`] waits for running pipelines. Told to stop, a
/// pipeline stops at its next wait on a provider; a payment on its way gets 5 s more to
/// confirm; what is left is a store or ledger transaction, which waits at most 5 s for
/// another connection's lock. Past
/// it, close goes on: every step is recorded before the next, so a pipeline cut
/// anywhere resumes at the next start.
pub const CLOSE_WAIT: Duration = Duration::from_secs(10);

/// The longest `brmcp directory` leaves blocking work (a store or ledger transaction
/// on a blocking thread) to finish as it exits: 2 s. One still running past it is
/// abandoned, which SQLite's journal makes safe.
pub const STOP_BLOCKING_WAIT: Duration = Duration::from_secs(2);

/// The longest `brmcp directory` takes to exit after SIGINT or SIGTERM: the
/// pipelines ([`CLOSE_WAIT`]), then the acknowledgements of what it handled
/// ([`ACK_FLUSH_WAIT`]), then blocking work ([`STOP_BLOCKING_WAIT`]). A paid test in
/// flight is cut, not waited for: it resumes with the same call key at the next start.
pub const STOP_WITHIN: Duration = CLOSE_WAIT
    .saturating_add(ACK_FLUSH_WAIT)
    .saturating_add(STOP_BLOCKING_WAIT);

/// The directory bot. Cheap to clone.
#[derive(Clone)]
pub struct Directory {
    core: Arc<Core>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("name", &self.core.policy.name)
            .finish_non_exhaustive()
    }
}

impl Directory {
    /// A builder.
    pub fn builder() -> DirectoryBuilder {
        DirectoryBuilder {
            data_dir: None,
            policy: Policy::default().with_defaults(),
            clock: Arc::new(SystemClock),
            payer: None,
            self_uid: None,
            auto_reply: None,
            introducer: None,
            router_config: None,
        }
    }

    /// Starts serving through `sender` and starts the sweep. Returns the router: hand it
    /// the host's PMs (through [`harness`](Self::harness)), then call
    /// [`resume`](Self::resume).
    ///
    /// # Errors
    /// [`BuildError`].
    pub fn start(&self, sender: impl PmSender) -> Result<Router, BuildError> {
        let router = self.core.harness().start(sender)?;
        let weak = Arc::downgrade(&self.core);
        let mut shutdown = self.core.shutdown.subscribe();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(SWEEP_INTERVAL) => {}
                    _ = shutdown.changed() => return,
                }
                let Some(core) = weak.upgrade() else { return };
                if let Err(e) = core.sweep().await {
                    tracing::warn!(error = %e, "directory sweep failed");
                }
            }
        });
        Ok(router)
    }

    /// Settles the test payments a dead process left unresolved and resumes every
    /// registration where it stopped. Call it once the router receives the host's
    /// PMs: resumed pipelines dial providers at once.
    ///
    /// # Errors
    /// [`DirError`].
    pub async fn resume(&self) -> Result<(), DirError> {
        self.core.clone().resume().await
    }

    /// Tells the directory a key exchange with `uid` completed: a lead waiting for it
    /// gets one invite.
    ///
    /// # Errors
    /// [`DirError`] when the exchange must be offered again (a store error, or an
    /// invite not delivered): do not acknowledge it.
    pub async fn notify_kx(&self, uid: PeerId) -> Result<(), DirError> {
        self.core.notify_kx(uid).await
    }

    /// Sets the directory's own uid (known once the host is connected); a second call
    /// changes nothing.
    pub fn set_self_uid(&self, uid: PeerId) {
        let _ = self.core.self_uid.set(uid);
    }

    /// The serving harness (for the host's PMs and tips).
    pub fn harness(&self) -> &Harness {
        self.core.harness()
    }

    /// The snapshot public key, 64 hex characters (`policy.pubKey`).
    pub fn public_key(&self) -> String {
        self.core.signer.public_hex()
    }

    /// The policy in force (defaults applied).
    pub fn policy(&self) -> &Policy {
        &self.core.policy
    }

    /// `uid`'s stored entry.
    ///
    /// # Errors
    /// [`DirError`].
    pub fn entry(&self, uid: &PeerId) -> Result<Entry, DirError> {
        Ok(self.core.store.get(&uid.to_string())?.entry)
    }

    /// What `stats` answers.
    ///
    /// # Errors
    /// [`DirError`].
    pub fn stats(&self) -> Result<StatsOut, DirError> {
        self.core.stats()
    }

    /// Runs one maintenance sweep now.
    ///
    /// # Errors
    /// [`DirError`].
    pub async fn sweep(&self) -> Result<(), DirError> {
        self.core.clone().sweep().await
    }

    /// Waits until no pipeline runs.
    pub async fn settle(&self) {
        let mut running = self.core.running.subscribe();
        let _ = running.wait_for(|n| *n == 0).await;
    }

    /// Stops: running pipelines stop where they are (and resume on the next start),
    /// the sweep ends, the router closes. Waits for the pipelines, at most
    /// [`CLOSE_WAIT`].
    pub async fn close(&self) {
        let _ = self.core.shutdown.send(true);
        if tokio::time::timeout(CLOSE_WAIT, self.settle())
            .await
            .is_err()
        {
            let running = *self.core.running.borrow();
            tracing::warn!(
                running,
                "pipelines still running at close; each resumes at the next start"
            );
        }
        self.core.harness().close();
    }
}

/// Everything the tools and the pipelines share.
pub(crate) struct Core {
    pub(crate) policy: Policy,
    pub(crate) store: Store,
    pub(crate) signer: Signer,
    pub(crate) data_dir: PathBuf,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) payer: Arc<dyn Payer>,
    pub(crate) introducer: Option<Arc<dyn Introducer>>,
    /// The directory's own uid, once known: it refuses to list itself.
    pub(crate) self_uid: OnceLock<PeerId>,
    harness: OnceLock<Harness>,
    /// The index lock: registration, funding and review decisions take it.
    pub(crate) lock: tokio::sync::Mutex<()>,
    /// Providers whose pipeline runs.
    pub(crate) in_flight: Mutex<HashSet<String>>,
    pub(crate) shutdown: watch::Sender<bool>,
    /// How many pipelines run.
    pub(crate) running: watch::Sender<usize>,
}

impl Core {
    pub(crate) fn harness(&self) -> &Harness {
        self.harness.get().expect("the harness is set at build")
    }

    pub(crate) fn now(&self) -> i64 {
        self.clock.now().secs()
    }

    pub(crate) fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// The tools' handle on the directory, if it still exists.
    pub(crate) fn upgrade(weak: &Weak<Self>) -> Result<Arc<Self>, crate::server::ToolError> {
        weak.upgrade()
            .ok_or_else(|| crate::server::ToolError::new("directory shutting down"))
    }

    /// The `statusFor` rules.
    pub(crate) async fn status_for(&self, uid: PeerId) -> Result<StatusOut, DirError> {
        // Under the index lock: a funding check between its fee debit and its state
        // change would show a balance short of the fee.
        let _index = self.lock.lock().await;
        let stored = self.store.get(&uid.to_string())?;
        let balance = match &stored.entry.reg {
            Some(reg) if reg.state == State::AwaitingFunding => {
                money::balance_atoms(self.harness(), uid).await?
            }
            _ => 0,
        };
        Ok(status_of(&stored.entry, balance))
    }

    pub(crate) fn stats(&self) -> Result<StatsOut, DirError> {
        let all = self.store.all()?;
        let spends = self.store.spends()?;
        let regs = || all.iter().filter_map(|(_, s)| s.entry.reg.as_ref());
        Ok(StatsOut {
            live: count(all.iter().filter(|(_, s)| s.entry.live.is_some())),
            in_pipeline: count(regs().filter(|r| r.state != State::PendingReview)),
            pending_review: count(regs().filter(|r| r.state == State::PendingReview)),
            leads: self.store.count(Table::Leads)?,
            peers: self.store.count(Table::Peers)?,
            spend_entries: count(spends.iter()),
            spend_atoms: spends.iter().map(|s| s.atoms).sum(),
        })
    }

    /// Marks `uid`'s pipeline running; `false` if it already is.
    pub(crate) fn claim(&self, uid: &str) -> bool {
        let mut set = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if !set.insert(uid.to_owned()) {
            return false;
        }
        self.running.send_modify(|n| *n += 1);
        true
    }

    pub(crate) fn release(&self, uid: &str) {
        let mut set = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if set.remove(uid) {
            self.running.send_modify(|n| *n -= 1);
        }
    }
}

fn count<T>(iter: impl Iterator<Item = T>) -> i64 {
    i64::try_from(iter.count()).unwrap_or(i64::MAX)
}

/// `statusFor` over a stored entry and the provider's balance.
pub(crate) fn status_of(entry: &Entry, balance: i64) -> StatusOut {
    if let Some(reg) = &entry.reg {
        let mut out = StatusOut::of(reg.state);
        out.fee_atoms = reg.fee_atoms;
        out.test_budget_atoms = reg.budget_atoms;
        if reg.state == State::AwaitingFunding {
            out.required_atoms = reg.fee_atoms + reg.budget_atoms;
            out.balance_atoms = balance;
            out.shortfall_atoms = (out.required_atoms - balance).max(0);
        }
        if reg.state == State::PendingReview {
            out.note.clone_from(&reg.test_err);
        }
        return out;
    }
    if let Some(live) = &entry.live {
        let mut out = StatusOut::of(State::Listed);
        out.expires_at = live.expires_at;
        out.note.clone_from(&entry.flag);
        return out;
    }
    if !entry.flag.is_empty() {
        let mut out = StatusOut::of(State::Rejected);
        out.note.clone_from(&entry.flag);
        return out;
    }
    StatusOut::of(State::None)
}

/// Promotes the registration to the live listing (approval, renewal, passing spot
/// check).
pub(crate) fn promote(stored: &mut Stored, now: i64, expiry_days: i64) -> Result<(), DirError> {
    let Some(reg) = &stored.entry.reg else {
        return refuse("no registration to promote");
    };
    if reg.test_outcome != Some(Outcome::Ok) {
        return refuse("verification has not passed");
    }
    let previous = stored.entry.live.as_ref();
    let live = Listing {
        description: reg.description.clone(),
        tags: reg.tags.clone(),
        test: reg.test.clone(),
        catalog: reg
            .catalog
            .clone()
            .unwrap_or(serde_json::Value::Array(Vec::new())),
        catalog_checked_at: now,
        last_verified_execution: now,
        test_latency_ms: reg.test_latency_ms,
        approved_at: previous.map_or(now, |l| l.approved_at),
        renewed_at: if previous.is_some() { now } else { 0 },
        expires_at: now + expiry_days * DAY_SECS,
    };
    stored.entry.live = Some(live);
    stored.entry.reg = None;
    stored.entry.flag.clear();
    stored.fund_key.clear();
    Ok(())
}
