//! Router settings. Every bound has a default and a reason.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use brmcp_wire::{DEFAULT_CHUNK_LEN, Limits};

use crate::clock::{Clock, SystemClock};
use crate::host::{AllowAll, Authorizer};

/// Default capacity of a session's inbound queue: 128 decoded messages, as the Go router.
pub const DEFAULT_INBOX_CAPACITY: usize = 128;

/// Default bound on the bytes of the messages a session's inbound queue holds before
/// the session is closed for overflow: 32 MiB, two maximal messages
/// ([`brmcp_wire::limits::DEFAULT_MAX_MESSAGE_BYTES`]). It counts the JSON as received,
/// not the memory of its decoded form (which can be several times larger): it caps the
/// queue at a few maximal messages where the message count alone (128) would not.
pub const DEFAULT_MAX_INBOX_BYTES: usize = 32 << 20;

/// Default cap on sessions one peer may open with us: 8, as the Go router.
pub const DEFAULT_MAX_SESSIONS_PER_PEER: usize = 8;

/// Default idle timeout of sessions a peer opened with us: 10 minutes, as the Go router.
pub const DEFAULT_SERVER_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// Default idle time after which a session we hold through a [`Client`](crate::Client)
/// is parked: 100 ms after it came to rest (connected, or its last lease dropped), as
/// the serving harness parks its callers' sessions. Over Bison Relay a session's next
/// call comes a round trip later at the soonest, so a client parks between its calls:
/// parked, the session costs its entry and handshake record instead of an rmcp service
/// (whose two channels alone hold about 23 KB), and reviving it sends nothing on the
/// wire and costs tens of microseconds. Back-to-back calls keep it running.
pub const DEFAULT_CLIENT_PARK_AFTER: Duration = Duration::from_millis(100);

/// Default lifetime stamped on outbound parts (`exp = now + ttl`): 10 minutes.
///
/// Matches the reassembler's partial-message timeout, so a message is never kept longer
/// than the request it carries is valid.
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// Default time a client request waits for its answer: 10 minutes, the part TTL.
///
/// Past it the request's parts have expired at the peer, so a request still in transit
/// will never run; a call that did start and runs longer is answered too late.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

/// Default bound on the bytes a session's outbound queue holds before the session is
/// closed: 64 MiB, four maximal messages. Bounds what a peer can make us buffer by
/// sending requests faster than their answers can leave.
pub const DEFAULT_MAX_OUTBOUND_BYTES: usize = 64 << 20;

/// Default depth of the queue between [`Router::handle_pm`](crate::Router::handle_pm)
/// and the router task; a full queue makes `handle_pm` wait (backpressure on the host).
pub const DEFAULT_INBOUND_QUEUE: usize = 1024;

/// Default bound on the bytes of PM text in the queue between
/// [`Router::handle_pm`](crate::Router::handle_pm) and the router task: 16 MiB, sixteen
/// PMs of Bison Relay's maximal size ([`brmcp_wire::MAX_PM_LEN`]). The PM count alone
/// (1024) would let peers park a gigabyte of large PMs before reassembly sees one; this
/// keeps the queue to a few full-size messages' worth of parts. Each peer may hold a
/// quarter of it, so a flooding peer leaves room for others. A full queue makes
/// `handle_pm` wait.
pub const DEFAULT_MAX_INBOUND_BYTES: usize = 16 << 20;

/// Default number of accepted sessions waiting for
/// [`Router::accept`](crate::Router::accept); beyond it new sessions are refused.
pub const DEFAULT_ACCEPT_BACKLOG: usize = 128;

/// Concurrent partial messages the reassembler tracks (its slot count).
pub const ASSEMBLER_SLOTS: usize = 256;

/// The shortest idle time after which the timer's scan parks a session: 1 s. A session
/// is parked its park delay after it came to rest, as its writer (or its
/// [`Client`](crate::Client)) reports (see `router::at_rest`); the scan, which runs over
/// every session, catches one that came to rest unreported (its last request
/// cancelled, say), and with a short park delay runs at most this often however many
/// sessions revive.
pub(crate) const PARK_SCAN_FLOOR: Duration = Duration::from_secs(1);

