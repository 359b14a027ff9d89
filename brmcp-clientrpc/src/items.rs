//! Stream items as the handlers get them: the generated message with its user id
//! checked (32 bytes, a [`PeerId`]) and its text message present. Each deserializes
//! from protojson as the host reads it (fields a newer server adds are ignored).

use brmcp_adapters::PeerId;
use serde::{Deserialize, Deserializer};

use crate::proto::{self, RmPrivateMessage, Unknown};

/// `Deserialize` from protojson through the generated message.
macro_rules! from_protojson {
    ($item:ty, $message:ty) => {
        impl<'de> Deserialize<'de> for $item {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let message: $message = proto::deserialize(d, Unknown::Ignore)?;
                Self::try_from(message).map_err(serde::de::Error::custom)
            }
        }
    };
}

from_protojson!(ReceivedPm, proto::ReceivedPm);
from_protojson!(ReceivedTip, proto::ReceivedTip);
from_protojson!(TipProgressEvent, proto::TipProgressEvent);
from_protojson!(KxCompleted, proto::KxCompleted);
from_protojson!(ReceivedPost, proto::ReceivedPost);

/// A user id field that does not hold 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("user id is {0} bytes, not 32")]
pub struct BadUid(pub usize);

fn peer(uid: &[u8]) -> Result<PeerId, BadUid> {
    <[u8; 32]>::try_from(uid)
        .map(PeerId::from_bytes)
        .map_err(|_| BadUid(uid.len()))
}

/// A `ReceivedPM` ([`proto::ReceivedPm`]): one item of the PM stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedPm {
    /// The sender.
    pub uid: PeerId,
    /// The sender's nick in the receiving client's address book.
    pub nick: String,
    /// The message (empty when the server sent none).
    pub msg: RmPrivateMessage,
    /// The relay server's timestamp of the message, unix milliseconds.
    pub timestamp_ms: i64,
    /// Opaque, increasing; acknowledge with it.
    pub sequence_id: u64,
}

impl TryFrom<proto::ReceivedPm> for ReceivedPm {
    type Error = BadUid;

    fn try_from(m: proto::ReceivedPm) -> Result<Self, BadUid> {
        Ok(Self {
            uid: peer(&m.uid)?,
            nick: m.nick,
            msg: m.msg.unwrap_or_default(),
            timestamp_ms: m.timestamp_ms,
            sequence_id: m.sequence_id,
        })
    }
}

/// A `ReceivedTip` ([`proto::ReceivedTip`]): one item of the TipStream (the payee's
/// side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedTip {
    /// The payer.
    pub uid: PeerId,
    /// The amount settled, in milliatoms.
    pub amount_matoms: i64,
    /// Opaque, increasing; acknowledge with it.
    pub sequence_id: u64,
}

impl TryFrom<proto::ReceivedTip> for ReceivedTip {
    type Error = BadUid;

    fn try_from(m: proto::ReceivedTip) -> Result<Self, BadUid> {
        Ok(Self {
            uid: peer(&m.uid)?,
            amount_matoms: m.amount_matoms,
            sequence_id: m.sequence_id,
        })
    }
}

/// A `TipProgressEvent` ([`proto::TipProgressEvent`]): one item of the TipProgress
/// stream (the payer's side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TipProgressEvent {
    /// Opaque, increasing; acknowledge with it.
    pub sequence_id: u64,
    /// The payee.
    pub uid: PeerId,
    /// The payee's nick.
    pub nick: String,
    /// The amount in milliatoms.
    pub amount_matoms: i64,
    /// `true` only once paid.
    pub completed: bool,
    /// Invoice requests made so far.
    pub attempt: i32,
    /// Why the attempt failed.
    pub attempt_err: String,
    /// `false` (with `completed` false) on the final failure.
    pub will_retry: bool,
}

impl TipProgressEvent {
    /// Whether no further event follows for this tip: paid, or given up.
    pub const fn is_terminal(&self) -> bool {
        self.completed || !self.will_retry
    }
}

impl TryFrom<proto::TipProgressEvent> for TipProgressEvent {
    type Error = BadUid;

