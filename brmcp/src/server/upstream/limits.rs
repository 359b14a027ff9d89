//! The bounds on what one upstream may cost: time, memory and the messages its
//! behaviour makes the operator's client send. [`UpstreamLimits`] holds the ones a
//! test (or an embedder) may shorten; the defaults are the named constants here.

use std::time::Duration;

use brmcp_adapters::RouterConfig;

use crate::server::max_message_bytes;

/// How long a forwarded call may go without an answer or progress: an upstream that
/// hangs must not hold the caller (and the charge) forever. Each progress of the call
/// starts it again, so a job that reports progress runs to its end.
pub const CALL_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest a forwarded call may take in all, progress or not: a charge is not
/// held open (nor a caller kept waiting) for more than an hour.
pub const CALL_MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// The least time between two progress notifications relayed for one call: each is a
/// PM the operator's client sends, so an upstream's flood becomes at most one a
/// second (the latest state; the ones between are dropped, as progress allows).
pub const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// The least time between two listings of an upstream after it says its lists
/// changed: the notifications of a window are one re-listing, and callers are told at
/// most once per window.
pub const RELIST_WINDOW: Duration = Duration::from_secs(2);

/// How long a companion tool may take to answer a call's price: the caller waits for
/// it before anything is charged, and a price is a quick answer from the arguments
/// alone. Past it the call is refused, uncharged.
pub const PRICE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one listing of an upstream (all its pages) may take once it is connected.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// The largest message taken from an upstream, in bytes: the largest JSON-RPC message
/// the serving router can send a caller ([`max_message_bytes`]). It bounds an
/// upstream's stdio line and HTTP body: a longer answer could not be delivered, and
/// reading it would hold memory for nothing. (An answer under it whose result is still
/// too large for the caller's response is refused and refunded by the harness.)
pub fn max_upstream_message(router: &RouterConfig) -> usize {
    max_message_bytes(router).max(1)
}

/// The bounds the supervisor applies to every upstream. `Default` is the constants of
/// this module and the serving router's default chunk length.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct UpstreamLimits {
    /// See [`CALL_IDLE_TIMEOUT`].
    pub call_idle_timeout: Duration,
    /// See [`CALL_MAX_TIMEOUT`].
    pub call_max_timeout: Duration,
    /// See [`PROGRESS_INTERVAL`].
    pub progress_interval: Duration,
    /// See [`RELIST_WINDOW`].
    pub relist_window: Duration,
    /// See [`LIST_TIMEOUT`].
    pub list_timeout: Duration,
    /// See [`max_upstream_message`].
    pub max_message_bytes: usize,
}

impl Default for UpstreamLimits {
    fn default() -> Self {
        Self {
            call_idle_timeout: CALL_IDLE_TIMEOUT,
            call_max_timeout: CALL_MAX_TIMEOUT,
            progress_interval: PROGRESS_INTERVAL,
            relist_window: RELIST_WINDOW,
            list_timeout: LIST_TIMEOUT,
            max_message_bytes: max_upstream_message(&RouterConfig::server()),
        }
    }
}