/// Settings of one [`Router`](crate::Router).
///
/// [`RouterConfig::server`] and [`RouterConfig::client`] give the defaults for each role;
/// one router may do both (accept and dial).
#[derive(Clone)]
#[non_exhaustive]
pub struct RouterConfig {
    /// Accept sessions opened by peers (the server role). Off: parts for unknown
    /// sessions are dropped.
    pub accept_inbound: bool,
    /// Decoded messages queued per session before the session is closed for overflow.
    pub inbox_capacity: usize,
    /// Bytes (as received) of the messages queued per session before the session is
    /// closed for overflow; one message of any size fits an empty queue.
    pub max_inbox_bytes: usize,
    /// Sessions one peer may have open with us; sessions we dialed do not count. At the
    /// cap a new session of the peer closes its least recently active idle one (kept
    /// resumable); only when all are busy is it refused (`too many sessions`).
    pub max_sessions_per_peer: usize,
    /// Idle time after which a session a peer opened is closed; `None`: never.
    pub server_idle_timeout: Option<Duration>,
    /// Idle time after which a session we dialed is closed; `None`: never.
    pub client_idle_timeout: Option<Duration>,
    /// Idle time after which a session a peer opened is parked: its rmcp service and
    /// handler are dropped and only what it takes to resume it is kept; its next message
    /// revives it already initialized, so the peer notices nothing. Idle counts from
    /// the session coming to rest (its answers sent, no request in progress), so a
    /// delay shorter than the peer's round trip parks a session between its calls.
    /// Only sessions opened with `initialize` are parked. `None` (the default): never.
    /// A parked session's handler cannot push notifications (a list change, a log
    /// line) until the peer's next message, so set it only for handlers that keep no
    /// per-session state.
    pub server_park_after: Option<Duration>,
    /// Idle time after which a session we hold through a [`Client`](crate::Client) (or
    /// another [`ServiceSlot`](crate::ServiceSlot)) is parked: its rmcp service is
    /// dropped, the router keeps its entry (same sid), and the next lease or message
    /// from the server revives it with no traffic. Idle means no lease held (the slot
    /// willing), no request of ours or the server's in progress and nothing left to
    /// send. Sessions from [`Router::dial`](crate::Router::dial) are parked only once
    /// given to [`Router::park_idle`](crate::Router::park_idle). `None`: never.
    pub client_park_after: Option<Duration>,
    /// Raw payload bytes per part.
    pub chunk_len: usize,
    /// Lifetime stamped on outbound parts.
    pub ttl: Duration,
    /// Time a request on a dialed session waits for its answer before failing.
    pub request_timeout: Option<Duration>,
    /// Silence of the server, while a request on a dialed session waits, after which
    /// the session is probed with `ping` (and a lost one recovered); `None`: never.
    pub silence_probe: Option<Duration>,
    /// Bytes a session's outbound queue may hold; past it the session is closed.
    pub max_outbound_bytes: usize,
    /// Reassembly bounds; `max_total_bytes` also sizes the reassembly storage.
    pub limits: Limits,
    /// Depth of the inbound PM queue, in PMs.
    pub inbound_queue: usize,
    /// Bytes of PM text the inbound PM queue holds; an empty queue takes one PM of any
    /// size.
    pub max_inbound_bytes: usize,
    /// Accepted sessions waiting for `accept`.
    pub accept_backlog: usize,
    /// Which peers may talk to us (checked before any state is allocated).
    pub authorizer: Arc<dyn Authorizer>,
    /// Answer a one-part request from a peer the authorizer refuses with
    /// [`NOT_ALLOWED`](crate::protocol::NOT_ALLOWED), at most once per
    /// [`REFUSAL_REPLY_INTERVAL`](crate::REFUSAL_REPLY_INTERVAL) per peer, so its
    /// client learns why at once. Off: refused peers hear nothing.
    pub tell_refused: bool,
    /// Source of unix time for part deadlines.
    pub clock: Arc<dyn Clock>,
}

