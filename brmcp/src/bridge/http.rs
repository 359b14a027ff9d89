//! The streamable HTTP endpoints: `/mcp/<bot name or 64-hex uid>`, one rmcp
//! `StreamableHttpService` per allowed bot (whichever path reached it), behind these
//! gates in order:
//!
//! 1. `Host` must be one header (a host and an optional numeric port) naming a
//!    loopback name, the address the connection reached, the listen address, or a
//!    name the config allows (DNS rebinding): 403;
//! 2. an `Origin`, when sent, must be `http(s)://` one of those hosts (a page of
//!    another site holding the token still cannot drive the bridge): 403;
//! 3. the settings must enable the endpoint: 404;
//! 4. a remote (non-loopback) agent must come from an address of `allowed_ips`, when
//!    the list is not empty: refused exactly as a wrong token is (below), so a
//!    scanner learns nothing; the last address refused is kept for `bridge status`;
//! 5. `Authorization: Bearer <token>` of the default agent or of one of `agents`, scheme case-insensitive, token compared in
//!    constant time; an empty configured token never authorizes; a raw token without
//!    the scheme is refused: 401 with `WWW-Authenticate: Bearer` (waived only by
//!    [`Config::require_token`](super::Config::require_token) on a loopback bind);
//!    `/payments` (deciding payments) takes the user's approval secret instead: an
//!    agent's token gets 403, anything else 401 (see [`super::approval`]); `/ui`,
//!    the user's page, takes a session opened by a login code made under that
//!    secret (see [`super::ui`]);
//! 6. the path must name an allowed bot, one of the agent's own bots if it has any
//!    (403 otherwise), (the name resolved per request, so a rename
//!    applies at once), or be `/mcp/directory` (the first configured directory's
//!    tools) or `/mcp/directory/<name or uid>`: 404 naming what was asked for;
//! 7. the bot's session must be up, or come up within the connect timeout: 503 with
//!    `Retry-After`, naming the bot and why;
//! 8. a new MCP session must fit the bounds of [`HttpLimits`] (idle ones make room):
//!    503 with `Retry-After`.
//!
//! On the `/mcp` paths a refusal is a JSON-RPC error object (see [`refusal`]) whose
//! message MCP clients show; elsewhere plain text.
//!
//! Before any of these, the [`listener`] holds every request to its header and body
//! deadlines (408) and keeps its connection slots for requests that carry a
//! credential ([`credentialed`](gate::credentialed): the page's session, the approval
//! secret, an agent's token), so connections held without one cannot keep those out.
//!
//! `DELETE` of a session answers 204, as the MCP specification allows (rmcp says 202,
//! on which the Python SDK warns).

pub(crate) mod access;
mod gate;
mod lifecycle;
mod limits;
pub(crate) mod listener;
mod payments;
mod refusal;
mod remote;
mod services;
mod sessions;
mod tasks25;

pub(crate) use gate::app;
use lifecycle::{Listening, publish};
pub(crate) use lifecycle::{reconcile, start, stop};
pub use limits::{
    BODY_READ_TIMEOUT, HEADER_READ_TIMEOUT, HttpLimits, MAX_CONNECTIONS, MAX_SESSIONS,
    MAX_SESSIONS_PER_TOKEN, MAX_UNPROVEN_CONNECTIONS, SESSION_IDLE, UNPROVEN_GRACE,
};
pub use remote::RefusedAddress;
use services::BotService;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use brmcp_adapters::PeerId;
use tokio_util::sync::CancellationToken;

use super::lock;
use super::presence::Ownership;
use remote::Refusals;
use sessions::Sessions;

/// What an MCP endpoint serves: one bot, or the tools of one directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Endpoint {
    /// `/mcp/<uid>`.
    Bot(PeerId),
    /// `/mcp/directory[/<name>]`, by the directory's uid.
    Directory(PeerId),
}

/// The path prefix of the directory endpoints.
pub(crate) const DIRECTORY_PATH: &str = "/mcp/directory";

/// The endpoints' state: the owned listener and one service per bot.
pub(crate) struct HttpState {
    state: tokio::sync::Mutex<Listening>,
    addr: Mutex<Option<SocketAddr>>,
    /// Cancelled to sever every stream of the current token; replaced after.
    generation: Mutex<CancellationToken>,
    services: Mutex<HashMap<Endpoint, Arc<BotService>>>,
    sessions: Sessions,
    /// The data directory's ownership, when this bridge is its process's: each bind
    /// is recorded for `bridge stdio` and `approvals` to find.
    owner: Mutex<Option<Arc<Ownership>>>,
    /// The last remote address `allowed_ips` refused.
    refusals: Refusals,
    /// The user's page's sessions.
    pub(crate) ui: super::ui::UiState,
    /// The agents' shares of each bot's rate limit.
    pub(crate) fair_shares: super::fair_share::FairShares,
}

impl HttpState {
    /// The state of a bridge whose bots each allow `bot_calls_per_minute`.
    pub(crate) fn new(bot_calls_per_minute: u32) -> Self {
        Self {
            state: tokio::sync::Mutex::default(),
            addr: Mutex::new(None),
            generation: Mutex::new(CancellationToken::new()),
            services: Mutex::default(),
            sessions: Sessions::default(),
            owner: Mutex::new(None),
            refusals: Refusals::default(),
            ui: super::ui::UiState::default(),
            fair_shares: super::fair_share::FairShares::new(bot_calls_per_minute),
        }
    }

    /// The last remote address `allowed_ips` refused, and when.
    pub(crate) fn last_refused(&self) -> Option<RefusedAddress> {
        self.refusals.last()
    }

    /// Takes `ownership` of the data directory: the listener's address is recorded
    /// now if it runs, and at each bind from now on.
    pub(crate) fn own(&self, ownership: Ownership) {
        let ownership = Arc::new(ownership);
        *lock(&self.owner) = Some(ownership.clone());
        // After storing it: a bind from now on records itself.
        if let Some(addr) = self.addr() {
            publish(&ownership, addr);
        }
    }

    pub(crate) fn addr(&self) -> Option<SocketAddr> {
        *lock(&self.addr)
    }
}
