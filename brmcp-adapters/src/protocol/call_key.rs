//! What both roles share of call keys (WIRE.md §10): the key's length bounds, the
//! replay window, and the canonical JSON a call's arguments are bound to the key by.

use serde_json::{Map, Value};

/// Shortest call key, in bytes (WIRE.md §10): shorter keys collide too easily.
pub const MIN_CALL_KEY_LEN: usize = 8;

/// Longest call key, in bytes (WIRE.md §10): bounds what one journal row stores.
pub const MAX_CALL_KEY_LEN: usize = 128;

/// How long a completed keyed call's outcome is replayed, in seconds: 30 minutes.
///
/// The Go harness's `callKeyTTL`; clients size their retry loops to it.
pub const OUTCOME_TTL_SECS: u64 = 30 * 60;

/// A `tools/call`'s `arguments` as canonical JSON: keys sorted by their bytes at every
/// depth, no whitespace, absent arguments as `{}` (MCP treats them the same). Both
/// roles hash this text, so one call's digest does not depend on the order its client
/// wrote the keys in, nor on whether serde_json keeps that order.
pub fn canonical_arguments(args: Option<&Map<String, Value>>) -> String {
    let mut text = String::new();
    match args {
        Some(map) => write_object(map, &mut text),
        None => text.push_str("{}"),
    }
    text
}

/// Any JSON value as canonical JSON (as [`canonical_arguments`]).
pub fn canonical_value(value: &Value) -> String {
    let mut text = String::new();
    write_canonical(value, &mut text);
    text
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_object(map, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        // `Display` of a scalar `Value` is its compact JSON, escapes included.
        scalar => out.push_str(&scalar.to_string()),
    }
}

fn write_object(map: &Map<String, Value>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (i, (key, value)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&Value::from(key.as_str()).to_string());
        out.push(':');
        write_canonical(value, out);
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keys_are_sorted_at_every_depth_and_absent_arguments_read_as_empty() {
        let a = json!({"b": [{"y": 1, "x": "é\""}], "a": null});
        assert_eq!(canonical_value(&a), r#"{"a":null,"b":[{"x":"é\"","y":1}]}"#);
        assert_eq!(canonical_arguments(None), "{}");
        assert_eq!(canonical_arguments(a.as_object()), canonical_value(&a));
    }
}
