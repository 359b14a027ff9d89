//! clientrpc messages and their protojson encoding (`clientrpc.proto`, the subset a
//! bot needs for PMs and tips), plus the JSON-RPC envelope.
//!
//! Encoding rules, as Go's protojson applies them:
//! - field names are lowerCamelCase; on input snake_case names are accepted too;
//! - 64-bit integers are decimal **strings** on output; strings or numbers on input;
//! - `bytes` are standard base64 with padding on output; standard or URL-safe, padded
//!   or not, on input; user ids are 32 bytes ([`PeerId`]);
//! - fields holding a zero value (`0`, `""`, `false`, empty bytes, enum value 0) are
//!   omitted on output and default when missing on input;
//! - enums are names on output; names or numbers on input;
//! - unknown fields are ignored on input and never produced on output (every type here
//!   has only the proto's fields), because the server rejects unknown fields.
//!
//! The types serialize both ways, so a test server or simulator can use them too.

use base64::Engine as _;
use base64::engine::general_purpose::{
    STANDARD, STANDARD_PAD_INDIFFERENT, URL_SAFE_PAD_INDIFFERENT,
};
use serde::de::{self, Deserializer, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

use brmcp_adapters::PeerId;

/// Method names, without stream suffixes.
pub mod method {
    /// `VersionService.Version`: [`Empty`](super::Empty) → [`VersionResponse`](super::VersionResponse).
    pub const VERSION: &str = "VersionService.Version";
    /// `VersionService.KeepaliveStream` (a stream): [`KeepaliveStreamRequest`](super::KeepaliveStreamRequest)
    /// → [`KeepaliveEvent`](super::KeepaliveEvent) items.
    pub const KEEPALIVE_STREAM: &str = "VersionService.KeepaliveStream";
    /// `ChatService.UserPublicIdentity`: [`Empty`](super::Empty) → [`PublicIdentity`](super::PublicIdentity).
    pub const USER_PUBLIC_IDENTITY: &str = "ChatService.UserPublicIdentity";
    /// `ChatService.PM`: [`PmRequest`](super::PmRequest) → [`Empty`](super::Empty).
    pub const PM: &str = "ChatService.PM";
    /// `ChatService.PMStream` (a stream): [`StreamRequest`](super::StreamRequest) →
    /// [`ReceivedPm`](super::ReceivedPm) items.
    pub const PM_STREAM: &str = "ChatService.PMStream";
    /// `ChatService.AckReceivedPM`: [`AckRequest`](super::AckRequest) → [`Empty`](super::Empty).
    pub const ACK_RECEIVED_PM: &str = "ChatService.AckReceivedPM";
    /// `PaymentsService.TipUser`: [`TipUserRequest`](super::TipUserRequest) → [`Empty`](super::Empty).
    pub const TIP_USER: &str = "PaymentsService.TipUser";
    /// `PaymentsService.TipProgress` (a stream): [`StreamRequest`](super::StreamRequest) →
    /// [`TipProgressEvent`](super::TipProgressEvent) items.
    pub const TIP_PROGRESS: &str = "PaymentsService.TipProgress";
    /// `PaymentsService.AckTipProgress`: [`AckRequest`](super::AckRequest) → [`Empty`](super::Empty).
    pub const ACK_TIP_PROGRESS: &str = "PaymentsService.AckTipProgress";
    /// `PaymentsService.TipStream` (a stream): [`StreamRequest`](super::StreamRequest) →
    /// [`ReceivedTip`](super::ReceivedTip) items.
    pub const TIP_STREAM: &str = "PaymentsService.TipStream";
    /// `PaymentsService.AckTipReceived`: [`AckRequest`](super::AckRequest) → [`Empty`](super::Empty).
    pub const ACK_TIP_RECEIVED: &str = "PaymentsService.AckTipReceived";
    /// `ChatService.MediateKX`: [`MediateKxRequest`](super::MediateKxRequest) → [`Empty`](super::Empty).
    pub const MEDIATE_KX: &str = "ChatService.MediateKX";
    /// `ChatService.KXStream` (a stream): [`StreamRequest`](super::StreamRequest) →
    /// [`KxCompleted`](super::KxCompleted) items.
    pub const KX_STREAM: &str = "ChatService.KXStream";
    /// `ChatService.AckKXCompleted`: [`AckRequest`](super::AckRequest) → [`Empty`](super::Empty).
    pub const ACK_KX_COMPLETED: &str = "ChatService.AckKXCompleted";
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

/// An empty message: the params of `Version` and `UserPublicIdentity`, and the result
/// of `PM`, `TipUser` and the acks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Empty {}

/// `VersionResponse`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct VersionResponse {
    /// The client's version.
    #[serde(skip_serializing_if = "String::is_empty", alias = "app_version")]
    pub app_version: String,
    /// The Go runtime it was built with.
    #[serde(skip_serializing_if = "String::is_empty", alias = "go_runtime")]
    pub go_runtime: String,
    /// `brclient`, `brclientd`, ...
    #[serde(skip_serializing_if = "String::is_empty", alias = "app_name")]
    pub app_name: String,
}

/// `PublicIdentity`, the result of `UserPublicIdentity`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PublicIdentity {
    /// The user's name.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// The user's nick.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub nick: String,
    /// The signature public key.
    #[serde(
        with = "bytes",
        skip_serializing_if = "Vec::is_empty",
        alias = "sig_key"
    )]
    pub sig_key: Vec<u8>,
    /// The user id (32 bytes).
    #[serde(with = "bytes", skip_serializing_if = "Vec::is_empty")]
    pub identity: Vec<u8>,
}

