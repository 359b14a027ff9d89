//! Per-caller token buckets for `tools/call`.
//!
//! Each caller has a bucket of `calls_per_minute` tokens that starts full and refills
//! continuously at `calls_per_minute / 60` tokens a second, up to full; a call takes one
//! token or is refused. As the Go harness, only `tools/call` of harness tools spends
//! tokens (not `initialize`, `tools/list` or `ping`), a duplicate that waits for or
//! replays a keyed call spends none, and a call refused for payment has spent one.
//!
//! The map of buckets is bounded: a bucket that has refilled to full holds no
//! information, so once the map reaches [`PRUNE_AT`] callers, full buckets are dropped.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::time::Duration;

use brmcp_adapters::PeerId;

/// Default calls per minute per caller: 30, as the Go harness.
pub const DEFAULT_CALLS_PER_MINUTE: u32 = 30;

/// Callers tracked before full buckets are pruned.
///
/// Allowed callers are few (an allowlist), so this is only reached with an open
/// predicate; pruning keeps memory proportional to callers active within a minute.
pub const PRUNE_AT: usize = 4096;

/// The text of a tool result refused by the rate limit (the Go harness's).
pub const RATE_LIMITED: &str = "rate limited; retry later";

/// Token buckets per caller. Time is passed in (time since the epoch).
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: AtomicU32,
    buckets: Mutex<HashMap<PeerId, Bucket>>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Duration,
}

impl RateLimiter {
    /// Buckets of `calls_per_minute` tokens; 0 means [`DEFAULT_CALLS_PER_MINUTE`].
    pub fn new(calls_per_minute: u32) -> Self {
        Self {
            per_minute: AtomicU32::new(effective(calls_per_minute)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Calls per minute per caller.
    pub fn calls_per_minute(&self) -> u32 {
        self.per_minute.load(Relaxed)
    }

    /// Changes the rate while serving (0 means the default); returns the old one.
    /// Buckets keep their tokens, capped at the new capacity: lowering the rate takes
    /// effect at once, raising it fills buckets at the new speed.
    pub fn set_calls_per_minute(&self, calls_per_minute: u32) -> u32 {
        self.per_minute.swap(effective(calls_per_minute), Relaxed)
    }

    /// Takes one token from `caller`'s bucket at time `now`; `false` if it has none.
    pub fn try_take(&self, caller: &PeerId, now: Duration) -> bool {
        let capacity = f64::from(self.calls_per_minute());
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= PRUNE_AT && !buckets.contains_key(caller) {
            buckets.retain(|_, b| refilled(*b, now, capacity) < capacity);
        }
        let bucket = buckets.entry(*caller).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        bucket.tokens = refilled(*bucket, now, capacity);
        bucket.at = bucket.at.max(now);
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Callers currently tracked.
    pub fn tracked(&self) -> usize {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// The rate `calls_per_minute` stands for: 0 is the default.
fn effective(calls_per_minute: u32) -> u32 {
    if calls_per_minute == 0 {
        DEFAULT_CALLS_PER_MINUTE
    } else {
        calls_per_minute
    }
}

/// A bucket's tokens at `now` for `capacity` (a clock going backwards refills nothing).
fn refilled(bucket: Bucket, now: Duration, capacity: f64) -> f64 {
    let elapsed = now.saturating_sub(bucket.at).as_secs_f64();
    (bucket.tokens + elapsed * capacity / 60.0).min(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: PeerId = PeerId::from_bytes([1; 32]);
    const B: PeerId = PeerId::from_bytes([2; 32]);

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn two_per_minute_refuses_the_third_and_is_per_caller() {
        let limiter = RateLimiter::new(2);
        assert!(limiter.try_take(&A, secs(100.0)));
        assert!(limiter.try_take(&A, secs(100.0)));
        assert!(!limiter.try_take(&A, secs(100.0)));
        assert!(limiter.try_take(&B, secs(100.0)));
    }

    #[test]
    fn refills_continuously_up_to_capacity() {
        let limiter = RateLimiter::new(30); // one token every 2 s
        for _ in 0..30 {
            assert!(limiter.try_take(&A, secs(0.0)));
        }
        assert!(!limiter.try_take(&A, secs(1.9)));
        assert!(limiter.try_take(&A, secs(2.0)));
        assert!(!limiter.try_take(&A, secs(2.0)));
        // An hour idle refills to 30, not more.
        let later = 3_600.0;
        for _ in 0..30 {
            assert!(limiter.try_take(&A, secs(later)));
        }
        assert!(!limiter.try_take(&A, secs(later)));
    }

    #[test]
    fn a_lowered_rate_applies_at_once_to_full_buckets() {
        let limiter = RateLimiter::new(30);
        assert!(limiter.try_take(&A, secs(0.0)));
        assert_eq!(limiter.set_calls_per_minute(2), 30);
        // A held 29 tokens; the new capacity caps it at 2.
        assert!(limiter.try_take(&A, secs(0.0)));
        assert!(limiter.try_take(&A, secs(0.0)));
        assert!(!limiter.try_take(&A, secs(0.0)));
        assert_eq!(limiter.set_calls_per_minute(0), 2);
        assert_eq!(limiter.calls_per_minute(), DEFAULT_CALLS_PER_MINUTE);
    }

    #[test]
    fn zero_means_the_default() {
        assert_eq!(
            RateLimiter::new(0).calls_per_minute(),
            DEFAULT_CALLS_PER_MINUTE
        );
    }

    #[test]
    fn a_clock_going_backwards_refills_nothing() {
        let limiter = RateLimiter::new(1);
        assert!(limiter.try_take(&A, secs(100.0)));
        assert!(!limiter.try_take(&A, secs(50.0)));
        assert!(!limiter.try_take(&A, secs(100.0)));
        assert!(limiter.try_take(&A, secs(160.0)));
    }

    #[test]
    fn full_buckets_are_pruned_at_the_bound() {
        let limiter = RateLimiter::new(60);
        for i in 0..PRUNE_AT {
            let mut bytes = [0; 32];
            bytes[..8].copy_from_slice(&(i as u64).to_be_bytes());
            assert!(limiter.try_take(&PeerId::from_bytes(bytes), secs(0.0)));
        }
        assert_eq!(limiter.tracked(), PRUNE_AT);
        // A second later every bucket has refilled its token: all are prunable.
        assert!(limiter.try_take(&A, secs(1.0)));
        assert_eq!(limiter.tracked(), 1);
    }
}
