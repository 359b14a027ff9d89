//! Per-caller token buckets for `tools/call`.
//!
//! Each caller has a bucket of `calls_per_minute` tokens that starts full and refills
//! continuously at `calls_per_minute / 60` tokens a second, up to full; a call takes one
//! token or is refused. As the Go harness, only `tools/call` of harness tools spends
//! tokens (not `initialize`, `tools/list` or `ping`), and a duplicate that waits for or
//! replays a keyed call spends none.
//!
//! The limit counts runs, not refusals. A call refused after taking its token (a price
//! that fails, a store failure) gives it back. A call refused `payment_required` keeps
//! its token as a reservation of its run, for [`RESERVATION_TTL`]: its reissue (the same
//! call key, or for a call without one the same tool and arguments) takes the
//! reservation instead of a token, so a call the caller has paid for is never refused
//! by the rate limit, however many calls the caller started meanwhile. A reservation
//! not used in time lapses (its token is not returned: by then the bucket has refilled,
//! which takes a minute at most); one reservation serves at most [`MAX_PAYMENT_ROUNDS`]
//! `payment_required` answers, so polling a call that is never paid for is still
//! limited.
//!
//! The map of buckets is bounded: a bucket that has refilled to full and holds no
//! reservation holds no information, so once the map reaches [`PRUNE_AT`] callers, such
//! buckets are dropped. Reservations per caller are bounded by its tokens.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use brmcp_adapters::PeerId;

use super::call_key::{ArgsHash, CallKey};

/// Default calls per minute per caller: 30, as the Go harness.
pub const DEFAULT_CALLS_PER_MINUTE: u32 = 30;

/// Callers tracked before full buckets are pruned.
///
/// Allowed callers are few (an allowlist), so this is only reached with an open
/// predicate; pruning keeps memory proportional to callers active within a minute.
pub(crate) const PRUNE_AT: usize = 4096;

pub use brmcp_adapters::protocol::RATE_LIMITED;

/// How long a call refused `payment_required` keeps its run reserved: 10 minutes, the
/// longest a caller waits for a call (the routers' default request timeout). A bridge
/// pays and reissues within seconds, or after its user approves.
pub(crate) const RESERVATION_TTL: Duration = Duration::from_secs(600);

/// The `payment_required` answers one reservation serves: 16, more than the brmcp
/// bridge's polls (5 by default) while its tip is on its way. Past it the next round
/// takes a token of its own, so a caller polling a call it never pays for is limited.
pub(crate) const MAX_PAYMENT_ROUNDS: u32 = 16;

/// Token buckets per caller. Time is passed in (time since the epoch).
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: AtomicU32,
    buckets: Mutex<HashMap<PeerId, Bucket>>,
}

#[derive(Debug, Clone)]
struct Bucket {
    tokens: f64,
    at: Duration,
    /// Runs reserved by calls refused `payment_required`, each holding a token.
    reserved: HashMap<CallRef, Reservation>,
}

/// Which call a reservation is for: its key, or for a call without one its tool and
/// arguments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CallRef {
    /// A keyed call.
    Key(CallKey),
    /// A call without a key.
    Args(Arc<str>, ArgsHash),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Reservation {
    /// When it lapses and its token comes back.
    until: Duration,
    /// `payment_required` answers it has served.
    rounds: u32,
}

/// What a call took from its caller's rate: a token, or the reservation of an earlier
/// round of the same call. Hand it back with [`RateLimiter::reserve`] or
/// [`RateLimiter::give_back`] when the call does not run; a call that runs keeps it.
#[derive(Debug, Clone, Copy, PartialEq)]
#[must_use]
pub(crate) struct Ticket(Option<Reservation>);

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

    fn buckets(&self) -> MutexGuard<'_, HashMap<PeerId, Bucket>> {
        self.buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `caller`'s bucket brought to `now`: refilled, lapsed reservations dropped.
    fn bucket<'a>(
        &self,
        buckets: &'a mut HashMap<PeerId, Bucket>,
        caller: &PeerId,
        now: Duration,
    ) -> &'a mut Bucket {
        let capacity = f64::from(self.calls_per_minute());
        if buckets.len() >= PRUNE_AT && !buckets.contains_key(caller) {
            buckets.retain(|_, b| {
                b.reserved.values().any(|r| r.until > now) || refilled(b, now, capacity) < capacity
            });
        }
        let bucket = buckets.entry(*caller).or_insert(Bucket {
            tokens: capacity,
            at: now,
            reserved: HashMap::new(),
        });
        bucket.tokens = refilled(bucket, now, capacity);
        bucket.at = bucket.at.max(now);
        bucket.reserved.retain(|_, r| r.until > now);
        bucket
    }

    /// Takes one token from `caller`'s bucket at time `now`; `false` if it has none.
    pub fn try_take(&self, caller: &PeerId, now: Duration) -> bool {
        let mut buckets = self.buckets();
        take_token(self.bucket(&mut buckets, caller, now))
    }

    /// What call `call` of `caller` runs on: the reservation an earlier
    /// `payment_required` round of it left, else a token; `None` when it has neither.
    pub(crate) fn take_for(
        &self,
        caller: &PeerId,
        call: &CallRef,
        now: Duration,
    ) -> Option<Ticket> {
        let mut buckets = self.buckets();
        let bucket = self.bucket(&mut buckets, caller, now);
        if let Some(reservation) = bucket.reserved.remove(call) {
            return Some(Ticket(Some(reservation)));
        }
        take_token(bucket).then_some(Ticket(None))
    }

    /// Call `call`, which took `ticket`, was refused `payment_required`: its ticket is
    /// kept as the reservation of its run, for its reissue (until [`RESERVATION_TTL`]
    /// after its first round, for at most [`MAX_PAYMENT_ROUNDS`] rounds; then it is
    /// spent).
    pub(crate) fn reserve(&self, caller: &PeerId, call: CallRef, ticket: Ticket, now: Duration) {
        let reservation = match ticket.0 {
            None => Reservation {
                until: now.saturating_add(RESERVATION_TTL),
                rounds: 1,
            },
            Some(r) => Reservation {
                until: r.until,
                rounds: r.rounds.saturating_add(1),
            },
        };
        if reservation.rounds > MAX_PAYMENT_ROUNDS {
            return;
        }
        let mut buckets = self.buckets();
        let bucket = self.bucket(&mut buckets, caller, now);
        if let Some(replaced) = bucket.reserved.insert(call, reservation) {
            // Two rounds of one call at once: the other's token comes back.
            let capacity = f64::from(self.calls_per_minute());
            if replaced.until > now {
                bucket.tokens = (bucket.tokens + 1.0).min(capacity);
            }
        }
    }

    /// A call that took `ticket` was refused before it could run, not for payment: a
    /// token goes back, a reservation stays for the call's reissue.
    pub(crate) fn give_back(&self, caller: &PeerId, call: CallRef, ticket: Ticket, now: Duration) {
        let capacity = f64::from(self.calls_per_minute());
        let mut buckets = self.buckets();
        let bucket = self.bucket(&mut buckets, caller, now);
        match ticket.0 {
            None => bucket.tokens = (bucket.tokens + 1.0).min(capacity),
            Some(reservation) => {
                if let Some(replaced) = bucket.reserved.insert(call, reservation)
                    && replaced.until > now
                {
                    bucket.tokens = (bucket.tokens + 1.0).min(capacity);
                }
            }
        }
    }

    /// Callers currently tracked.
    pub fn tracked(&self) -> usize {
        self.buckets().len()
    }
}

