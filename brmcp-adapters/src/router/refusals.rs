//! Telling a refused peer why: with [`RouterConfig::tell_refused`] on, a request from a
//! peer the authorizer refuses is answered [`NOT_ALLOWED`] on its session, so its
//! client fails at once instead of waiting out its timeout.
//!
//! Bounded against a refused peer's flood: only a request that fits one part is read
//! (a refused peer gets no reassembly storage), each peer is answered at most once per
//! [`REFUSAL_REPLY_INTERVAL`], the peers remembered are at most [`REFUSAL_PEERS`], and
//! the replies share the router's bounded reply queue.
//!
//! [`RouterConfig::tell_refused`]: crate::RouterConfig::tell_refused

use std::collections::HashMap;
use std::time::Duration;

use brmcp_wire::Part;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage};
use tokio::time::Instant;

use super::Driver;
use crate::peer::PeerId;
use crate::protocol::NOT_ALLOWED;

/// How often one refused peer is answered at most: once per 10 seconds. A client's
/// first request learns why at once; a flood from one peer costs one reply per interval.
pub const REFUSAL_REPLY_INTERVAL: Duration = Duration::from_secs(10);

/// Refused peers whose last answer is remembered: 1024. Past it the entries older than
/// [`REFUSAL_REPLY_INTERVAL`] go, and if none is, a new peer is not answered (a flood
/// of identities is bounded by this and the reply queue).
pub const REFUSAL_PEERS: usize = 1024;

/// The message of the [`NOT_ALLOWED`] answer.
pub const NOT_ALLOWED_MESSAGE: &str =
    "not allowed: this bot does not serve your identity (it is not on the bot's allowlist)";

/// When each refused peer was last answered.
#[derive(Default)]
pub(super) struct RefusalReplies {
    last: HashMap<PeerId, Instant>,
}

impl RefusalReplies {
    /// Whether `peer` may be answered at `now`.
    fn may_answer(&mut self, peer: &PeerId, now: Instant) -> bool {
        if let Some(at) = self.last.get(peer) {
            return now.duration_since(*at) >= REFUSAL_REPLY_INTERVAL;
        }
        if self.last.len() >= REFUSAL_PEERS {
            self.last
                .retain(|_, at| now.duration_since(*at) < REFUSAL_REPLY_INTERVAL);
        }
        self.last.len() < REFUSAL_PEERS
    }

    fn answered(&mut self, peer: PeerId, now: Instant) {
        self.last.insert(peer, now);
    }
}

impl Driver {
    /// Answers a refused peer's one-part request [`NOT_ALLOWED`], within the bounds.
    pub(super) fn tell_refused(&mut self, peer: PeerId, part: &Part<'_>) {
        if !self.config.tell_refused || part.total() != 1 {
            return;
        }
        let now = Instant::now();
        if !self.refusal_replies.may_answer(&peer, now) {
            return;
        }
        let mut payload = vec![0; part.decoded_len_max()];
        let Ok(len) = part.decode_body(&mut payload) else {
            return;
        };
        let Ok(JsonRpcMessage::Request(request)) =
            serde_json::from_slice::<ClientJsonRpcMessage>(&payload[..len])
        else {
            return;
        };
        self.refusal_replies.answered(peer, now);
        self.reply_error(
            peer,
            *part.sid(),
            request.id,
            NOT_ALLOWED,
            NOT_ALLOWED_MESSAGE,
        );
    }
}