impl PublicIdentity {
    /// The user id, if `identity` holds 32 bytes.
    pub fn peer_id(&self) -> Option<PeerId> {
        <[u8; 32]>::try_from(self.identity.as_slice())
            .ok()
            .map(PeerId::from_bytes)
    }
}

/// `MessageMode` of a private message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessageMode {
    /// `MESSAGE_MODE_NORMAL` (0); also what an unknown mode decodes to.
    #[default]
    Normal,
    /// `MESSAGE_MODE_ME` (1): a `/me` action.
    Me,
}

impl MessageMode {
    const fn name(self) -> &'static str {
        match self {
            Self::Normal => "MESSAGE_MODE_NORMAL",
            Self::Me => "MESSAGE_MODE_ME",
        }
    }

    fn is_normal(&self) -> bool {
        *self == Self::Normal
    }
}

impl Serialize for MessageMode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for MessageMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MessageMode;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a MessageMode name or number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MessageMode, E> {
                Ok(if v == "MESSAGE_MODE_ME" {
                    MessageMode::Me
                } else {
                    MessageMode::Normal
                })
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MessageMode, E> {
                Ok(if v == 1 {
                    MessageMode::Me
                } else {
                    MessageMode::Normal
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MessageMode, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(0))
            }
            fn visit_unit<E: de::Error>(self) -> Result<MessageMode, E> {
                Ok(MessageMode::Normal)
            }
        }
        d.deserialize_any(V)
    }
}

/// `RMPrivateMessage`: the text of a PM.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RmPrivateMessage {
    /// The text.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Normal or `/me`; the server ignores it when sending (always normal).
    #[serde(skip_serializing_if = "MessageMode::is_normal")]
    pub mode: MessageMode,
}

/// `PMRequest`: send a PM.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PmRequest {
    /// The recipient: the lowercase 64-hex user id, or a nick.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// The message; required (the server answers "msg is nil" without it).
    pub msg: RmPrivateMessage,
}

/// `PMStreamRequest`, `TipStreamRequest`, `TipProgressRequest` and `KXStreamRequest`:
/// open a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StreamRequest {
    /// Replay only unacknowledged items with a larger sequence id; 0 for all.
    #[serde(
        with = "u64s",
        skip_serializing_if = "is_zero_u64",
        alias = "unacked_from"
    )]
    pub unacked_from: u64,
}

