//! A local Bison Relay simulator: a relay and nodes speaking real clientrpc.
//!
//! [`Devnet::start`] brings up a relay and N nodes. Each node is a fake brclient with a
//! clientrpc endpoint on `wss://127.0.0.1:<port>/ws` that a client cannot tell from the
//! real one, as brclient's `clientrpc` server behaves (the messages, with the facts
//! they carry, are in `brmcp-clientrpc/proto/clientrpc.proto`):
//!
//! * **TLS**: brclient-shaped certificates written to the node's directory (an Ed25519
//!   self-signed `CA:TRUE` server cert, a client CA and a client cert signed by it;
//!   [`CertMode::Brclientd`] writes brclientd's CA-signed leaves instead), a required
//!   client certificate checked against `rpc-ca.cert`, optional basic auth checked
//!   before the upgrade (401/403), 404 on every path but `/ws`.
//! * **Framing**: binary frames of JSON plus `\n`; text or binary accepted; only the
//!   first JSON value of a message is read; invalid JSON, an array or a `jsonrpc` other
//!   than `"2.0"` closes the socket without a reply; ids echoed as Go re-encodes them;
//!   at most 16 requests in flight per connection, streams included (the 17th stops
//!   the reader, as in Go, so the server's own ping then times out).
//! * **Methods and errors**: the `(\w+\.\w+)\[(\d+)\]` stream suffix rule, `-32603`
//!   for unknown service or method and every handler error with brclient's texts,
//!   `-32602` for params protojson refuses (unknown fields included), 64-bit integers
//!   as strings, zero values omitted.
//! * **Streams**: one replay log per node and stream type, ids above 2^32 growing by
//!   the entry length, cumulative acks, redelivery of everything unacked on every
//!   stream open, broadcast to every live stream of the type; logs outlive
//!   connections and [`Devnet::restart_node`].
//! * **Keepalive**: 16-byte pings every [`DevnetConfig::ping_interval`], the connection
//!   dropped when the pong does not match within [`DevnetConfig::pong_timeout`];
//!   client pings answered with the payload cut or zero-padded to 16 bytes.
//!
//! What a relay and brclient keep on disk, the devnet keeps in its directory
//! across any stop, SIGKILL included (see `durable`): wallets, the relay's
//! queues, each node's address book and replay logs with their acks, tips in flight
//! (resumed at the next start, paid at most once) and recent tips ([`read_wallets`]).
//! A node of an earlier run that a run does not start is offline to the relay.
//!
//! Behind the endpoints, the relay does store-and-forward between nodes (per-sender
//! order kept, queues for offline nodes expiring on an injectable clock) and keeps a
//! wallet per user: a tip moves balances and emits `TipProgress` on the payer and
//! `ReceivedTip` on the payee, or retries and gives up with brclient's event sequence
//! when the payee cannot invoice. `ChatService.MediateKX` through a contact who knows
//! the target makes the two users contacts, with a `KXCompleted` on both sides.
//!
//! A fault dial ([`Faults`], live from `<dir>/faults.json` with
//! [`Devnet::watch_faults`], or [`Devnet::set_faults`]) adds latency and jitter to
//! PMs and tip invoice requests, drops PM deliveries that the relay then re-sends
//! (drops become delay, never loss; the queue is kept, so a restart re-sends too),
//! takes nodes off the relay and back, and slows mediated key exchanges. Every
//! fault is off by default; a seed makes its rolls repeat.
//!
//! Each node also gets a bisonbotkit-format config file (`brmcp-serve.conf`, see
//! [`NodeInfo::config_path`]) so a client can be pointed at it with one path. The
//! in-process test hooks (KX, online/offline, injected PMs and tips, dropped or frozen
//! connections, restarts, failing or delayed methods, inspection) are methods of
//! [`Devnet`].
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), brmcp_devnet::DevnetError> {
//! use brmcp_devnet::{Devnet, StreamKind};
//!
//! let dir = tempfile::tempdir()?;
//! let devnet = Devnet::start(dir.path(), &["alice", "bob"]).await?;
//! let bob = devnet.node_by_nick("bob").expect("started");
//! // A client needs bob.url and bob.certs, or just bob.config_path.
//! assert!(bob.url.starts_with("wss://127.0.0.1:") && bob.url.ends_with("/ws"));
//! assert!(bob.config_path.exists());
//!
//! // Hooks drive the network from the test: a PM from a peer that is no node.
//! devnet.inject_pm(bob.id, [0x11; 32], "carol", "hello", 0)?;
//! let log = devnet.log(bob.id, StreamKind::Pm)?;
//! assert_eq!(log[0].params["msg"]["message"], "hello");
//! assert!(log[0].sequence_id > 1 << 32 && !log[0].acked);
//! devnet.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! Known differences from brclient: only the methods of `clientrpc.proto`'s services
//! exist (`GCService.*` and friends answer "unknown method"); a mediation
//! completes after the dial's time or never (it is not queued for an offline
//! mediator, nor kept across a stop while it waits); there is no POST transport;
//! the PM size estimate does not compress (it is exact for incompressible text and
//! pessimistic otherwise); protojson error texts carry no `(line:col)`; replay logs
//! are kept in the devnet's journal, not under `db/replaymsglog/`; a PM whose sender
//! is offline waits in `ChatService.PM` and is not kept (brclient keeps it in its
//! outbox); stream notifications are queued
//! without backpressure; TipUser's start-up wait defaults to none
//! ([`DevnetConfig::tip_warmup`]).

mod blake256;
mod certs;
mod codec;
mod commit;
mod config;
mod durable;
mod envelope;
mod faults;
mod hooks;
mod node;
mod persist;
mod posts;
mod relay;
mod rpc;
mod server;
mod uid;
mod wallets;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

pub use certs::{CertMode, CertPaths};
pub use faults::{FAULTS_FILE, Faults, FaultsError, read_faults, write_faults};
pub use node::{LogEntry, ReceivedRequest, StreamKind};
pub use posts::{MAX_POST_BYTES, POSTS_DIR, PostRequest};
pub use wallets::{TipDirection, Wallet, WalletTip, read_wallets};

use commit::StateGuard;
use node::Node;
use relay::Relay;
use server::ServerSettings;

/// A boxed error from a dependency (TLS, certificate generation).
pub use brmcp_adapters::BoxError;

/// Identifies a node of a [`Devnet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(usize);

impl NodeId {
    /// The node's position in creation order.
    pub const fn index(self) -> usize {
        self.0
    }
}

/// Timings and limits of a devnet. The defaults are brclient's, except where noted.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DevnetConfig {
    /// How long after a pong (or the connection's start) the server pings. Default 30 s.
    pub ping_interval: Duration,
    /// How long the server waits for a matching pong. Default 10 s.
    pub pong_timeout: Duration,
    /// The floor of `KeepaliveStream`'s interval. Default 1 s.
    pub keepalive_floor: Duration,
    /// Time between a tip's invoice requests (brclient's `rerequestinvoicedelay`,
    /// 24 h there). Default 2 s.
    pub tip_retry_spacing: Duration,
    /// How long after a node (re)starts `TipUser` blocks (brclient: first
    /// subscription plus `restartdelay`, about 1 min). Default zero.
    pub tip_warmup: Duration,
    /// How long the relay keeps data for an offline node. Default 7 days, measured on
    /// the devnet clock ([`Devnet::advance_clock`]).
    pub relay_expiry: Duration,
    /// The relay's maximum message size; a PM whose estimated size exceeds it is
    /// refused with brclient's error. Default 1,887,437 (`MaxMsgSizeV0`).
    pub max_msg_size: u64,
    /// The size at which a replay log rotates to its next file. Default 8 MiB.
    pub replay_file_size: u64,
    /// A new node's starting wallet balance, in milliatoms (a node kept from an
    /// earlier run on the directory keeps its balance). Default 10 DCR.
    pub initial_balance_matoms: i64,
    /// KX every pair of the starting nodes (without `KXCompleted` events). Default on.
    pub kx_all: bool,
    /// Time allowed for the TLS handshake and the HTTP request head. Default 10 s.
    pub handshake_timeout: Duration,
    /// The journal size at which the kept state is compacted into a new snapshot
    /// while running. Default 16 MiB.
    pub journal_compact_bytes: u64,
}

