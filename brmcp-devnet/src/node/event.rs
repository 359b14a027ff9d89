//! A stored stream item and its protojson encoding: what a replay log keeps and what a
//! stream notification carries.

use std::collections::BTreeMap;

use brmcp_clientrpc::proto::{self, RmPrivateMessage};
use serde::{Deserialize, Serialize};

use crate::codec::encode;
use crate::durable::hex32;

/// A stored stream item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Event {
    Pm {
        #[serde(with = "hex32")]
        uid: [u8; 32],
        nick: String,
        message: String,
        mode: i32,
        timestamp_ms: i64,
    },
    TipProgress {
        #[serde(with = "hex32")]
        uid: [u8; 32],
        nick: String,
        amount_matoms: i64,
        completed: bool,
        attempt: i32,
        attempt_err: String,
        will_retry: bool,
    },
    TipReceived {
        #[serde(with = "hex32")]
        uid: [u8; 32],
        amount_matoms: i64,
    },
    Kx {
        #[serde(with = "hex32")]
        uid: [u8; 32],
        nick: String,
    },
    /// A post received from a subscription (the author relayed it).
    Post {
        #[serde(with = "hex32")]
        id: [u8; 32],
        #[serde(with = "hex32")]
        author: [u8; 32],
        author_nick: String,
        /// Unix seconds.
        date: i64,
        title: String,
        version: u64,
        attributes: BTreeMap<String, String>,
    },
    /// A status update of a post (a comment), as the receiving client records it.
    PostStatus {
        /// Who the update came from (the commenter, or the author relaying it).
        #[serde(with = "hex32")]
        relayer: [u8; 32],
        #[serde(with = "hex32")]
        post_id: [u8; 32],
        #[serde(with = "hex32")]
        status_from: [u8; 32],
        status_from_nick: String,
        version: u64,
        /// `PostMetadataStatus.from`: the status creator's id in hex.
        from: String,
        /// `PostMetadataStatus.link`: the post id in hex.
        link: String,
        attributes: BTreeMap<String, String>,
    },
}

impl Event {
    /// The protojson params, with `sequence_id` set (0 leaves it out, as when stored).
    pub(crate) fn encode(&self, seq: u64) -> String {
        match self {
            Self::Pm {
                uid,
                nick,
                message,
                mode,
                timestamp_ms,
            } => encode(&proto::ReceivedPm {
                uid: uid.to_vec(),
                nick: nick.clone(),
                msg: Some(RmPrivateMessage {
                    message: message.clone(),
                    mode: *mode,
                }),
                timestamp_ms: *timestamp_ms,
                sequence_id: seq,
            }),
            Self::TipProgress {
                uid,
                nick,
                amount_matoms,
                completed,
                attempt,
                attempt_err,
                will_retry,
            } => encode(&proto::TipProgressEvent {
                sequence_id: seq,
                uid: uid.to_vec(),
                nick: nick.clone(),
                amount_matoms: *amount_matoms,
                completed: *completed,
                attempt: *attempt,
                attempt_err: attempt_err.clone(),
                will_retry: *will_retry,
            }),
            Self::TipReceived { uid, amount_matoms } => encode(&proto::ReceivedTip {
                uid: uid.to_vec(),
                amount_matoms: *amount_matoms,
                sequence_id: seq,
            }),
            Self::Kx { uid, nick } => encode(&proto::KxCompleted {
                sequence_id: seq,
                uid: uid.to_vec(),
                nick: nick.clone(),
                initial_rendezvous: Vec::new(),
            }),
            Self::Post {
                id,
                author,
                author_nick,
                date,
                title,
                version,
                attributes,
            } => encode(&proto::ReceivedPost {
                sequence_id: seq,
                relayer_id: author.to_vec(),
                summary: Some(proto::PostSummary {
                    id: id.to_vec(),
                    from: author.to_vec(),
                    author_id: author.to_vec(),
                    author_nick: author_nick.clone(),
                    date: *date,
                    // No status updates yet: brclient records the post's own date.
                    last_status_ts: *date,
                    title: title.clone(),
                }),
                post: Some(proto::PostMetadata {
                    version: *version,
                    attributes: attributes.clone().into_iter().collect(),
                }),
            }),
            Self::PostStatus {
                relayer,
                post_id,
                status_from,
                status_from_nick,
                version,
                from,
                link,
                attributes,
            } => encode(&proto::ReceivedPostStatus {
                sequence_id: seq,
                relayer_id: relayer.to_vec(),
                post_id: post_id.to_vec(),
                status_from: status_from.to_vec(),
                status_from_nick: status_from_nick.clone(),
                status: Some(proto::PostMetadataStatus {
                    version: *version,
                    from: from.clone(),
                    link: link.clone(),
                    attributes: attributes.clone().into_iter().collect(),
                }),
            }),
        }
    }
}