/// `AckRequest`: cumulative acknowledgement of every item up to `sequence_id`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AckRequest {
    /// The last processed item's sequence id.
    #[serde(
        with = "u64s",
        skip_serializing_if = "is_zero_u64",
        alias = "sequence_id"
    )]
    pub sequence_id: u64,
}

/// `ReceivedPM`: one item of the PM stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceivedPm {
    /// The sender.
    #[serde(with = "peer")]
    pub uid: PeerId,
    /// The sender's nick in the receiving client's address book.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nick: String,
    /// The message.
    #[serde(default)]
    pub msg: RmPrivateMessage,
    /// The relay server's timestamp of the message, unix milliseconds.
    #[serde(
        default,
        with = "i64s",
        skip_serializing_if = "is_zero_i64",
        alias = "timestamp_ms"
    )]
    pub timestamp_ms: i64,
    /// Opaque, increasing; acknowledge with it.
    #[serde(
        default,
        with = "u64s",
        skip_serializing_if = "is_zero_u64",
        alias = "sequence_id"
    )]
    pub sequence_id: u64,
}

/// `TipUserRequest`: pay a user.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TipUserRequest {
    /// The payee: the lowercase 64-hex user id, or a nick.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub user: String,
    /// The amount in DCR; the server rounds it to whole atoms.
    #[serde(skip_serializing_if = "is_zero_f64", alias = "dcr_amount")]
    pub dcr_amount: f64,
    /// Invoice requests to make at most; must be > 0.
    #[serde(skip_serializing_if = "is_zero_i32", alias = "max_attempts")]
    pub max_attempts: i32,
}

/// `TipProgressEvent`: one item of the TipProgress stream (the payer's side).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TipProgressEvent {
    /// Opaque, increasing; acknowledge with it.
    #[serde(
        default,
        with = "u64s",
        skip_serializing_if = "is_zero_u64",
        alias = "sequence_id"
    )]
    pub sequence_id: u64,
    /// The payee.
    #[serde(with = "peer")]
    pub uid: PeerId,
    /// The payee's nick.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nick: String,
    /// The amount in milliatoms.
    #[serde(
        default,
        with = "i64s",
        skip_serializing_if = "is_zero_i64",
        alias = "amount_matoms"
    )]
    pub amount_matoms: i64,
    /// `true` only once paid.
    #[serde(default, skip_serializing_if = "is_false")]
    pub completed: bool,
    /// Invoice requests made so far.
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub attempt: i32,
    /// Why the attempt failed.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        alias = "attempt_err"
    )]
    pub attempt_err: String,
    /// `false` (with `completed` false) on the final failure.
    #[serde(default, skip_serializing_if = "is_false", alias = "will_retry")]
    pub will_retry: bool,
}

impl TipProgressEvent {
    /// Whether no further event follows for this tip: paid, or given up.
    pub const fn is_terminal(&self) -> bool {
        self.completed || !self.will_retry
    }
}

/// `ReceivedTip`: one item of the TipStream (the payee's side).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReceivedTip {
    /// The payer.
    #[serde(with = "peer")]
    pub uid: PeerId,
    /// The amount settled, in milliatoms.
    #[serde(
        default,
        with = "i64s",
        skip_serializing_if = "is_zero_i64",
        alias = "amount_matoms"
    )]
    pub amount_matoms: i64,
    /// Opaque, increasing; acknowledge with it.
    #[serde(
        default,
        with = "u64s",
        skip_serializing_if = "is_zero_u64",
        alias = "sequence_id"
    )]
    pub sequence_id: u64,
}