impl Default for DevnetConfig {
    fn default() -> Self {
        Self {
            ping_interval: Duration::from_secs(30),
            pong_timeout: Duration::from_secs(10),
            keepalive_floor: Duration::from_secs(1),
            tip_retry_spacing: Duration::from_secs(2),
            tip_warmup: Duration::ZERO,
            relay_expiry: Duration::from_secs(7 * 24 * 3600),
            max_msg_size: 1_887_437,
            replay_file_size: 1 << 23,
            initial_balance_matoms: 10 * 100_000_000_000,
            kx_all: true,
            handshake_timeout: Duration::from_secs(10),
            journal_compact_bytes: durable::COMPACT_BYTES,
        }
    }
}

/// Credentials for a node's basic-auth mode (brclient `rpcauthmode = basic`): the
/// client's own type.
pub use brmcp_clientrpc::BasicAuth;

/// How to create a node.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeSpec {
    /// The node's nick; also its directory name under the devnet directory.
    pub nick: String,
    /// Its 32-byte user id; random when `None`.
    pub uid: Option<[u8; 32]>,
    /// Which client's certificate layout to write.
    pub cert_mode: CertMode,
    /// Require a client certificate (brclient's default). Off: no client auth.
    pub client_auth: bool,
    /// Enforce basic auth with these credentials.
    pub basic_auth: Option<BasicAuth>,
    /// Connected to the relay at start.
    pub online: bool,
}

