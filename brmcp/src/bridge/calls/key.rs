//! What identifies a call in the journal: the key sent to the bot (fresh, or derived
//! from the agent's own `brmcp/callKey`) and the digest of its arguments.

use rmcp::model::RequestMetaObject;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use brmcp_adapters::protocol::{
    CALL_KEY_META, MAX_CALL_KEY_LEN, MIN_CALL_KEY_LEN, canonical_arguments,
};

/// Shortest call key an agent may give, in bytes: the harness's rule (WIRE.md §10).
pub(crate) const MIN_AGENT_KEY_LEN: usize = MIN_CALL_KEY_LEN;

/// Longest call key an agent may give, in bytes: the harness's rule (WIRE.md §10).
pub(crate) const MAX_AGENT_KEY_LEN: usize = MAX_CALL_KEY_LEN;

/// Bytes of the key sent to the bot for an agent's own key: 16 (32 hex digits), as
/// many as a fresh key has.
const DERIVED_KEY_BYTES: usize = 16;

/// What the derived key's hash starts with, so it is never the hash of anything else.
const DERIVED_KEY_DOMAIN: &[u8] = b"brmcp bridge agent call key\0";

/// Why an agent's `brmcp/callKey` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum KeyError {
    /// The key is not a JSON string.
    #[error("brmcp/callKey must be a string")]
    NotString,
    /// The key is shorter or longer than the harness allows.
    #[error("brmcp/callKey is {len} bytes, not {MIN_AGENT_KEY_LEN} to {MAX_AGENT_KEY_LEN}")]
    Length {
        /// Its length in bytes.
        len: usize,
    },
}

/// The agent's own call key in the request's `_meta`, if it gave one.
pub(crate) fn agent_key(meta: &RequestMetaObject) -> Result<Option<String>, KeyError> {
    let Some(value) = meta.get(CALL_KEY_META) else {
        return Ok(None);
    };
    let Value::String(key) = value else {
        return Err(KeyError::NotString);
    };
    if (MIN_AGENT_KEY_LEN..=MAX_AGENT_KEY_LEN).contains(&key.len()) {
        Ok(Some(key.clone()))
    } else {
        Err(KeyError::Length { len: key.len() })
    }
}

/// The key sent to the bot for `agent`'s own key `key`: deterministic, so it is the
/// same after a restart, and scoped to the agent, so two agents giving one key make
/// two calls (the bot sees one caller, the bridge).
pub(crate) fn derived_key(agent: &str, key: &str) -> String {
    let mut hash = Sha256::new();
    hash.update(DERIVED_KEY_DOMAIN);
    hash.update((agent.len() as u64).to_be_bytes());
    hash.update(agent.as_bytes());
    hash.update(key.as_bytes());
    hex::encode(&hash.finalize()[..DERIVED_KEY_BYTES])
}

/// SHA-256 of a call's arguments in the harness's canonical JSON (keys sorted by
/// their bytes at every depth, no whitespace; absent arguments as `{}`), so one
/// call's digest does not depend on the order the agent wrote its keys in.
pub(crate) fn args_digest(args: Option<&Map<String, Value>>) -> [u8; 32] {
    Sha256::digest(canonical_arguments(args).as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn meta(value: Value) -> RequestMetaObject {
        let mut meta = RequestMetaObject::new();
        meta.insert(CALL_KEY_META.into(), value);
        meta
    }

    #[test]
    fn an_agents_key_follows_the_harness_rules_strictly() {
        assert_eq!(agent_key(&RequestMetaObject::new()), Ok(None));
        assert_eq!(
            agent_key(&meta(json!("12345678"))),
            Ok(Some("12345678".into()))
        );
        assert_eq!(
            agent_key(&meta(json!("1234567"))),
            Err(KeyError::Length { len: 7 })
        );
        assert_eq!(
            agent_key(&meta(json!("é".repeat(65)))),
            Err(KeyError::Length { len: 130 }),
            "counted in bytes"
        );
        assert_eq!(
            agent_key(&meta(json!(12_345_678))),
            Err(KeyError::NotString)
        );
        assert_eq!(agent_key(&meta(Value::Null)), Err(KeyError::NotString));
    }

    #[test]
    fn derived_keys_are_stable_and_scoped_to_the_agent() {
        let a = derived_key("ci", "order-42-retry");
        assert_eq!(a, derived_key("ci", "order-42-retry"), "survives a restart");
        assert_eq!(a.len(), 32);
        assert_ne!(a, derived_key("chat", "order-42-retry"));
        // The agent's name and its key cannot be shifted into each other.
        assert_ne!(derived_key("ab", "cdefghij"), derived_key("abc", "defghij"));
        assert_ne!(a, "order-42-retry");
    }

    #[test]
    fn the_digest_ignores_key_order_and_matches_absent_and_empty() {
        let one = json!({"a": 1, "b": {"y": [1, "x"], "x": null}});
        let two = json!({"b": {"x": null, "y": [1, "x"]}, "a": 1});
        assert_eq!(args_digest(one.as_object()), args_digest(two.as_object()));
        assert_eq!(args_digest(None), args_digest(json!({}).as_object()));
        assert_ne!(
            args_digest(one.as_object()),
            args_digest(json!({"a": 2}).as_object())
        );
    }
}
