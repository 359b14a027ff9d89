//! The clientrpc messages, generated at build time from `proto/clientrpc.proto` (the
//! subset of brclient's `clientrpc.proto` a bot needs, with its field names and
//! numbers), their protojson form, and the JSON-RPC envelope.
//!
//! Protojson comes from the messages' descriptors (prost-reflect), as Go's
//! `protojson` writes and reads it:
//! - output ([`to_json`]): lowerCamelCase names in field-number order, zero values
//!   omitted, 64-bit integers as decimal strings, bytes as padded standard base64,
//!   enums by name;
//! - input ([`from_json`]): lowerCamelCase or proto names, 64-bit integers as strings
//!   or numbers, bytes as standard or URL-safe base64 (padded or not), enums by name
//!   or number, `null` for a default. Unknown fields (and unknown enum names) are
//!   refused or ignored as the caller says ([`Unknown`]): the server refuses them; this
//!   client ignores them in what the server sends, so a newer brclient's additions
//!   do not break it.

use std::sync::LazyLock;

use prost_reflect::{DescriptorPool, DeserializeOptions, DynamicMessage, ReflectMessage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use brmcp_adapters::PeerId;

// Generated code: prost's structs document what the .proto documents, and their
// shapes are prost's.
#[allow(
    missing_docs,
    unreachable_pub,
    unused_qualifications,
    clippy::all,
    clippy::pedantic,
    clippy::use_self
)]
mod generated {
    include!(concat!(env!("OUT_DIR"), "/types.rs"));
}

pub use generated::*;

/// The descriptors of `proto/clientrpc.proto`, compiled by the build script.
pub static DESCRIPTORS: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/clientrpc.bin"))[..])
        .expect("the build script writes a valid descriptor set")
});