/// `MediateKXRequest`: ask `mediator`, a contact who knows `target`, to mediate a key
/// exchange between this client and `target`. The answer (`{}`) means the request
/// left; the exchange completes later, as a `KXCompleted` on the KX stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MediateKxRequest {
    /// The mediator: the lowercase 64-hex user id, or a nick, in the address book.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mediator: String,
    /// The user to exchange keys with: the lowercase 64-hex user id.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub target: String,
}

/// `KXCompleted`: one item of the KX stream, a key exchange that completed (the user is
/// now in the address book).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KxCompleted {
    /// Opaque, increasing; acknowledge with it.
    #[serde(
        default,
        with = "u64s",
        skip_serializing_if = "is_zero_u64",
        alias = "sequence_id"
    )]
    pub sequence_id: u64,
    /// The rendezvous point the exchange started from (empty for a mediated one).
    #[serde(
        default,
        with = "bytes",
        skip_serializing_if = "Vec::is_empty",
        alias = "initial_rendezvous"
    )]
    pub initial_rendezvous: Vec<u8>,
    /// The new contact.
    #[serde(with = "peer")]
    pub uid: PeerId,
    /// The new contact's nick.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub nick: String,
}

/// `KeepaliveStreamRequest`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KeepaliveStreamRequest {
    /// Milliseconds between events; the server's floor is 1000.
    #[serde(with = "i64s", skip_serializing_if = "is_zero_i64")]
    pub interval: i64,
}

/// `KeepaliveEvent`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct KeepaliveEvent {
    /// Unix seconds.
    #[serde(with = "i64s", skip_serializing_if = "is_zero_i64")]
    pub timestamp: i64,
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
    pub(crate) params: &'a P,
}

/// Anything the server sends, before it is told apart.
#[derive(Debug, Deserialize)]
pub(crate) struct Incoming {
    #[serde(default)]
    pub(crate) id: Option<serde_json::Value>,
    #[serde(default)]
    pub(crate) method: Option<String>,
    #[serde(default)]
    pub(crate) params: Option<serde_json::Value>,
    #[serde(default)]
    pub(crate) result: Option<serde_json::Value>,
    #[serde(default)]
    pub(crate) error: Option<ErrorObject>,
}

// Zero-value predicates for `skip_serializing_if`: serde passes references.
#[allow(clippy::trivially_copy_pass_by_ref)]
const fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}
#[allow(clippy::trivially_copy_pass_by_ref)]
const fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}
#[allow(clippy::trivially_copy_pass_by_ref)]
const fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}
#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero_f64(v: &f64) -> bool {
    *v == 0.0
}
#[allow(clippy::trivially_copy_pass_by_ref)]
const fn is_false(v: &bool) -> bool {
    !*v
}

/// Decodes protojson `bytes`: standard or URL-safe alphabet, padded or not.
///
/// # Errors
/// The base64 decoder's, as text.
pub fn decode_bytes(text: &str) -> Result<Vec<u8>, impl std::fmt::Display + use<>> {
    if text.contains(['-', '_']) {
        URL_SAFE_PAD_INDIFFERENT.decode(text)
    } else {
        STANDARD_PAD_INDIFFERENT.decode(text)
    }
}

/// Encodes protojson `bytes`: standard alphabet with padding.
pub(crate) fn encode_bytes(bytes: &[u8]) -> String {
    STANDARD.encode(bytes)
}

/// A 64-bit integer, from a JSON string or number.
macro_rules! int_as_string {
    ($name:ident, $ty:ty, $doc:literal) => {
        #[doc = $doc]
        mod $name {
            use serde::de::{self, Deserializer, Visitor};
            use serde::ser::Serializer;

            pub(super) fn serialize<S: Serializer>(v: &$ty, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(v)
            }

            pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<$ty, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $ty;
                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($ty), " as a string or number"))
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$ty, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, v: u64) -> Result<$ty, E> {
                        <$ty>::try_from(v).map_err(E::custom)
                    }
                    fn visit_i64<E: de::Error>(self, v: i64) -> Result<$ty, E> {
                        <$ty>::try_from(v).map_err(E::custom)
                    }
                    fn visit_f64<E: de::Error>(self, v: f64) -> Result<$ty, E> {
                        // protojson accepts an integral number in exponent form.
                        let n = v as $ty;
                        if n as f64 == v {
                            Ok(n)
                        } else {
                            Err(E::custom("not an integer"))
                        }
                    }
                }
                d.deserialize_any(V)
            }
        }
    };
}