impl RouterConfig {
    /// Defaults for a router that accepts sessions (and may also dial).
    ///
    /// Every peer is allowed until an authorizer is set
    /// ([`with_authorizer`](Self::with_authorizer)); a serving harness installs its
    /// allowlist there.
    pub fn server() -> Self {
        Self {
            accept_inbound: true,
            inbox_capacity: DEFAULT_INBOX_CAPACITY,
            max_inbox_bytes: DEFAULT_MAX_INBOX_BYTES,
            max_sessions_per_peer: DEFAULT_MAX_SESSIONS_PER_PEER,
            server_idle_timeout: Some(DEFAULT_SERVER_IDLE_TIMEOUT),
            client_idle_timeout: None,
            server_park_after: None,
            client_park_after: Some(DEFAULT_CLIENT_PARK_AFTER),
            chunk_len: DEFAULT_CHUNK_LEN,
            ttl: DEFAULT_TTL,
            request_timeout: Some(DEFAULT_REQUEST_TIMEOUT),
            silence_probe: Some(crate::recovery::DEFAULT_SILENCE_PROBE),
            max_outbound_bytes: DEFAULT_MAX_OUTBOUND_BYTES,
            limits: Limits::default(),
            inbound_queue: DEFAULT_INBOUND_QUEUE,
            max_inbound_bytes: DEFAULT_MAX_INBOUND_BYTES,
            accept_backlog: DEFAULT_ACCEPT_BACKLOG,
            authorizer: Arc::new(AllowAll),
            tell_refused: false,
            clock: Arc::new(SystemClock),
        }
    }

    /// The idle time after which the timer's scan parks a session a peer opened:
    /// [`server_park_after`](Self::server_park_after), at least [`PARK_SCAN_FLOOR`].
    pub(crate) fn park_scan_after(&self) -> Option<Duration> {
        self.server_park_after
            .map(|after| after.max(PARK_SCAN_FLOOR))
    }

    /// The idle time after which the timer's scan parks a session we dialed:
    /// [`client_park_after`](Self::client_park_after), at least [`PARK_SCAN_FLOOR`].
    /// A dialed session reports its rests (its last request answered, and for a
    /// [`Client`](crate::Client) connected or its last lease dropped) and parks
    /// `client_park_after` after one; the scan catches one that came to rest
    /// unreported.
    pub(crate) fn client_park_scan_after(&self) -> Option<Duration> {
        self.client_park_after
            .map(|after| after.max(PARK_SCAN_FLOOR))
    }

    /// Defaults for a router that only dials: parts for unknown sessions are dropped.
    pub fn client() -> Self {
        Self {
            accept_inbound: false,
            ..Self::server()
        }
    }

    /// Sets the authorizer.
    #[must_use]
    pub fn with_authorizer(mut self, authorizer: impl Authorizer) -> Self {
        self.authorizer = Arc::new(authorizer);
        self
    }

    /// Sets whether refused peers are told ([`tell_refused`](Self::tell_refused)).
    #[must_use]
    pub fn with_tell_refused(mut self, tell: bool) -> Self {
        self.tell_refused = tell;
        self
    }

    /// Sets the clock.
    #[must_use]
    pub fn with_clock(mut self, clock: impl Clock) -> Self {
        self.clock = Arc::new(clock);
        self
    }
}

/// The client defaults: a router that accepts nothing unless asked to.
impl Default for RouterConfig {
    fn default() -> Self {
        Self::client()
    }
}

impl fmt::Debug for RouterConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RouterConfig")
            .field("accept_inbound", &self.accept_inbound)
            .field("inbox_capacity", &self.inbox_capacity)
            .field("max_inbox_bytes", &self.max_inbox_bytes)
            .field("max_sessions_per_peer", &self.max_sessions_per_peer)
            .field("server_idle_timeout", &self.server_idle_timeout)
            .field("client_idle_timeout", &self.client_idle_timeout)
            .field("server_park_after", &self.server_park_after)
            .field("client_park_after", &self.client_park_after)
            .field("chunk_len", &self.chunk_len)
            .field("ttl", &self.ttl)
            .field("request_timeout", &self.request_timeout)
            .field("silence_probe", &self.silence_probe)
            .field("max_outbound_bytes", &self.max_outbound_bytes)
            .field("limits", &self.limits)
            .field("inbound_queue", &self.inbound_queue)
            .field("max_inbound_bytes", &self.max_inbound_bytes)
            .field("accept_backlog", &self.accept_backlog)
            .finish_non_exhaustive()
    }
}