impl NodeSpec {
    /// A brclient-shaped node with a client certificate required, no basic auth, online.
    pub fn new(nick: impl Into<String>) -> Self {
        Self {
            nick: nick.into(),
            uid: None,
            cert_mode: CertMode::Brclient,
            client_auth: true,
            basic_auth: None,
            online: true,
        }
    }

    /// Uses this user id.
    #[must_use]
    pub fn uid(mut self, uid: [u8; 32]) -> Self {
        self.uid = Some(uid);
        self
    }

    /// Writes this certificate layout.
    #[must_use]
    pub fn cert_mode(mut self, mode: CertMode) -> Self {
        self.cert_mode = mode;
        self
    }

    /// Accepts clients without a certificate.
    #[must_use]
    pub fn without_client_auth(mut self) -> Self {
        self.client_auth = false;
        self
    }

    /// Enforces basic auth.
    #[must_use]
    pub fn basic_auth(mut self, user: impl Into<String>, pass: impl Into<String>) -> Self {
        self.basic_auth = Some(BasicAuth {
            user: user.into(),
            pass: pass.into(),
        });
        self
    }

    /// Starts disconnected from the relay.
    #[must_use]
    pub fn offline(mut self) -> Self {
        self.online = false;
        self
    }
}

/// Everything a client needs to reach a node.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeInfo {
    /// The node's handle for the hooks.
    pub id: NodeId,
    /// Its nick.
    pub nick: String,
    /// Its user id.
    pub uid: [u8; 32],
    /// The clientrpc URL, `wss://127.0.0.1:<port>/ws`.
    pub url: String,
    /// The listening address.
    pub addr: SocketAddr,
    /// The node's directory.
    pub dir: PathBuf,
    /// Its certificate files.
    pub certs: CertPaths,
    /// Its bisonbotkit-format config file (`brmcp-serve.conf`).
    pub config_path: PathBuf,
    /// `rpcuser` (the basic-auth user if enforced, else random).
    pub rpc_user: String,
    /// `rpcpass` (the basic-auth password if enforced, else random).
    pub rpc_pass: String,
}

impl NodeInfo {
    /// The user id as clientrpc's `user` strings take it: 64 lowercase hex characters.
    pub fn uid_hex(&self) -> String {
        hex::encode(self.uid)
    }
}

/// Why a devnet could not start or a hook could not act.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DevnetError {
    /// A file or socket operation failed.
    #[error("devnet i/o: {0}")]
    Io(#[from] std::io::Error),
    /// Generating or loading certificates failed.
    #[error("devnet certificates: {0}")]
    Certificate(#[source] BoxError),
    /// Building the TLS configuration failed.
    #[error("devnet tls: {0}")]
    Tls(#[source] BoxError),
    /// A nick that cannot name a directory (empty, `.`/`..`, or not `[A-Za-z0-9_.-]`).
    #[error("invalid node nick {0:?}")]
    InvalidNick(String),
    /// Two nodes with one nick.
    #[error("duplicate node nick {0:?}")]
    DuplicateNick(String),
    /// Two nodes with one user id.
    #[error("duplicate node uid {0}")]
    DuplicateUid(String),
    /// No node has this id.
    #[error("no node {0:?}")]
    UnknownNode(NodeId),
    /// A kept-state file is not what the devnet wrote (a torn last journal line is
    /// not this: it is dropped).
    #[error("devnet state {}: corrupt: {detail} (move the file away to start that state afresh)", path.display())]
    CorruptState {
        /// The file.
        path: PathBuf,
        /// Where and what.
        detail: String,
    },
}

/// The devnet clock: wall time plus an offset the tests can advance.
#[derive(Debug, Default)]
pub(crate) struct Clock {
    offset_ms: AtomicI64,
}

impl Clock {
    pub(crate) fn now_ms(&self) -> i64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        wall.saturating_add(self.offset_ms.load(Ordering::Relaxed))
    }

    pub(crate) fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.offset_ms.fetch_add(ms, Ordering::Relaxed);
    }
}