/// Method names, without stream suffixes.
pub mod method {
    /// `VersionService.Version`: [`VersionRequest`](super::VersionRequest) → [`VersionResponse`](super::VersionResponse).
    pub const VERSION: &str = "VersionService.Version";
    /// `VersionService.KeepaliveStream` (a stream): [`KeepaliveStreamRequest`](super::KeepaliveStreamRequest)
    /// → [`KeepaliveEvent`](super::KeepaliveEvent) items.
    pub const KEEPALIVE_STREAM: &str = "VersionService.KeepaliveStream";
    /// `ChatService.UserPublicIdentity`: [`PublicIdentityReq`](super::PublicIdentityReq) → [`PublicIdentity`](super::PublicIdentity).
    pub const USER_PUBLIC_IDENTITY: &str = "ChatService.UserPublicIdentity";
    /// `ChatService.UserNick`: [`UserNickRequest`](super::UserNickRequest) →
    /// [`UserNickResponse`](super::UserNickResponse).
    pub const USER_NICK: &str = "ChatService.UserNick";
    /// `ChatService.PM`: [`PmRequest`](super::PmRequest) → [`PmResponse`](super::PmResponse).
    pub const PM: &str = "ChatService.PM";
    /// `ChatService.PMStream` (a stream): [`PmStreamRequest`](super::PmStreamRequest) →
    /// [`ReceivedPm`](super::ReceivedPm) items.
    pub const PM_STREAM: &str = "ChatService.PMStream";
    /// `ChatService.AckReceivedPM`: [`AckRequest`](super::AckRequest) → [`AckResponse`](super::AckResponse).
    pub const ACK_RECEIVED_PM: &str = "ChatService.AckReceivedPM";
    /// `PaymentsService.TipUser`: [`TipUserRequest`](super::TipUserRequest) → [`TipUserResponse`](super::TipUserResponse).
    pub const TIP_USER: &str = "PaymentsService.TipUser";
    /// `PaymentsService.TipProgress` (a stream): [`TipProgressRequest`](super::TipProgressRequest) →
    /// [`TipProgressEvent`](super::TipProgressEvent) items.
    pub const TIP_PROGRESS: &str = "PaymentsService.TipProgress";
    /// `PaymentsService.AckTipProgress`: [`AckRequest`](super::AckRequest) → [`AckResponse`](super::AckResponse).
    pub const ACK_TIP_PROGRESS: &str = "PaymentsService.AckTipProgress";
    /// `PaymentsService.TipStream` (a stream): [`TipStreamRequest`](super::TipStreamRequest) →
    /// [`ReceivedTip`](super::ReceivedTip) items.
    pub const TIP_STREAM: &str = "PaymentsService.TipStream";
    /// `PaymentsService.AckTipReceived`: [`AckRequest`](super::AckRequest) → [`AckResponse`](super::AckResponse).
    pub const ACK_TIP_RECEIVED: &str = "PaymentsService.AckTipReceived";
    /// `ChatService.MediateKX`: [`MediateKxRequest`](super::MediateKxRequest) → [`MediateKxResponse`](super::MediateKxResponse).
    pub const MEDIATE_KX: &str = "ChatService.MediateKX";
    /// `ChatService.KXStream` (a stream): [`KxStreamRequest`](super::KxStreamRequest) →
    /// [`KxCompleted`](super::KxCompleted) items.
    pub const KX_STREAM: &str = "ChatService.KXStream";
    /// `ChatService.AckKXCompleted`: [`AckRequest`](super::AckRequest) → [`AckResponse`](super::AckResponse).
    pub const ACK_KX_COMPLETED: &str = "ChatService.AckKXCompleted";
    /// `PostsService.SubscribeToPosts`: [`SubscribeToPostsRequest`](super::SubscribeToPostsRequest) →
    /// [`SubscribeToPostsResponse`](super::SubscribeToPostsResponse).
    pub const SUBSCRIBE_TO_POSTS: &str = "PostsService.SubscribeToPosts";
    /// `PostsService.PostsStream` (a stream): [`PostsStreamRequest`](super::PostsStreamRequest) →
    /// [`ReceivedPost`](super::ReceivedPost) items.
    pub const POSTS_STREAM: &str = "PostsService.PostsStream";
    /// `PostsService.AckReceivedPost`: [`AckRequest`](super::AckRequest) → [`AckResponse`](super::AckResponse).
    pub const ACK_RECEIVED_POST: &str = "PostsService.AckReceivedPost";
}

/// JSON-RPC error codes the server uses.
pub mod code {
    /// Params the server could not decode (an unknown field, a wrong type).
    pub const INVALID_PARAMS: i64 = -32602;
    /// Every handler error, and also unknown services and methods.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// A stream ended (the handler returned).
    pub const EOF: i64 = 10000;
}

/// What decoding does with a field the message does not declare, or an enum name it
/// does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// An error, as brclient's server decodes params (`protojson.UnmarshalOptions{}`).
    Refuse,
    /// Skipped: what a client does with results and stream items, so fields a newer
    /// server adds do not break it. An unknown enum name leaves the field at 0.
    Ignore,
}

/// A message in the form that serializes as protojson, the way Go's `protojson.Marshal`
/// writes it (fields in field-number order): to embed in an envelope.
pub fn protojson<M: ReflectMessage>(message: &M) -> impl Serialize + use<M> {
    message.transcode_to_dynamic()
}

/// A message as protojson text (see [`protojson`]).
///
/// # Errors
/// serde_json's, which a message of this file never produces.
pub fn to_json<M: ReflectMessage>(message: &M) -> Result<String, serde_json::Error> {
    serde_json::to_string(&protojson(message))
}

/// A message from protojson.
///
/// # Errors
/// Not an object, a field of the wrong type or out of range, invalid base64, or (with
/// [`Unknown::Refuse`]) an unknown field or enum name.
pub fn from_json<M: ReflectMessage + Default>(
    value: &Value,
    unknown: Unknown,
) -> Result<M, serde_json::Error> {
    deserialize(value, unknown)
}

