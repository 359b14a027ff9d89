//! Whether a bot reserves credit per call: the `_meta` flag of its `initialize` result.
//!
//! A bot that reserves credits a tip to the calls it refused `payment_required` and
//! that still wait for their caller's retry, so a call of one agent is not charged
//! from credit another agent of the same bridge paid. The Go harness keeps one
//! balance per caller and sends no flag; a peer that sends a flag of another type is
//! read as not reserving, and told so.

use rmcp::model::JsonObject;
use serde_json::Value;

/// The `_meta` key of an `initialize` result whose bot reserves credit per call: `true`.
pub const RESERVES_CREDIT_META: &str = "brmcp/reservesCredit";

/// Why an `initialize` result's [`RESERVES_CREDIT_META`] was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReservesCreditError {
    /// The key is there and not a boolean.
    #[error("brmcp/reservesCredit is not a boolean")]
    NotBool,
}

/// Whether the `initialize` result's `_meta` says its bot reserves credit per call;
/// `Ok(false)` without the key (a Go bot).
///
/// # Errors
/// [`ReservesCreditError::NotBool`] for a value of another type.
pub fn reserves_credit(meta: Option<&JsonObject>) -> Result<bool, ReservesCreditError> {
    match meta.and_then(|m| m.get(RESERVES_CREDIT_META)) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ReservesCreditError::NotBool),
    }
}

/// Adds the flag to an `initialize` result's `_meta`.
pub fn advertise_reserves_credit(meta: &mut JsonObject) {
    meta.insert(RESERVES_CREDIT_META.to_owned(), Value::Bool(true));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_flag_is_read_strictly_and_absent_means_not_reserving() {
        let meta = |v: Value| -> JsonObject { serde_json::from_value(v).unwrap() };
        assert_eq!(reserves_credit(None), Ok(false));
        assert_eq!(reserves_credit(Some(&meta(json!({})))), Ok(false));
        assert_eq!(
            reserves_credit(Some(&meta(json!({"brmcp/reservesCredit": true})))),
            Ok(true)
        );
        assert_eq!(
            reserves_credit(Some(&meta(json!({"brmcp/reservesCredit": false})))),
            Ok(false)
        );
        for bad in [json!("true"), json!(1), json!(null), json!({})] {
            assert_eq!(
                reserves_credit(Some(&meta(json!({ "brmcp/reservesCredit": bad })))),
                Err(ReservesCreditError::NotBool)
            );
        }
        let mut written = JsonObject::new();
        advertise_reserves_credit(&mut written);
        assert_eq!(reserves_credit(Some(&written)), Ok(true));
    }
}