/// Everything behind the lock: the nodes and the relay.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) nodes: Vec<Node>,
    pub(crate) relay: Relay,
    /// Nodes kept from earlier runs that this run has not started, by user id.
    pub(crate) dormant: HashMap<durable::Uid, durable::NodeSnap>,
    /// Relay changes to journal when the lock is released (the nodes keep theirs).
    pub(crate) pending: Vec<durable::Op>,
    /// Where changes are written ahead of their effects.
    journal: Option<durable::Journal>,
}

/// The shared network.
#[derive(Debug)]
pub(crate) struct Net {
    pub(crate) cfg: DevnetConfig,
    pub(crate) clock: Clock,
    state: Mutex<State>,
    /// Woken on every change a blocked PM or tip may wait for (online flags,
    /// invoicing ability).
    pub(crate) changed: Notify,
    shutdown: watch::Sender<bool>,
    next_conn: AtomicU64,
    /// The fault dial in force (not kept: the file or the flags set it each run).
    dial: Mutex<faults::Dial>,
}

impl Net {
    fn new(cfg: DevnetConfig, state: State) -> Self {
        Self {
            cfg,
            clock: Clock::default(),
            state: Mutex::new(state),
            changed: Notify::new(),
            shutdown: watch::Sender::new(false),
            next_conn: AtomicU64::new(1),
            dial: Mutex::new(faults::Dial::default()),
        }
    }

    /// The fault dial, for a roll or a reading.
    pub(crate) fn dial(&self) -> MutexGuard<'_, faults::Dial> {
        self.dial
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The state; its changes are journaled when the guard drops. A panic while
    /// holding the lock does not poison the devnet.
    pub(crate) fn lock(&self) -> StateGuard<'_> {
        StateGuard(
            self.state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    pub(crate) fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// Resolves once the devnet shuts down.
    pub(crate) fn shutdown_signal(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.shutdown.subscribe();
        async move {
            let _ = rx.wait_for(|down| *down).await;
        }
    }

    pub(crate) fn is_shut_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    /// Runs `fut` on its own until it ends or the devnet shuts down.
    pub(crate) fn spawn(&self, fut: impl Future<Output = ()> + Send + 'static) {
        let down = self.shutdown_signal();
        tokio::spawn(async move {
            tokio::select! {
                () = fut => {}
                () = down => {}
            }
        });
    }
}

/// Per-node server plumbing, outside the lock.
struct NodeRuntime {
    info: NodeInfo,
    settings: Arc<ServerSettings>,
    listener: Option<JoinHandle<()>>,
}

/// A running devnet. Dropping it stops everything; [`Devnet::shutdown`] also waits for
/// the listeners to close.
pub struct Devnet {
    net: Arc<Net>,
    dir: PathBuf,
    runtimes: Mutex<Vec<NodeRuntime>>,
}

impl std::fmt::Debug for Devnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Devnet")
            .field("dir", &self.dir)
            .field("nodes", &self.nodes().len())
            .finish_non_exhaustive()
    }
}

impl Devnet {
    /// Starts a devnet under `dir` with one default node per nick ([`NodeSpec::new`]),
    /// all KX'd with each other, and the default [`DevnetConfig`].
    ///
    /// # Errors
    ///
    /// See [`Devnet::start_with`].
    pub async fn start(dir: impl AsRef<Path>, nicks: &[&str]) -> Result<Self, DevnetError> {
        let specs = nicks.iter().map(|n| NodeSpec::new(*n)).collect();
        Self::start_with(dir, specs, DevnetConfig::default()).await
    }

