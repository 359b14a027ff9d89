//! JSON as clientrpc speaks it: protojson for params and results, and Go's
//! `encoding/json` for the JSON-RPC envelope.
//!
//! Decoding follows protojson's `UnmarshalOptions{}`: a params object whose keys are
//! either the JSON (lowerCamelCase) or the proto (snake_case) field names; unknown or
//! duplicate fields are errors; 64-bit integers come as strings or numbers; `bytes` as
//! standard or URL-safe base64, padded or not; enums by name or number; `null` leaves a
//! field at its default.
//!
//! Encoding follows protojson's `MarshalOptions{}`: fields in field-number order, zero
//! values omitted, 64-bit integers as decimal strings, `bytes` as padded standard
//! base64, enums by name. The envelope then passes through Go's `json.Encoder`, which
//! escapes `<`, `>`, `&`, U+2028 and U+2029 everywhere ([`escape_html`]).
//!
//! Protojson error texts carry a `(line:col)` position in Go; these omit it.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Map, Number, Value};

/// The type of a proto field, as far as decoding needs it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Str,
    Bytes,
    U64,
    I64,
    I32,
    Double,
    /// An open enum: its value names and numbers.
    Enum(&'static [(&'static str, i32)]),
    /// A nested message.
    Msg(&'static [Field]),
}

/// One field of a request message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Field {
    proto: &'static str,
    json: &'static str,
    kind: Kind,
}

/// A field named `proto` in the .proto file and `json` in protojson.
pub(crate) const fn field(proto: &'static str, json: &'static str, kind: Kind) -> Field {
    Field { proto, json, kind }
}

/// A decoded field value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Val {
    Str(String),
    Bytes(Vec<u8>),
    U64(u64),
    I64(i64),
    I32(i32),
    Double(f64),
    Enum(i32),
    Msg(Decoded),
    /// A message field set to `null`: unset.
    Unset,
}

/// A decoded request message: the fields that were set, by proto name.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Decoded {
    vals: Vec<(&'static str, Val)>,
}

impl Decoded {
    fn get(&self, proto: &str) -> Option<&Val> {
        self.vals.iter().find(|(k, _)| *k == proto).map(|(_, v)| v)
    }

    /// A string field, `""` when unset.
    pub(crate) fn str(&self, proto: &str) -> &str {
        match self.get(proto) {
            Some(Val::Str(s)) => s,
            _ => "",
        }
    }

    /// A bytes field, empty when unset.
    pub(crate) fn bytes(&self, proto: &str) -> &[u8] {
        match self.get(proto) {
            Some(Val::Bytes(b)) => b,
            _ => &[],
        }
    }

    /// A uint64 field, 0 when unset.
    pub(crate) fn u64(&self, proto: &str) -> u64 {
        match self.get(proto) {
            Some(Val::U64(v)) => *v,
            _ => 0,
        }
    }

    /// An int64 field, 0 when unset.
    pub(crate) fn i64(&self, proto: &str) -> i64 {
        match self.get(proto) {
            Some(Val::I64(v)) => *v,
            _ => 0,
        }
    }

    /// An int32 field, 0 when unset.
    pub(crate) fn i32(&self, proto: &str) -> i32 {
        match self.get(proto) {
            Some(Val::I32(v)) => *v,
            _ => 0,
        }
    }

    /// A double field, 0 when unset.
    pub(crate) fn f64(&self, proto: &str) -> f64 {
        match self.get(proto) {
            Some(Val::Double(v)) => *v,
            _ => 0.0,
        }
    }

    /// An enum field, 0 when unset.
    #[cfg(test)]
    pub(crate) fn enum_value(&self, proto: &str) -> i32 {
        match self.get(proto) {
            Some(Val::Enum(v)) => *v,
            _ => 0,
        }
    }

    /// A message field, `None` when unset (proto3 message fields have presence).
    pub(crate) fn msg(&self, proto: &str) -> Option<&Self> {
        match self.get(proto) {
            Some(Val::Msg(m)) => Some(m),
            _ => None,
        }
    }
}

/// Decodes JSON-RPC `params` into a message with `fields`.
///
/// # Errors
///
/// The protojson error text (without position), to be prefixed with
/// "unable to decode params: ".
pub(crate) fn decode(fields: &'static [Field], params: Option<&Value>) -> Result<Decoded, String> {
    match params {
        None => Err("unexpected EOF".to_owned()),
        Some(Value::Object(map)) => decode_object(fields, map),
        Some(other) => Err(format!(
            "proto: syntax error: unexpected token {}",
            token_text(other)
        )),
    }
}

