//! A bot's rate limit per caller: the `_meta` key of its `initialize` result.
//!
//! A bridge's agents share one caller at a bot (the bridge's identity), so the bridge
//! divides the bot's limit among them. The limit is the bot's setting; a bot says it
//! here, and a bridge that is not told (a Go bot) assumes its own default. A peer that
//! sends a value of another type or out of range is read as not saying, and told so.

use rmcp::model::JsonObject;
use serde_json::Value;

/// The `_meta` key of an `initialize` result: the calls per minute the bot allows each
/// caller, a whole number from 1 to `u32::MAX`.
pub const CALLS_PER_MINUTE_META: &str = "brmcp/callsPerMinute";

/// The text of a tool result refused by the rate limit (the Go harness's).
pub const RATE_LIMITED: &str = "rate limited; retry later";

/// Why an `initialize` result's [`CALLS_PER_MINUTE_META`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CallsPerMinuteError {
    /// The key is there and not a whole number from 1 to `u32::MAX`.
    #[error("brmcp/callsPerMinute is not a whole number from 1 to 4294967295")]
    OutOfRange,
}

/// The calls per minute the `initialize` result's `_meta` says its bot allows each
/// caller; `Ok(None)` without the key (a Go bot).
///
/// # Errors
/// [`CallsPerMinuteError::OutOfRange`] for a value of another type or range.
pub fn calls_per_minute(meta: Option<&JsonObject>) -> Result<Option<u32>, CallsPerMinuteError> {
    match meta.and_then(|m| m.get(CALLS_PER_MINUTE_META)) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or(CallsPerMinuteError::OutOfRange),
        Some(_) => Err(CallsPerMinuteError::OutOfRange),
    }
}

/// Adds the bot's rate limit to an `initialize` result's `_meta`.
pub fn advertise_calls_per_minute(meta: &mut JsonObject, calls_per_minute: u32) {
    meta.insert(CALLS_PER_MINUTE_META.to_owned(), calls_per_minute.into());
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_limit_is_read_strictly_and_absent_means_not_said() {
        let meta = |v: Value| -> JsonObject { serde_json::from_value(v).unwrap() };
        assert_eq!(calls_per_minute(None), Ok(None));
        assert_eq!(calls_per_minute(Some(&meta(json!({})))), Ok(None));
        assert_eq!(
            calls_per_minute(Some(&meta(json!({"brmcp/callsPerMinute": 6000})))),
            Ok(Some(6000))
        );
        assert_eq!(
            calls_per_minute(Some(&meta(json!({"brmcp/callsPerMinute": u32::MAX})))),
            Ok(Some(u32::MAX))
        );
        for bad in [
            json!(0),
            json!(-1),
            json!(1.5),
            json!(u64::from(u32::MAX) + 1),
            json!("30"),
            json!(null),
            json!(true),
        ] {
            assert_eq!(
                calls_per_minute(Some(&meta(json!({ "brmcp/callsPerMinute": bad })))),
                Err(CallsPerMinuteError::OutOfRange),
                "{bad}"
            );
        }
        let mut written = JsonObject::new();
        advertise_calls_per_minute(&mut written, 42);
        assert_eq!(calls_per_minute(Some(&written)), Ok(Some(42)));
    }
}
