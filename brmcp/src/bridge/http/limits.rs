//! The bounds of the HTTP endpoints ([`HttpLimits`]) and their defaults: connections
//! to the owned listener, the time a request has to arrive, and the agents' MCP
//! sessions.

use std::time::Duration;

/// Default bound on open connections to the owned listener: 256, well under the
/// usual 1024 descriptors, yet far more than the agents of one user open.
pub const MAX_CONNECTIONS: usize = 256;

/// Default bound on the connections that have not yet carried a credential: 192,
/// three quarters of [`MAX_CONNECTIONS`]. Past it the oldest such connection is
/// dropped for a new one, so the last quarter is only ever held by connections that
/// proved a credential (an agent's token, the approval secret, a page's session).
pub const MAX_UNPROVEN_CONNECTIONS: usize = 192;

/// Default time a connection just accepted keeps its slot before a newer one may take
/// it: 100 ms, ample for a client that sends its headers at once to have them read on
/// a loaded machine. Without it a process that reconnects as fast as it is dropped
/// turns the unproven slots over faster than a real client's headers are read; with
/// it, the slots turn over at most [`MAX_UNPROVEN_CONNECTIONS`] times per grace (1,920
/// connections a second), so a burst of connections queued ahead of a client delays it
/// by one grace per share of them, not by their timeouts.
pub const UNPROVEN_GRACE: Duration = Duration::from_millis(100);

/// Default time a connection has to send a request's headers (and an idle
/// keep-alive connection to start its next request): 10 s. Real clients send their
/// headers at once.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default time a request's whole body has to arrive once its headers have: 10 s,
/// one deadline however the body trickles (408 past it). The bodies here are JSON
/// messages and forms a client sends at once; a body held back only holds a slot.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Default bound on the MCP sessions of one bearer token (one agent), over all bots:
/// 32, half of [`MAX_SESSIONS`], an agent's share: however many one agent opens and
/// keeps busy, the others keep the other half, and its new sessions close only its
/// own or those of an agent holding more. A session costs about 60 KB; agents open
/// one each.
pub const MAX_SESSIONS_PER_TOKEN: usize = 32;

/// Default bound on all MCP sessions of the endpoints: 64.
pub const MAX_SESSIONS: usize = 64;

/// Default time a session with no open request lives on: 10 minutes, long enough for
/// an agent that pauses between calls.
pub const SESSION_IDLE: Duration = Duration::from_secs(600);

/// The HTTP endpoints' bounds; [`Default`] gives the constants above.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct HttpLimits {
    /// Open connections to the owned listener.
    pub max_connections: usize,
    /// Open connections that have not yet carried a credential (at most
    /// `max_connections`); past it the oldest of them is dropped for a new one.
    pub max_unproven_connections: usize,
    /// Time an unproven connection keeps its slot before a newer one may take it.
    pub unproven_grace: Duration,
    /// Time to send a request's headers.
    pub header_read_timeout: Duration,
    /// Time to send a request's whole body once its headers are in.
    pub body_read_timeout: Duration,
    /// MCP sessions per bearer token.
    pub max_sessions_per_token: usize,
    /// MCP sessions in all.
    pub max_sessions: usize,
    /// Time an idle session lives on.
    pub session_idle: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        Self {
            max_connections: MAX_CONNECTIONS,
            max_unproven_connections: MAX_UNPROVEN_CONNECTIONS,
            unproven_grace: UNPROVEN_GRACE,
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_read_timeout: BODY_READ_TIMEOUT,
            max_sessions_per_token: MAX_SESSIONS_PER_TOKEN,
            max_sessions: MAX_SESSIONS,
            session_idle: SESSION_IDLE,
        }
    }
}
