//! Telling a refused peer why: with [`RouterConfig::tell_refused`] on, a request from a
//! peer the authorizer refuses is answered [`NOT_ALLOWED`] on its session, so its
//! client fails at once instead of waiting out its timeout.
//!
//! Bounded against a refused peer's flood: a refused peer gets no reassembly storage.
//! A one-part request is read whole; of a request in several parts only the first part
//! is read, and only as far as its `id` and `method` (a JSON-RPC request names them
//! before its `params`, as rmcp and the Go SDK write it): one whose first part does
//! not name both is not answered. Each peer is answered at most once per
//! [`REFUSAL_REPLY_INTERVAL`], the peers remembered are at most [`REFUSAL_PEERS`], and
//! the replies share the router's bounded reply queue.
//!
//! [`RouterConfig::tell_refused`]: crate::RouterConfig::tell_refused

use std::collections::HashMap;
use std::time::Duration;

use brmcp_wire::Part;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, RequestId};
use serde_json::{Deserializer, Value};
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
    /// Answers a refused peer's request [`NOT_ALLOWED`], within the bounds: read from
    /// its one part, or from the first of its parts (see the module docs).
    pub(super) fn tell_refused(&mut self, peer: PeerId, part: &Part<'_>) {
        if !self.config.tell_refused || part.seq() != 1 {
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
        let payload = &payload[..len];
        let id = if part.total() == 1 {
            match serde_json::from_slice::<ClientJsonRpcMessage>(payload) {
                Ok(JsonRpcMessage::Request(request)) => Some(request.id),
                _ => None,
            }
        } else {
            request_id_of_head(payload)
        };
        let Some(id) = id else {
            return;
        };
        self.refusal_replies.answered(peer, now);
        self.reply_error(peer, *part.sid(), id, NOT_ALLOWED, NOT_ALLOWED_MESSAGE);
    }
}

/// Members of a request's head read at most before its `id` and `method`: 8, more
/// than a JSON-RPC request has before its `params` (`jsonrpc`, `id`, `method`).
const MAX_HEAD_MEMBERS: usize = 8;

/// The `id` of the JSON-RPC request whose text starts with `head` (the first part of
/// a message in several), once its top-level members have named both `id` and a
/// `method` string; `None` when `head` ends first, or is no request.
fn request_id_of_head(head: &[u8]) -> Option<RequestId> {
    let mut rest = skip_ws(head).strip_prefix(b"{")?;
    let (mut id, mut method) = (None, false);
    for _ in 0..MAX_HEAD_MEMBERS {
        rest = skip_ws(rest);
        let mut keys = Deserializer::from_slice(rest).into_iter::<String>();
        let key = keys.next()?.ok()?;
        rest = skip_ws(&rest[keys.byte_offset()..]).strip_prefix(b":")?;
        rest = skip_ws(rest);
        let end = match key.as_str() {
            "id" => {
                let mut values = Deserializer::from_slice(rest).into_iter::<RequestId>();
                id = Some(values.next()?.ok()?);
                values.byte_offset()
            }
            "method" => {
                let mut values = Deserializer::from_slice(rest).into_iter::<String>();
                values.next()?.ok()?;
                method = true;
                values.byte_offset()
            }
            _ => {
                let mut values = Deserializer::from_slice(rest).into_iter::<Value>();
                values.next()?.ok()?;
                values.byte_offset()
            }
        };
        // A value the head ends on may be cut short (a number): not trusted.
        let after = skip_ws(&rest[end..]);
        if after.is_empty() {
            return None;
        }
        if method && id.is_some() {
            return id;
        }
        rest = after.strip_prefix(b",")?;
    }
    None
}

fn skip_ws(text: &[u8]) -> &[u8] {
    let start = text
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(text.len());
    &text[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_requests_id_is_read_from_the_head_of_its_text_alone() {
        let full = r#"{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"a":"bbbb"}}"#;
        let cut = |n: usize| request_id_of_head(&full.as_bytes()[..n]);
        assert_eq!(cut(full.len()), Some(RequestId::Number(7)));
        let after_method = full.find(",\"params\"").unwrap();
        assert_eq!(cut(after_method + 1), Some(RequestId::Number(7)));
        // Cut before the method is whole: not known to be a request.
        assert_eq!(cut(after_method - 3), None);
        assert_eq!(cut(10), None);
        let text = |t: &str| request_id_of_head(t.as_bytes());
        assert_eq!(
            text(r#" { "method" : "tools/call" , "id" : "k-1", "params": {"#),
            Some(RequestId::String("k-1".into()))
        );
        // An id the head ends on may be cut short.
        assert_eq!(text(r#"{"method":"a","id":12"#), None);
        assert_eq!(text(r#"{"method":"a","id":12 "#), None);
        // Go's order: method before id.
        assert_eq!(
            text(r#"{"jsonrpc":"2.0","method":"tools/call","id":3,"params":{"#),
            Some(RequestId::Number(3))
        );
        // A notification, a response, and no object: not answered.
        assert_eq!(
            text(r#"{"jsonrpc":"2.0","method":"notifications/x","params":{"#),
            None
        );
        assert_eq!(text(r#"{"jsonrpc":"2.0","id":3,"result":{"#), None);
        assert_eq!(text(r#"{"jsonrpc":"2.0","id":{"x":1},"method":"a","#), None);
        assert_eq!(text("[1,2]"), None);
        assert_eq!(text(""), None);
        // A head of many members before the method is not read to its end.
        let long = format!(
            "{{{}\"id\":1,\"method\":\"a\",",
            (0..MAX_HEAD_MEMBERS)
                .map(|i| format!("\"k{i}\":0,"))
                .collect::<String>()
        );
        assert_eq!(text(&long), None);
    }
}