    /// Starts a devnet under `dir` with these nodes. Each node's files go to
    /// `dir/<nick>/`; certificates already there are reused.
    ///
    /// Must be called within a tokio runtime with the time and I/O drivers.
    ///
    /// # Errors
    ///
    /// A bad or duplicate nick or uid, a file or socket error, or a certificate or TLS
    /// setup failure.
    pub async fn start_with(
        dir: impl AsRef<Path>,
        specs: Vec<NodeSpec>,
        config: DevnetConfig,
    ) -> Result<Self, DevnetError> {
        brmcp_fs::create_dir(dir.as_ref())?;
        // Absolute: the `.conf` files name their certificates by path, and serve or the
        // bridge may run from another folder than devnet did.
        let dir = std::path::absolute(dir.as_ref())?;
        let kx_all = config.kx_all;
        let (snap, journal) =
            durable::open(&dir, config.replay_file_size, config.journal_compact_bytes)?;
        let state = State::restored(snap, journal);
        let devnet = Self {
            net: Arc::new(Net::new(config, state)),
            dir,
            runtimes: Mutex::new(Vec::new()),
        };
        let mut seen = HashSet::new();
        for spec in &specs {
            if !seen.insert(spec.nick.clone()) {
                return Err(DevnetError::DuplicateNick(spec.nick.clone()));
            }
        }
        let mut ids = Vec::new();
        for spec in specs {
            ids.push(devnet.add_node(spec).await?.id);
        }
        if kx_all {
            let mut st = devnet.net.lock();
            for (i, a) in ids.iter().enumerate() {
                for b in &ids[i + 1..] {
                    st.kx(a.0, b.0, false);
                }
            }
        }
        Ok(devnet)
    }

    /// The devnet's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every node, in creation order.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.runtimes().iter().map(|r| r.info.clone()).collect()
    }

    /// One node.
    ///
    /// # Errors
    ///
    /// [`DevnetError::UnknownNode`].
    pub fn node(&self, id: NodeId) -> Result<NodeInfo, DevnetError> {
        self.runtimes()
            .get(id.0)
            .map(|r| r.info.clone())
            .ok_or(DevnetError::UnknownNode(id))
    }

    /// The node with this nick.
    pub fn node_by_nick(&self, nick: &str) -> Option<NodeInfo> {
        self.runtimes()
            .iter()
            .find(|r| r.info.nick == nick)
            .map(|r| r.info.clone())
    }

    /// Stops every listener and connection and waits for the listeners to end.
    /// Blocked PMs are abandoned; pending tips are kept and resume at the next start
    /// on this directory.
    pub async fn shutdown(self) {
        // Stopping first, then the journal closed: a request whose change came after
        // the close finds the devnet stopping and is not answered.
        self.net.shutdown.send_replace(true);
        self.net.lock().close_journal();
        self.net.changed.notify_waiters();
        let handles: Vec<JoinHandle<()>> = self
            .runtimes()
            .iter_mut()
            .filter_map(|r| r.listener.take())
            .collect();
        for h in handles {
            h.abort();
            let _ = h.await;
        }
    }

    fn runtimes(&self) -> MutexGuard<'_, Vec<NodeRuntime>> {
        self.runtimes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn check(&self, id: NodeId) -> Result<(), DevnetError> {
        if id.0 < self.runtimes().len() {
            Ok(())
        } else {
            Err(DevnetError::UnknownNode(id))
        }
    }
}

impl Drop for Devnet {
    fn drop(&mut self) {
        self.net.shutdown.send_replace(true);
        self.net.lock().close_journal();
        self.net.changed.notify_waiters();
        for r in self.runtimes().iter_mut() {
            if let Some(h) = r.listener.take() {
                h.abort();
            }
        }
    }
}

/// `n` random bytes (ids, ping payloads, passwords).
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // getrandom fails only on platforms without an entropy source; a devnet there
    // still works with weaker ids.
    if getrandom::fill(&mut b).is_err() {
        let seed = Clock::default().now_ms().to_le_bytes();
        for (i, x) in b.iter_mut().enumerate() {
            *x = seed[i % 8] ^ u8::try_from(i % 251).unwrap_or(0);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    fn assert_send<T: Send>(_: &T) {}

    #[test]
    fn devnet_and_its_futures_can_move_between_tasks() {
        let dir = PathBuf::new();
        let start = Devnet::start(&dir, &[]);
        assert_send(&start);
        drop(start);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let devnet = rt.block_on(Devnet::start(tmp.path(), &[])).unwrap();
        assert_send_sync(&devnet);
        assert_send(&devnet.restart_node(NodeId(0)));
        assert_send(&devnet.add_node(NodeSpec::new("x")));
        rt.block_on(devnet.shutdown());
    }

    #[test]
    fn clock_advances() {
        let c = Clock::default();
        let before = c.now_ms();
        c.advance(Duration::from_secs(3600));
        assert!(c.now_ms() - before >= 3_600_000);
    }
}