fn token_text(v: &Value) -> String {
    match v {
        Value::Array(_) => "[".to_owned(),
        Value::Object(_) => "{".to_owned(),
        other => other.to_string(),
    }
}

fn decode_object(fields: &'static [Field], map: &Map<String, Value>) -> Result<Decoded, String> {
    let mut out = Decoded::default();
    for (key, value) in map {
        let Some(f) = fields.iter().find(|f| f.json == key || f.proto == key) else {
            return Err(format!("proto: unknown field {key:?}"));
        };
        if out.vals.iter().any(|(k, _)| *k == f.proto) {
            return Err(format!("proto: duplicate field {key:?}"));
        }
        if value.is_null() {
            // null leaves the field at its default, but still counts as seen.
            out.vals.push((f.proto, default_of(f.kind)));
            continue;
        }
        let val = decode_value(f.kind, key, value)?;
        out.vals.push((f.proto, val));
    }
    Ok(out)
}

fn default_of(kind: Kind) -> Val {
    match kind {
        Kind::Str => Val::Str(String::new()),
        Kind::Bytes => Val::Bytes(Vec::new()),
        Kind::U64 => Val::U64(0),
        Kind::I64 => Val::I64(0),
        Kind::I32 => Val::I32(0),
        Kind::Double => Val::Double(0.0),
        Kind::Enum(_) => Val::Enum(0),
        // `Decoded::msg` answers `None`, as protojson leaves the field nil.
        Kind::Msg(_) => Val::Unset,
    }
}

fn invalid(ty: &str, key: &str, v: &Value) -> String {
    format!("proto: invalid value for {ty} field {key}: {v}")
}

fn decode_value(kind: Kind, key: &str, v: &Value) -> Result<Val, String> {
    match kind {
        Kind::Str => match v {
            Value::String(s) => Ok(Val::Str(s.clone())),
            _ => Err(invalid("string", key, v)),
        },
        Kind::Bytes => match v {
            Value::String(s) => decode_bytes(s)
                .map(Val::Bytes)
                .map_err(|_| invalid("bytes", key, v)),
            _ => Err(invalid("bytes", key, v)),
        },
        Kind::U64 => integer(v, 0, i128::from(u64::MAX))
            .and_then(|n| u64::try_from(n).ok())
            .map(Val::U64)
            .ok_or_else(|| invalid("uint64", key, v)),
        Kind::I64 => integer(v, i128::from(i64::MIN), i128::from(i64::MAX))
            .and_then(|n| i64::try_from(n).ok())
            .map(Val::I64)
            .ok_or_else(|| invalid("int64", key, v)),
        Kind::I32 => integer(v, i128::from(i32::MIN), i128::from(i32::MAX))
            .and_then(|n| i32::try_from(n).ok())
            .map(Val::I32)
            .ok_or_else(|| invalid("int32", key, v)),
        Kind::Double => match v {
            Value::Number(n) => n
                .as_f64()
                .map(Val::Double)
                .ok_or_else(|| invalid("double", key, v)),
            Value::String(s) => match s.as_str() {
                "NaN" => Ok(Val::Double(f64::NAN)),
                "Infinity" => Ok(Val::Double(f64::INFINITY)),
                "-Infinity" => Ok(Val::Double(f64::NEG_INFINITY)),
                _ => number_in_string(s)
                    .and_then(|n| n.as_f64())
                    .map(Val::Double)
                    .ok_or_else(|| invalid("double", key, v)),
            },
            _ => Err(invalid("double", key, v)),
        },
        Kind::Enum(values) => match v {
            Value::String(s) => values
                .iter()
                .find(|(name, _)| name == s)
                .map(|(_, n)| Val::Enum(*n))
                .ok_or_else(|| invalid("enum", key, v)),
            Value::Number(_) => integer(v, i128::from(i32::MIN), i128::from(i32::MAX))
                .and_then(|n| i32::try_from(n).ok())
                .map(Val::Enum)
                .ok_or_else(|| invalid("enum", key, v)),
            _ => Err(invalid("enum", key, v)),
        },
        Kind::Msg(fields) => match v {
            Value::Object(map) => decode_object(fields, map).map(Val::Msg),
            _ => Err(invalid("message", key, v)),
        },
    }
}