/// Takes one token from `bucket`; `false` if it has none.
fn take_token(bucket: &mut Bucket) -> bool {
    if bucket.tokens >= 1.0 {
        bucket.tokens -= 1.0;
        true
    } else {
        false
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
fn refilled(bucket: &Bucket, now: Duration, capacity: f64) -> f64 {
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

    fn key(k: &str) -> CallRef {
        CallRef::Key(CallKey::new(k).unwrap())
    }

    #[test]
    fn a_payment_round_reserves_the_run_for_its_reissue() {
        let limiter = RateLimiter::new(2);
        let now = secs(100.0);
        let a = limiter.take_for(&A, &key("call-key-a"), now).unwrap();
        let b = limiter.take_for(&A, &key("call-key-b"), now).unwrap();
        // Out of tokens: a third call is refused before any payment.
        assert!(limiter.take_for(&A, &key("call-key-c"), now).is_none());
        limiter.reserve(&A, key("call-key-a"), a, now);
        limiter.reserve(&A, key("call-key-b"), b, now);
        // Polls before the tip arrives reuse the reservation...
        for _ in 0..5 {
            let poll = limiter.take_for(&A, &key("call-key-a"), now).unwrap();
            limiter.reserve(&A, key("call-key-a"), poll, now);
        }
        // ...and the paid reissues run though the bucket is empty.
        assert!(limiter.take_for(&A, &key("call-key-a"), now).is_some());
        assert!(limiter.take_for(&A, &key("call-key-b"), now).is_some());
        assert!(limiter.take_for(&A, &key("call-key-a"), now).is_none());
    }

    #[test]
    fn a_reservation_lapses_and_polls_are_bounded() {
        let limiter = RateLimiter::new(1);
        let now = secs(0.0);
        let t = limiter.take_for(&A, &key("call-key-a"), now).unwrap();
        limiter.reserve(&A, key("call-key-a"), t, now);
        assert!(!limiter.try_take(&A, now));
        // Never paid for: past its time the reissue needs a token of its own.
        let lapsed = now + RESERVATION_TTL + secs(1.0);
        assert!(limiter.take_for(&A, &key("call-key-a"), lapsed).is_some());
        assert!(limiter.take_for(&A, &key("call-key-a"), lapsed).is_none());

        // Polled without end: after MAX_PAYMENT_ROUNDS rounds the next needs a token.
        let limiter = RateLimiter::new(1);
        let mut ticket = limiter.take_for(&A, &key("call-key-c"), now).unwrap();
        for _ in 1..MAX_PAYMENT_ROUNDS {
            limiter.reserve(&A, key("call-key-c"), ticket, now);
            ticket = limiter.take_for(&A, &key("call-key-c"), now).unwrap();
        }
        limiter.reserve(&A, key("call-key-c"), ticket, now);
        let last = limiter.take_for(&A, &key("call-key-c"), now).unwrap();
        limiter.reserve(&A, key("call-key-c"), last, now);
        assert!(limiter.take_for(&A, &key("call-key-c"), now).is_none());
    }

    #[test]
    fn a_refusal_not_for_payment_gives_its_token_back() {
        let limiter = RateLimiter::new(1);
        let now = secs(0.0);
        let args = CallRef::Args("t".into(), ArgsHash::of_value(&serde_json::json!({})));
        let t = limiter.take_for(&A, &args, now).unwrap();
        limiter.give_back(&A, args.clone(), t, now);
        assert!(limiter.take_for(&A, &args, now).is_some());
        assert!(limiter.take_for(&A, &args, now).is_none());
    }
}