/// A message from protojson, from any serde deserializer (see [`from_json`]).
///
/// # Errors
/// As [`from_json`].
pub fn deserialize<'de, M: ReflectMessage + Default, D: serde::Deserializer<'de>>(
    deserializer: D,
    unknown: Unknown,
) -> Result<M, D::Error> {
    let options = DeserializeOptions::new().deny_unknown_fields(unknown == Unknown::Refuse);
    DynamicMessage::deserialize_with_options(M::default().descriptor(), deserializer, &options)?
        .transcode_to()
        .map_err(serde::de::Error::custom)
}

impl PublicIdentity {
    /// The user id, if `identity` holds 32 bytes.
    pub fn peer_id(&self) -> Option<PeerId> {
        <[u8; 32]>::try_from(self.identity.as_slice())
            .ok()
            .map(PeerId::from_bytes)
    }
}

/// A JSON-RPC error object; `data` is never set by the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The code; see [`code`].
    #[serde(default)]
    pub code: i64,
    /// The server's text.
    #[serde(default)]
    pub message: String,
}

/// A request as the client writes it: `{"jsonrpc":"2.0","id":N,"method":M,"params":P}`.
#[derive(Debug, Serialize)]
pub(crate) struct Request<'a, P> {
    pub(crate) jsonrpc: &'static str,
    pub(crate) id: u64,
    pub(crate) method: &'a str,
    pub(crate) params: P,
}

/// Anything the server sends, before it is told apart.
#[derive(Debug, Deserialize)]
pub(crate) struct Incoming {
    #[serde(default)]
    pub(crate) id: Option<Value>,
    #[serde(default)]
    pub(crate) method: Option<String>,
    #[serde(default)]
    pub(crate) params: Option<Value>,
    #[serde(default)]
    pub(crate) result: Option<Value>,
    #[serde(default, deserialize_with = "object_only")]
    pub(crate) error: Option<ErrorObject>,
}

/// Whether `data` holds a JSON object first (after whitespace): derived `Deserialize`
/// also reads an array positionally into a struct's fields, so `[1]` would pass for a
/// response with id 1; the server sends only objects.
pub(crate) fn starts_object(data: &[u8]) -> bool {
    data.iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        == Some(&b'{')
}