int_as_string!(u64s, u64, "`uint64` as a decimal string.");
int_as_string!(i64s, i64, "`int64` as a decimal string.");

/// `bytes` as base64.
mod bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::encode_bytes(v))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        super::decode_bytes(&text).map_err(serde::de::Error::custom)
    }
}

/// A user id held in a `bytes` field: 32 bytes as base64.
mod peer {
    use serde::{Deserialize, Deserializer, Serializer};

    use brmcp_adapters::PeerId;

    pub(super) fn serialize<S: Serializer>(v: &PeerId, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::encode_bytes(v.as_bytes()))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PeerId, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        let bytes = super::decode_bytes(&text).map_err(serde::de::Error::custom)?;
        let len = bytes.len();
        <[u8; 32]>::try_from(bytes)
            .map(PeerId::from_bytes)
            .map_err(|_| serde::de::Error::custom(format_args!("user id is {len} bytes, not 32")))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn received_pm_decodes_string_ids_and_base64_uid() {
        let item: ReceivedPm = serde_json::from_value(json!({
            "uid": "ERERERERERERERERERERERERERERERERERERERERERE=",
            "nick": "alice",
            "msg": {"message": "hi bot", "mode": "MESSAGE_MODE_ME"},
            "timestampMs": "1765900000123",
            "sequenceId": "4294967461",
            "someNewField": true
        }))
        .unwrap();
        assert_eq!(item.uid, PeerId::from_bytes([0x11; 32]));
        assert_eq!(item.sequence_id, 4_294_967_461);
        assert_eq!(item.timestamp_ms, 1_765_900_000_123);
        assert_eq!(item.msg.mode, MessageMode::Me);
        assert_eq!(item.msg.message, "hi bot");
    }

    #[test]
    fn numbers_snake_case_url_safe_and_unpadded_are_accepted() {
        let item: ReceivedTip = serde_json::from_value(json!({
            "uid": "-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_-_8",
            "amount_matoms": 10_000_000,
            "sequence_id": 9_007_199_254_740_993u64,
        }))
        .unwrap();
        assert_eq!(item.amount_matoms, 10_000_000);
        assert_eq!(item.sequence_id, 9_007_199_254_740_993);
        assert_eq!(item.uid.as_bytes()[0], 0xfb);
    }

    #[test]
    fn zero_values_are_omitted_and_64_bit_numbers_are_strings() {
        assert_eq!(
            serde_json::to_value(StreamRequest::default()).unwrap(),
            json!({})
        );
        assert_eq!(
            serde_json::to_value(AckRequest {
                sequence_id: u64::MAX
            })
            .unwrap(),
            json!({"sequenceId": "18446744073709551615"})
        );
        let event = TipProgressEvent {
            sequence_id: 5,
            uid: PeerId::from_bytes([0x22; 32]),
            nick: String::new(),
            amount_matoms: 10_000_000,
            completed: true,
            attempt: 1,
            attempt_err: String::new(),
            will_retry: false,
        };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            json!({
                "sequenceId": "5",
                "uid": "IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=",
                "amountMatoms": "10000000",
                "completed": true,
                "attempt": 1
            })
        );
        assert_eq!(serde_json::to_string(&Empty {}).unwrap(), "{}");
    }

    #[test]
    fn short_uid_is_refused() {
        let err = serde_json::from_value::<ReceivedTip>(json!({"uid": "AAAA"})).unwrap_err();
        assert!(err.to_string().contains("3 bytes, not 32"), "{err}");
    }
}