/// Decodes protojson `bytes`: standard or URL-safe alphabet, padded or not.
fn decode_bytes(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    use base64::engine::general_purpose::{STANDARD_PAD_INDIFFERENT, URL_SAFE_PAD_INDIFFERENT};
    if text.contains(['-', '_']) {
        URL_SAFE_PAD_INDIFFERENT.decode(text)
    } else {
        STANDARD_PAD_INDIFFERENT.decode(text)
    }
}

/// A JSON number written inside a string, as protojson accepts for numeric fields:
/// the whole string must be one JSON number, without surrounding space.
fn number_in_string(s: &str) -> Option<Number> {
    if s.is_empty() || s.trim() != s {
        return None;
    }
    match serde_json::from_str::<Value>(s) {
        Ok(Value::Number(n)) => Some(n),
        _ => None,
    }
}

/// An integral value in `[min, max]` from a JSON number or a number in a string.
/// Fractions are refused; exponents are fine when the value is integral ("1e3").
fn integer(v: &Value, min: i128, max: i128) -> Option<i128> {
    let n = match v {
        Value::Number(n) => n.clone(),
        Value::String(s) => number_in_string(s)?,
        _ => return None,
    };
    let wide = if let Some(u) = n.as_u64() {
        i128::from(u)
    } else if let Some(i) = n.as_i64() {
        i128::from(i)
    } else {
        let f = n.as_f64()?;
        // Beyond 2^64 an f64 is never in range of any target type.
        if f.fract() != 0.0 || !f.is_finite() || f.abs() > 1.9e19 {
            return None;
        }
        #[expect(
            clippy::cast_possible_truncation,
            reason = "integral and range-checked above"
        )]
        let i = f as i128;
        i
    };
    (min..=max).contains(&wide).then_some(wide)
}

/// A protojson object under construction: fields in the order they are added (the
/// callers add them in field-number order), zero values left out.
#[derive(Debug)]
pub(crate) struct Obj {
    buf: String,
}

impl Obj {
    pub(crate) fn new() -> Self {
        Self {
            buf: String::from("{"),
        }
    }

    fn key(&mut self, k: &str) {
        if self.buf.len() > 1 {
            self.buf.push(',');
        }
        self.buf.push('"');
        self.buf.push_str(k);
        self.buf.push_str("\":");
    }

    /// A string field; omitted when empty.
    pub(crate) fn str(mut self, k: &str, v: &str) -> Self {
        if !v.is_empty() {
            self.key(k);
            self.buf.push_str(&json_string(v));
        }
        self
    }

    /// `k` with `text` in quotes; `text` needs no escaping (base64 or digits).
    fn quoted(&mut self, k: &str, text: &str) {
        self.key(k);
        self.buf.push('"');
        self.buf.push_str(text);
        self.buf.push('"');
    }

    /// A bytes field as padded standard base64; omitted when empty.
    pub(crate) fn bytes(mut self, k: &str, v: &[u8]) -> Self {
        if !v.is_empty() {
            self.quoted(k, &STANDARD.encode(v));
        }
        self
    }

    /// A uint64 field as a decimal string; omitted when zero.
    pub(crate) fn u64(mut self, k: &str, v: u64) -> Self {
        if v != 0 {
            self.quoted(k, &v.to_string());
        }
        self
    }

    /// An int64 field as a decimal string; omitted when zero.
    pub(crate) fn i64(mut self, k: &str, v: i64) -> Self {
        if v != 0 {
            self.quoted(k, &v.to_string());
        }
        self
    }

    /// An int32 field as a JSON number; omitted when zero.
    pub(crate) fn i32(mut self, k: &str, v: i32) -> Self {
        if v != 0 {
            self.key(k);
            self.buf.push_str(&v.to_string());
        }
        self
    }

    /// A bool field; omitted when false.
    pub(crate) fn bool(mut self, k: &str, v: bool) -> Self {
        if v {
            self.key(k);
            self.buf.push_str("true");
        }
        self
    }

    /// An enum field by name; omitted when its number is zero.
    pub(crate) fn enumeration(mut self, k: &str, name: &str, number: i32) -> Self {
        if number != 0 {
            self.key(k);
            self.buf.push_str(&json_string(name));
        }
        self
    }

    /// A message field, already encoded. Always present: a set message is emitted
    /// even when empty.
    pub(crate) fn msg(mut self, k: &str, encoded: &str) -> Self {
        self.key(k);
        self.buf.push_str(encoded);
        self
    }