/// An object (or `null`) only, for the same reason as [`starts_object`].
fn object_only<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(None),
        value @ Value::Object(_) => T::deserialize(value)
            .map(Some)
            .map_err(serde::de::Error::custom),
        _ => Err(serde::de::Error::custom("not an object")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::items;

    fn item<M: ReflectMessage + Default, T: TryFrom<M, Error = items::BadUid>>(
        value: Value,
    ) -> Result<T, String> {
        let message: M = from_json(&value, Unknown::Ignore).map_err(|e| e.to_string())?;
        T::try_from(message).map_err(|e| e.to_string())
    }

    #[test]
    fn received_pm_decodes_string_ids_and_base64_uid() {
        let pm: items::ReceivedPm = item::<ReceivedPm, _>(json!({
            "uid": "ERERERERERERERERERERERERERERERERERERERERERE=",
            "nick": "alice",
            "msg": {"message": "hi bot", "mode": "MESSAGE_MODE_ME"},
            "timestampMs": "1765900000123",
            "sequenceId": "4294967461",
            "someNewField": true
        }))
        .unwrap();
        assert_eq!(pm.uid, PeerId::from_bytes([0x11; 32]));
        assert_eq!(pm.sequence_id, 4_294_967_461);
        assert_eq!(pm.timestamp_ms, 1_765_900_000_123);
        assert_eq!(pm.msg.mode(), MessageMode::Me);
        assert_eq!(pm.msg.message, "hi bot");
    }

    #[test]
    fn numbers_snake_case_url_safe_and_unpadded_are_accepted() {
        let tip: items::ReceivedTip = item::<ReceivedTip, _>(json!({
            "uid": "-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_8",
            "amount_matoms": 10_000_000,
            "sequence_id": 9_007_199_254_740_993u64,
        }))
        .unwrap();
        assert_eq!(tip.amount_matoms, 10_000_000);
        assert_eq!(tip.sequence_id, 9_007_199_254_740_993);
        assert_eq!(tip.uid.as_bytes()[0], 0xfb);
        // An integral number in exponent form, as protojson takes it.
        let ack: AckRequest = from_json(&json!({"sequenceId": 1e3}), Unknown::Refuse).unwrap();
        assert_eq!(ack.sequence_id, 1000);
        assert!(from_json::<AckRequest>(&json!({"sequenceId": 1.5}), Unknown::Refuse).is_err());
        assert!(from_json::<AckRequest>(&json!({"sequenceId": "-1"}), Unknown::Refuse).is_err());
    }

    #[test]
    fn unknown_fields_and_enum_names_are_refused_or_ignored_as_asked() {
        let params = json!({"sequenceId": "5", "bogus": 1});
        let err = from_json::<AckRequest>(&params, Unknown::Refuse).unwrap_err();
        assert!(err.to_string().contains("bogus"), "{err}");
        let ack: AckRequest = from_json(&params, Unknown::Ignore).unwrap();
        assert_eq!(ack.sequence_id, 5);
        let msg = json!({"message": "x", "mode": "MESSAGE_MODE_SHOUT"});
        assert!(from_json::<RmPrivateMessage>(&msg, Unknown::Refuse).is_err());
        let m: RmPrivateMessage = from_json(&msg, Unknown::Ignore).unwrap();
        assert_eq!(m.mode(), MessageMode::Normal);
        // A nested message's unknown field too.
        let pm = json!({"user": "bob", "msg": {"message": "x", "extra": 1}});
        assert!(from_json::<PmRequest>(&pm, Unknown::Refuse).is_err());
    }

    #[test]
    fn zero_values_are_omitted_and_64_bit_numbers_are_strings() {
        assert_eq!(to_json(&PmStreamRequest::default()).unwrap(), "{}");
        assert_eq!(
            to_json(&AckRequest {
                sequence_id: u64::MAX
            })
            .unwrap(),
            r#"{"sequenceId":"18446744073709551615"}"#
        );
        let event = TipProgressEvent {
            sequence_id: 5,
            uid: vec![0x22; 32],
            nick: String::new(),
            amount_matoms: 10_000_000,
            completed: true,
            attempt: 1,
            attempt_err: String::new(),
            will_retry: false,
        };
        assert_eq!(
            to_json(&event).unwrap(),
            r#"{"sequenceId":"5","uid":"IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=","amountMatoms":"10000000","completed":true,"attempt":1}"#
        );
        assert_eq!(to_json(&AckResponse {}).unwrap(), "{}");
        // A message field that is set is written even when empty, as Go does.
        let pm = PmRequest {
            user: "bob".into(),
            msg: Some(RmPrivateMessage::default()),
        };
        assert_eq!(to_json(&pm).unwrap(), r#"{"user":"bob","msg":{}}"#);
        let me = RmPrivateMessage {
            message: "waves".into(),
            mode: MessageMode::Me.into(),
        };
        assert_eq!(
            to_json(&me).unwrap(),
            r#"{"message":"waves","mode":"MESSAGE_MODE_ME"}"#
        );
    }

    #[test]
    fn short_or_missing_uid_is_refused() {
        let err = item::<ReceivedTip, items::ReceivedTip>(json!({"uid": "AAAA"})).unwrap_err();
        assert!(err.contains("3 bytes, not 32"), "{err}");
        let err = item::<KxCompleted, items::KxCompleted>(json!({"nick": "x"})).unwrap_err();
        assert!(err.contains("0 bytes, not 32"), "{err}");
    }
}
