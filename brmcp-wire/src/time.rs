//! Time as the envelope sees it: whole unix seconds, passed in by the caller.

/// A point in time in whole seconds since the unix epoch.
///
/// The crate has no clock: every operation that depends on time takes `now` as a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct UnixTime(pub i64);

impl UnixTime {
    /// The number of seconds since the epoch.
    pub const fn secs(self) -> i64 {
        self.0
    }

    /// `self + secs`, saturating at the ends of the range.
    pub const fn saturating_add(self, secs: u64) -> Self {
        let secs = if secs > i64::MAX as u64 {
            i64::MAX
        } else {
            secs as i64
        };
        Self(self.0.saturating_add(secs))
    }
}

/// Whether a part stamped `exp` has expired at `now` (WIRE.md §4, field `exp`).
///
/// `exp` of zero or below means no deadline; otherwise the part expires strictly after
/// second `exp`, so a part is still valid during the second it names.
pub const fn is_expired(exp: i64, now: UnixTime) -> bool {
    exp > 0 && now.0 > exp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_negative_deadlines_never_expire() {
        assert!(!is_expired(0, UnixTime(i64::MAX)));
        assert!(!is_expired(-5, UnixTime(i64::MAX)));
    }

    #[test]
    fn deadline_is_inclusive_of_its_second() {
        assert!(!is_expired(100, UnixTime(99)));
        assert!(!is_expired(100, UnixTime(100)));
        assert!(is_expired(100, UnixTime(101)));
    }

    #[test]
    fn saturating_add_clamps() {
        assert_eq!(
            UnixTime(i64::MAX - 1).saturating_add(10),
            UnixTime(i64::MAX)
        );
        assert_eq!(UnixTime(5).saturating_add(u64::MAX), UnixTime(i64::MAX));
        assert_eq!(UnixTime(5).saturating_add(10), UnixTime(15));
    }
}
