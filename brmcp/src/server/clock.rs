//! The harness's one source of time: rate-limit refills, call-key replay windows (the
//! ledger's `now`) and the chat auto-reply throttle all read a [`Clock`], so a test moves
//! them together with a [`ManualClock`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use brmcp_adapters::wire::UnixTime;

/// Wall-clock time since the unix epoch.
pub trait Clock: Send + Sync + 'static {
    /// Time since 1970-01-01T00:00:00Z.
    fn since_epoch(&self) -> Duration;

    /// Now in whole unix seconds, as the ledger takes it.
    fn unix(&self) -> UnixTime {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_it() {
        let clock = ManualClock::at_unix(1_000);
        let other = clock.clone();
        assert_eq!(clock.unix(), UnixTime(1_000));
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(other.since_epoch(), Duration::from_millis(1_001_500));
        assert_eq!(other.unix(), UnixTime(1_001));
        other.set(Duration::from_secs(5));
        assert_eq!(clock.unix(), UnixTime(5));
    }

    #[test]
    fn system_clock_is_after_2025() {
        assert!(SystemClock.unix().0 > 1_735_689_600);
    }
}
