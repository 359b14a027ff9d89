//! The JSON-RPC envelope as brclient writes it: Go's `encoding/json`. Params and
//! results inside it are protojson (the generated messages of `brmcp_clientrpc::proto`);
//! the envelope then passes through Go's `json.Encoder`, which escapes `<`, `>`, `&`,
//! U+2028 and U+2029 everywhere ([`escape_html`]), and an `id` comes back as Go
//! re-encodes it ([`go_reencode`]).

use serde_json::Value;

/// A JSON-RPC success response line (JSON and `\n`), as the server writes it.
pub(crate) fn response_line(id: &str, result: &str) -> String {
    escape_html(&format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{result}}}\n"
    ))
}

/// A JSON-RPC error response line.
pub(crate) fn error_line(id: &str, code: i64, message: &str) -> String {
    escape_html(&format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"error\":{{\"code\":{code},\"message\":{}}}}}\n",
        json_string(message)
    ))
}

/// A stream item: a notification whose method is the stream's suffixed method.
pub(crate) fn notification_line(method: &str, params: &str) -> String {
    escape_html(&format!(
        "{{\"jsonrpc\":\"2.0\",\"params\":{params},\"method\":{}}}\n",
        json_string(method)
    ))
}

/// A JSON string literal.
pub(crate) fn json_string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

/// Go's `json.Encoder` HTML escaping, applied to a whole JSON text. The escaped
/// characters can only occur inside strings, so a plain replacement is exact.
pub(crate) fn escape_html(s: &str) -> String {
    if !s.contains(['<', '>', '&', '\u{2028}', '\u{2029}']) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as Go re-encodes it after decoding it into `interface{}`: every
/// number becomes a float64 (so integers above 2^53 lose precision), objects come out
/// with sorted keys. This is what happens to a JSON-RPC `id` on its way back.
pub(crate) fn go_reencode(v: &Value) -> String {
    match v {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_float(n.as_f64().unwrap_or(0.0)),
        Value::String(s) => json_string(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_reencode).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", json_string(k), go_reencode(&map[k.as_str()])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
    }
}

/// Go's `encoding/json` float64 format: shortest round-trip digits, plain notation
/// for 1e-6 <= |f| < 1e21, otherwise exponent notation like `1e+21` or `1e-7`.
pub(crate) fn go_float(f: f64) -> String {
    let abs = f.abs();
    if abs == 0.0 || (1e-6..1e21).contains(&abs) {
        return format!("{f}");
    }
    let e = format!("{f:e}");
    match e.split_once('e') {
        Some((mantissa, exp)) => match exp.strip_prefix('-') {
            Some(digits) => format!("{mantissa}e-{digits}"),
            None => format!("{mantissa}e+{exp:0>2}"),
        },
        None => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_number_and_html_forms() {
        assert_eq!(go_float(1.0), "1");
        assert_eq!(go_float(4_294_967_297.0), "4294967297");
        assert_eq!(go_float(9_007_199_254_740_993_f64), "9007199254740992");
        assert_eq!(go_float(1e21), "1e+21");
        assert_eq!(go_float(1e-7), "1e-7");
        assert_eq!(go_float(0.5), "0.5");
        assert_eq!(
            go_reencode(&serde_json::json!({"b":1,"a":"x"})),
            r#"{"a":"x","b":1}"#
        );
        assert_eq!(
            escape_html(r#"{"m":"<a&b>"}"#),
            r#"{"m":"\u003ca\u0026b\u003e"}"#
        );
    }
}
