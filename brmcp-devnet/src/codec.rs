//! Params and results as brclient's server reads and writes them: protojson of the
//! client's generated messages ([`brmcp_clientrpc::proto`]), params decoded with
//! unknown fields refused (`protojson.UnmarshalOptions{}`) and refusals worded as Go's
//! protojson words them, less the `(line:col)` it adds.

use brmcp_clientrpc::proto::{self, Unknown};
use prost_reflect::{DynamicMessage, Kind, MessageDescriptor, ReflectMessage};
use serde_json::{Map, Value};

/// A message as protojson.
///
/// # Panics
/// Never: serializing a message fails only on a map whose keys are not strings, and
/// `clientrpc.proto` declares no maps.
pub(crate) fn encode<M: ReflectMessage>(message: &M) -> String {
    proto::to_json(message).expect("a message of clientrpc.proto always serializes")
}

/// Decodes params as brclient does (`protojson.UnmarshalOptions{}`: unknown fields
/// refused), with Go's error texts less their `(line:col)`.
pub(crate) fn decode<M: ReflectMessage + Default>(params: Option<&Value>) -> Result<M, String> {
    let Some(value) = params else {
        return Err("unexpected EOF".to_owned());
    };
    check(&M::default().descriptor(), value)?;
    proto::from_json(value, Unknown::Refuse).map_err(|e| format!("proto: {e}"))
}

/// What protojson refuses, named as Go names it: params that are not an object, an
/// unknown field, a field given twice (by its JSON and its proto name), a value of the
/// wrong type. Each field is tried alone, so the error names the first bad one.
fn check(desc: &MessageDescriptor, value: &Value) -> Result<(), String> {
    let Value::Object(map) = value else {
        let token = match value {
            Value::Array(_) => "[".to_owned(),
            other => other.to_string(),
        };
        return Err(format!("proto: syntax error: unexpected token {token}"));
    };
    let mut seen = Vec::with_capacity(map.len());
    for (key, v) in map {
        let Some(field) = desc
            .get_field_by_json_name(key)
            .or_else(|| desc.get_field_by_name(key))
        else {
            return Err(format!("proto: unknown field {key:?}"));
        };
        if seen.contains(&field.number()) {
            return Err(format!("proto: duplicate field {key:?}"));
        }
        seen.push(field.number());
        let valid = match field.kind() {
            _ if v.is_null() => true,
            Kind::Message(inner) if v.is_object() => {
                check(&inner, v)?;
                true
            }
            _ => {
                let alone = Value::Object(Map::from_iter([(key.clone(), v.clone())]));
                DynamicMessage::deserialize(desc.clone(), &alone).is_ok()
            }
        };
        if !valid {
            return Err(format!(
                "proto: invalid value for {} field {key}: {v}",
                kind_name(&field.kind())
            ));
        }
    }
    Ok(())
}

/// A field type as Go's protojson errors name it.
fn kind_name(kind: &Kind) -> &'static str {
    match kind {
        Kind::Double => "double",
        Kind::Float => "float",
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => "int32",
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => "int64",
        Kind::Uint32 | Kind::Fixed32 => "uint32",
        Kind::Uint64 | Kind::Fixed64 => "uint64",
        Kind::Bool => "bool",
        Kind::String => "string",
        Kind::Bytes => "bytes",
        Kind::Message(_) => "message",
        Kind::Enum(_) => "enum",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_decode_as_protojson_with_gos_texts() {
        let ack = |v: Value| decode::<proto::AckRequest>(Some(&v)).map(|a| a.sequence_id);
        assert_eq!(
            ack(serde_json::json!({"sequenceId": "18446744073709551615"})),
            Ok(u64::MAX)
        );
        assert_eq!(
            ack(serde_json::json!({"sequence_id": 4_294_967_461u64})),
            Ok(4_294_967_461)
        );
        for bad in [
            serde_json::json!("1.5"),
            serde_json::json!("-1"),
            serde_json::json!(" 1"),
            serde_json::json!(true),
        ] {
            let err = ack(serde_json::json!({ "sequenceId": bad })).unwrap_err();
            assert!(
                err.starts_with("proto: invalid value for uint64 field sequenceId: "),
                "{err}"
            );
        }
        assert_eq!(
            ack(serde_json::json!({"sequenceId": "1", "bogus": 1})),
            Err(r#"proto: unknown field "bogus""#.to_owned())
        );
        assert!(
            ack(serde_json::json!({"sequenceId": "1", "sequence_id": "2"}))
                .unwrap_err()
                .contains("duplicate field")
        );
        let pm = |v: Value| decode::<proto::PmRequest>(Some(&v));
        assert!(
            pm(serde_json::json!({"msg": {"message": "x", "extra": 1}}))
                .unwrap_err()
                .contains(r#"unknown field "extra""#)
        );
        // Params must be an object.
        assert!(decode::<proto::AckRequest>(None).is_err());
        assert!(ack(Value::Null).is_err());
        assert!(ack(serde_json::json!([1])).is_err());
        assert_eq!(ack(serde_json::json!({})), Ok(0));
    }

    #[test]
    fn bytes_enum_double_and_message_fields() {
        let nick = |v: Value| decode::<proto::UserNickRequest>(Some(&v)).map(|n| n.uid);
        assert_eq!(nick(serde_json::json!({"uid": "ERER"})), Ok(vec![0x11; 3]));
        // URL-safe, unpadded.
        assert_eq!(
            nick(serde_json::json!({"uid": "-_8"})),
            Ok(vec![0xfb, 0xff])
        );
        let pm = |v: Value| decode::<proto::PmRequest>(Some(&v));
        let me = pm(serde_json::json!({"msg": {"message": "hi", "mode": "MESSAGE_MODE_ME"}}))
            .unwrap()
            .msg
            .unwrap();
        assert_eq!(
            (me.message.as_str(), me.mode()),
            ("hi", proto::MessageMode::Me)
        );
        // A null message stays unset.
        assert!(pm(serde_json::json!({"msg": null})).unwrap().msg.is_none());
        assert!(
            pm(serde_json::json!({"msg": {"mode": "NOPE"}}))
                .unwrap_err()
                .starts_with("proto: invalid value for enum field mode")
        );
        let tip = decode::<proto::TipUserRequest>(Some(
            &serde_json::json!({"dcrAmount": "0.5", "maxAttempts": "3"}),
        ))
        .unwrap();
        assert!((tip.dcr_amount - 0.5).abs() < f64::EPSILON);
        assert_eq!(tip.max_attempts, 3);
    }
}
