//! The vocabulary of the kept state: one change ([`Op`]), the ids and records changes
//! carry, and how they are written (hex ids, logs by name). Shared by the journal's
//! lines, the snapshot and the running devnet that makes the changes.

use serde::{Deserialize, Serialize};

use crate::node::{Event, Log};
use crate::relay::Queued;

/// A 32-byte user id, written as 64 lowercase hex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Uid(pub(crate) [u8; 32]);

impl Serialize for Uid {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(self.0))
    }
}

impl<'de> Deserialize<'de> for Uid {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let mut out = [0u8; 32];
        hex::decode_to_slice(&text, &mut out).map_err(serde::de::Error::custom)?;
        Ok(Self(out))
    }
}

/// `[u8; 32]` fields as hex (for the stored stream items).
pub(crate) mod hex32 {
    use serde::{Deserialize as _, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(v))
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        super::Uid::deserialize(d).map(|u| u.0)
    }
}

/// A log by its name (`pm`, `tipprogress`, `tipstream`, `kx`, `posts`, `poststatus`).
mod kind_name {
    use serde::{Deserialize as _, Deserializer, Serializer};

    use super::Log;

    pub(crate) fn serialize<S: Serializer>(k: &Log, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.name())
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Log, D::Error> {
        let name = String::deserialize(d)?;
        Log::ALL
            .into_iter()
            .find(|k| k.name() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown stream {name:?}")))
    }
}

/// A tip scheduled by `TipUser` and not yet ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PendingTip {
    pub(crate) id: u64,
    pub(crate) payer: Uid,
    pub(crate) payee: Uid,
    pub(crate) matoms: i64,
    pub(crate) max_attempts: i32,
    /// Invoice requests made so far.
    pub(crate) attempts: i32,
}

/// A tip paid, as both wallets list it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TipRecord {
    /// Devnet clock, unix milliseconds.
    pub(crate) at_ms: i64,
    pub(crate) payer: Uid,
    pub(crate) payee: Uid,
    pub(crate) matoms: i64,
}

/// One change to the kept state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Op {
    /// A node exists (its record is created if missing; the nick is its latest).
    Node { uid: Uid, nick: String },
    /// An address-book entry added or renamed.
    Contact { node: Uid, uid: Uid, nick: String },
    /// An item stored in a replay log.
    Store {
        node: Uid,
        #[serde(with = "kind_name")]
        kind: Log,
        event: Event,
    },
    /// A cumulative acknowledgement.
    Ack {
        node: Uid,
        #[serde(with = "kind_name")]
        kind: Log,
        seq: u64,
    },
    /// The next item of a log opens this file.
    NextFile {
        node: Uid,
        #[serde(with = "kind_name")]
        kind: Log,
        fid: u32,
    },
    /// A wallet's balance, in milliatoms.
    Balance { uid: Uid, matoms: i64 },
    /// A PM queued at the relay.
    Enqueue { to: Uid, item: Queued },
    /// A queue handed to its node (what was delivered is in `Store`s of the same
    /// group); `expired` of it were dropped as too old.
    Flush { to: Uid, expired: u64 },
    /// The first PM of a queue handed to its node (in a `Store` of the same group),
    /// or dropped as too old when `expired` is 1.
    Dequeue { to: Uid, expired: u64 },
    /// A tip scheduled.
    TipStart { tip: PendingTip },
    /// A tip's invoice requests so far.
    TipAttempt { id: u64, attempts: i32 },
    /// A tip ended (paid or given up).
    TipEnd { id: u64 },
    /// A tip paid, for the wallets' recent tips.
    Tipped { record: TipRecord },
    /// A user subscribed to (`on`) or unsubscribed from an author's posts.
    PostSub {
        author: Uid,
        subscriber: Uid,
        on: bool,
    },
}
