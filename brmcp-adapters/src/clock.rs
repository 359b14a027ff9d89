//! The one source of wall-clock time for both roles.
//!
//! Timers (idle expiry, request timeouts, the reassembly deadline) run on tokio's clock;
//! the `exp` stamped on and checked against parts, the harness's rate-limit refills and
//! replay windows, and the bridge's spending day all read a [`Clock`]. [`TokioClock`]
//! derives unix time from tokio's clock, so a test with paused time controls both;
//! [`ManualClock`] moves only when a test tells it to.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use brmcp_wire::UnixTime;

/// Wall-clock time since the unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// Time since 1970-01-01T00:00:00Z.
    fn since_epoch(&self) -> Duration;

    /// Now, in whole unix seconds.
    fn now(&self) -> UnixTime {
        UnixTime(i64::try_from(self.since_epoch().as_secs()).unwrap_or(i64::MAX))
    }
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn since_epoch(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// Unix time that advances with tokio's clock (and so with `tokio::time::pause`).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start: Duration,
    anchor: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading the system's time now and advancing with tokio's clock.
    pub fn new() -> Self {
        Self::from_epoch(SystemClock.since_epoch())
    }

    /// A clock reading `start` now and advancing with tokio's clock.
    pub fn starting_at(start: UnixTime) -> Self {
        Self::from_epoch(Duration::from_secs(u64::try_from(start.0).unwrap_or(0)))
    }

    fn from_epoch(start: Duration) -> Self {
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
    fn since_epoch(&self) -> Duration {
        self.start.saturating_add(self.anchor.elapsed())
    }
}

/// A clock that moves only when told to; clones share one time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    micros: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading `start` (since the epoch).
    pub fn new(start: Duration) -> Self {
        let clock = Self::default();
        clock.set(start);
        clock
    }

    /// A clock reading `secs` unix seconds.
    pub fn at_unix(secs: u64) -> Self {
        Self::new(Duration::from_secs(secs))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.micros.fetch_add(micros(by), Ordering::SeqCst);
    }

    /// Sets the clock to `to` (since the epoch); it may go backwards.
    pub fn set(&self, to: Duration) {
        self.micros.store(micros(to), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn since_epoch(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::SeqCst))
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Sleeps until `at`; never wakes for `None` (a timer that is not set).
pub(crate) async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_it() {
        let clock = ManualClock::at_unix(1_000);
        let other = clock.clone();
        assert_eq!(clock.now(), UnixTime(1_000));
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(other.since_epoch(), Duration::from_millis(1_001_500));
        assert_eq!(other.now(), UnixTime(1_001));
        other.set(Duration::from_secs(5));
        assert_eq!(clock.now(), UnixTime(5));
    }

    #[test]
    fn system_clock_is_after_2025() {
        assert!(SystemClock.now().0 > 1_735_689_600);
    }

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_advances_with_paused_time() {
        let clock = TokioClock::starting_at(UnixTime(1_000));
        tokio::time::advance(Duration::from_millis(2_500)).await;
        assert_eq!(clock.now(), UnixTime(1_002));
    }
}
