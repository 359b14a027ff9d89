//! Call keys (`_meta["brmcp/callKey"]`, WIRE.md §10) and what binds a key to one call.
//!
//! A caller retries a paid call with the same key; the server executes and charges at
//! most once per (caller, key) and replays the stored outcome for [`OUTCOME_TTL_SECS`].
//! The key is bound to the tool and an [`ArgsHash`] of the arguments, so a key reused for
//! a different call is refused instead of answered with an unrelated outcome (the Go
//! harness's weakness §4.10.5).

use std::fmt;

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use brmcp_adapters::protocol::CALL_KEY_META;
use brmcp_adapters::protocol::{canonical_arguments, canonical_value};

pub use brmcp_adapters::protocol::{MAX_CALL_KEY_LEN, MIN_CALL_KEY_LEN, OUTCOME_TTL_SECS};

/// Largest tool result kept for replay, in bytes: 1 MiB.
///
/// Bison Relay's payload guidance per PM; it bounds the database's growth per key. A
/// keyed call whose result is larger still runs and charges once, but a duplicate gets
/// [`Charge::OutcomeNotRetained`](super::Charge::OutcomeNotRetained) instead of a replay.
pub const MAX_OUTCOME_BYTES: usize = 1 << 20;

/// A caller's call key: 8 to 128 bytes of UTF-8.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CallKey(String);

/// Why a string is not a call key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallKeyError {
    /// The key is shorter than [`MIN_CALL_KEY_LEN`] or longer than [`MAX_CALL_KEY_LEN`].
    #[error("call key is {len} bytes, not {MIN_CALL_KEY_LEN} to {MAX_CALL_KEY_LEN}")]
    Length {
        /// The key's length in bytes.
        len: usize,
    },
}

impl CallKey {
    /// The key `key`, if its length is in bounds.
    ///
    /// # Errors
    ///
    /// [`CallKeyError::Length`] outside 8..=128 bytes. WIRE.md says such a key is
    /// ignored (the call is unkeyed); that choice is the harness's.
    pub fn new(key: &str) -> Result<Self, CallKeyError> {
        if (MIN_CALL_KEY_LEN..=MAX_CALL_KEY_LEN).contains(&key.len()) {
            Ok(Self(key.to_owned()))
        } else {
            Err(CallKeyError::Length { len: key.len() })
        }
    }

    /// The key's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// SHA-256 of a call's arguments in a canonical JSON form.
///
/// Canonical: object keys sorted by their bytes at every depth, no whitespace, scalars as
/// serde_json writes them. So `{"a":1,"b":2}` and `{"b":2,"a":1}` hash alike, whatever
/// order the client sent and whether serde_json preserves order. Absent arguments hash
/// like `{}`: MCP treats them the same.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArgsHash([u8; 32]);

impl ArgsHash {
    /// The hash of a `tools/call`'s `arguments`.
    pub fn of_arguments(args: Option<&Map<String, Value>>) -> Self {
        Self::of_canonical(&canonical_arguments(args))
    }

    /// The hash of any JSON value (for a harness that holds arguments as a [`Value`]).
    pub fn of_value(value: &Value) -> Self {
        Self::of_canonical(&canonical_value(value))
    }

    fn of_canonical(text: &str) -> Self {
        Self(Sha256::digest(text.as_bytes()).into())
    }

    /// The hash with these bytes (for a store that kept them).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The hash's bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for ArgsHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ArgsHash(")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn key_length_is_counted_in_bytes() {
        assert!(CallKey::new("1234567").is_err());
        assert_eq!(CallKey::new("12345678").unwrap().as_str(), "12345678");
        assert!(CallKey::new(&"k".repeat(128)).is_ok());
        assert_eq!(
            CallKey::new(&"k".repeat(129)),
            Err(CallKeyError::Length { len: 129 })
        );
        // Four characters, eight bytes.
        assert!(CallKey::new("éééé").is_ok());
        assert_eq!(
            CallKey::new("é").unwrap_err().to_string(),
            "call key is 2 bytes, not 8 to 128"
        );
    }

    #[test]
    fn args_hash_ignores_key_order_at_every_depth() {
        let a = json!({"b": 2, "a": {"y": [1, {"q": 1, "p": 2}], "x": "s"}});
        let b = json!({"a": {"x": "s", "y": [1, {"p": 2, "q": 1}]}, "b": 2});
        assert_eq!(ArgsHash::of_value(&a), ArgsHash::of_value(&b));
        assert_eq!(
            ArgsHash::of_arguments(a.as_object()),
            ArgsHash::of_value(&a)
        );
    }

    #[test]
    fn args_hash_tells_values_and_arrays_apart() {
        let base = ArgsHash::of_value(&json!({"a": [1, 2]}));
        assert_ne!(base, ArgsHash::of_value(&json!({"a": [2, 1]})));
        assert_ne!(base, ArgsHash::of_value(&json!({"a": [1, 2], "b": null})));
        assert_ne!(base, ArgsHash::of_value(&json!({"a": "[1,2]"})));
    }

    #[test]
    fn absent_arguments_hash_like_an_empty_object() {
        assert_eq!(ArgsHash::of_arguments(None), ArgsHash::of_value(&json!({})));
    }
}