    fn try_from(m: proto::TipProgressEvent) -> Result<Self, BadUid> {
        Ok(Self {
            sequence_id: m.sequence_id,
            uid: peer(&m.uid)?,
            nick: m.nick,
            amount_matoms: m.amount_matoms,
            completed: m.completed,
            attempt: m.attempt,
            attempt_err: m.attempt_err,
            will_retry: m.will_retry,
        })
    }
}

/// A `KXCompleted` ([`proto::KxCompleted`]): one item of the KX stream, a key exchange
/// that completed (the user is now in the address book).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KxCompleted {
    /// Opaque, increasing; acknowledge with it.
    pub sequence_id: u64,
    /// The rendezvous point the exchange started from (empty for a mediated one).
    pub initial_rendezvous: Vec<u8>,
    /// The new contact.
    pub uid: PeerId,
    /// The new contact's nick.
    pub nick: String,
}

impl TryFrom<proto::KxCompleted> for KxCompleted {
    type Error = BadUid;

    fn try_from(m: proto::KxCompleted) -> Result<Self, BadUid> {
        Ok(Self {
            sequence_id: m.sequence_id,
            initial_rendezvous: m.initial_rendezvous,
            uid: peer(&m.uid)?,
            nick: m.nick,
        })
    }
}

/// A `ReceivedPost` ([`proto::ReceivedPost`]): one item of the posts stream, a post
/// by a user subscribed to (relayed by them or by someone else).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedPost {
    /// Opaque, increasing; acknowledge with it.
    pub sequence_id: u64,
    /// Who the client received it from (may differ from the author).
    pub relayer: PeerId,
    /// The post id (`PostSummary.id`, brclient's hash of the post).
    pub id: Vec<u8>,
    /// The author (`PostSummary.author_id`).
    pub author: PeerId,
    /// The author's nick as reported.
    pub author_nick: String,
    /// The post's date, Unix seconds.
    pub date: i64,
    /// Its title, included or suggested.
    pub title: String,
    /// The post's attributes (`main` holds its text).
    pub attributes: std::collections::BTreeMap<String, String>,
}

impl ReceivedPost {
    /// The post's text: its `main` attribute (empty without one).
    pub fn text(&self) -> &str {
        self.attributes.get("main").map_or("", String::as_str)
    }
}

impl TryFrom<proto::ReceivedPost> for ReceivedPost {
    type Error = BadUid;

    fn try_from(m: proto::ReceivedPost) -> Result<Self, BadUid> {
        let summary = m.summary.unwrap_or_default();
        Ok(Self {
            sequence_id: m.sequence_id,
            relayer: peer(&m.relayer_id)?,
            id: summary.id,
            author: peer(&summary.author_id)?,
            author_nick: summary.author_nick,
            date: summary.date,
            title: summary.title,
            attributes: m.post.unwrap_or_default().attributes.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn items_deserialize_from_protojson_with_a_checked_uid() {
        let event: TipProgressEvent = serde_json::from_value(json!({
            "sequenceId": "5",
            "uid": "IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=",
            "amountMatoms": "10000000",
            "attempt": 1,
            "attemptErr": "no route",
            "isSending": true
        }))
        .unwrap();
        assert_eq!(event.uid, PeerId::from_bytes([0x22; 32]));
        assert!(event.is_terminal() && !event.completed);
        let err = serde_json::from_value::<ReceivedTip>(json!({"uid": "AAAA"})).unwrap_err();
        assert!(err.to_string().contains("3 bytes, not 32"), "{err}");
        let err = serde_json::from_value::<ReceivedPm>(json!({"nick": "x"})).unwrap_err();
        assert!(err.to_string().contains("0 bytes, not 32"), "{err}");
        let uid = "IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=";
        let post: ReceivedPost = serde_json::from_value(json!({
            "sequenceId": "9",
            "relayerId": uid,
            "summary": {"id": "AQI=", "authorId": uid, "authorNick": "alice", "date": "5"},
            "post": {"version": "1", "attributes": {"main": "hello"}},
            "newerField": 1
        }))
        .unwrap();
        assert_eq!(
            (post.author, post.text(), post.id.as_slice()),
            (PeerId::from_bytes([0x22; 32]), "hello", &[1u8, 2][..])
        );
        // A post with no author (no summary) is refused.
        let err = serde_json::from_value::<ReceivedPost>(json!({"relayerId": uid})).unwrap_err();
        assert!(err.to_string().contains("0 bytes, not 32"), "{err}");
    }
}