    pub(crate) fn finish(mut self) -> String {
        self.buf.push('}');
        self.buf
    }
}

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

    const INNER: &[Field] = &[
        field("message", "message", Kind::Str),
        field(
            "mode",
            "mode",
            Kind::Enum(&[("MESSAGE_MODE_NORMAL", 0), ("MESSAGE_MODE_ME", 1)]),
        ),
    ];
    const FIELDS: &[Field] = &[
        field("sequence_id", "sequenceId", Kind::U64),
        field("dcr_amount", "dcrAmount", Kind::Double),
        field("max_attempts", "maxAttempts", Kind::I32),
        field("uid", "uid", Kind::Bytes),
        field("msg", "msg", Kind::Msg(INNER)),
    ];

    fn dec(s: &str) -> Result<Decoded, String> {
        decode(FIELDS, Some(&serde_json::from_str(s).unwrap()))
    }

    #[test]
    fn u64_from_string_or_number_and_either_name() {
        assert_eq!(
            dec(r#"{"sequenceId":"18446744073709551615"}"#)
                .unwrap()
                .u64("sequence_id"),
            u64::MAX
        );
        assert_eq!(
            dec(r#"{"sequence_id":4294967461}"#)
                .unwrap()
                .u64("sequence_id"),
            4_294_967_461
        );
        assert_eq!(
            dec(r#"{"sequenceId":"1e3"}"#).unwrap().u64("sequence_id"),
            1000
        );
        assert!(dec(r#"{"sequenceId":"1.5"}"#).is_err());
        assert!(dec(r#"{"sequenceId":"-1"}"#).is_err());
        assert!(dec(r#"{"sequenceId":" 1"}"#).is_err());
        assert!(dec(r#"{"sequenceId":true}"#).is_err());
    }

    #[test]
    fn unknown_and_duplicate_fields_are_errors() {
        assert_eq!(
            dec(r#"{"bogus":1}"#).unwrap_err(),
            r#"proto: unknown field "bogus""#
        );
        assert!(
            dec(r#"{"sequenceId":"1","sequence_id":"2"}"#)
                .unwrap_err()
                .contains("duplicate field")
        );
        assert!(
            dec(r#"{"msg":{"message":"x","extra":1}}"#)
                .unwrap_err()
                .contains("unknown field \"extra\"")
        );
    }

    #[test]
    fn params_must_be_an_object() {
        assert!(decode(FIELDS, None).is_err());
        assert!(decode(FIELDS, Some(&Value::Null)).is_err());
        assert!(decode(FIELDS, Some(&serde_json::json!([1]))).is_err());
        assert!(decode(FIELDS, Some(&serde_json::json!({}))).is_ok());
    }

    #[test]
    fn bytes_enum_double_message() {
        let d = dec(r#"{"uid":"ERER","msg":{"message":"hi","mode":"MESSAGE_MODE_ME"},"dcrAmount":"0.5","maxAttempts":"3"}"#)
            .unwrap();
        assert_eq!(d.bytes("uid"), &[0x11, 0x11, 0x11]);
        assert_eq!(d.msg("msg").unwrap().str("message"), "hi");
        assert_eq!(d.msg("msg").unwrap().enum_value("mode"), 1);
        assert!((d.f64("dcr_amount") - 0.5).abs() < f64::EPSILON);
        assert_eq!(d.i32("max_attempts"), 3);
        // URL-safe, unpadded.
        assert_eq!(dec(r#"{"uid":"-_8"}"#).unwrap().bytes("uid"), &[0xfb, 0xff]);
        // null message stays unset.
        assert!(dec(r#"{"msg":null}"#).unwrap().msg("msg").is_none());
        assert!(dec(r#"{"msg":{"mode":"NOPE"}}"#).is_err());
    }

    #[test]
    fn encoding_omits_zero_values_and_quotes_64_bit() {
        let s = Obj::new()
            .u64("sequenceId", 4_294_967_454)
            .bytes("uid", &[0x22; 32])
            .str("nick", "")
            .i64("amountMatoms", 10_000_000)
            .bool("completed", true)
            .i32("attempt", 1)
            .bool("willRetry", false)
            .finish();
        assert_eq!(
            s,
            r#"{"sequenceId":"4294967454","uid":"IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=","amountMatoms":"10000000","completed":true,"attempt":1}"#
        );
        assert_eq!(Obj::new().finish(), "{}");
    }

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
