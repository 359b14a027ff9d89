//! Wall-clock time for envelope deadlines.
//!
//! Timers (idle expiry, request timeouts, the reassembly deadline) run on tokio's clock;
//! the `exp` stamped on and checked against parts is unix seconds from a [`Clock`].
//! [`TokioClock`] derives unix time from tokio's clock, so a test with paused time
//! controls both.

use std::time::{SystemTime, UNIX_EPOCH};

use brmcp_wire::UnixTime;

/// A source of unix time in whole seconds.
pub trait Clock: Send + Sync + 'static {
    /// Now, in whole unix seconds.
    fn now(&self) -> UnixTime;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> UnixTime {
        let secs = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        UnixTime(i64::try_from(secs).unwrap_or(i64::MAX))
    }
}

/// Unix time that advances with tokio's clock (and so with `tokio::time::pause`).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: UnixTime,
    anchor: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading the system's unix time now and advancing with tokio's clock.
    pub fn new() -> Self {
        Self::starting_at(SystemClock.now())
    }

    /// A clock reading `start` now and advancing with tokio's clock.
    pub fn starting_at(start: UnixTime) -> Self {
        Self {
            start,
            anchor: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> UnixTime {
        self.start.saturating_add(self.anchor.elapsed().as_secs())
    }
}

/// Sleeps until `at`; never wakes for `None` (a timer that is not set).
pub(crate) async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
