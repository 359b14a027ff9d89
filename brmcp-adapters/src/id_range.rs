//! Ranges of a client's JSON-RPC ids, for a session that outlives its services.
//!
//! rmcp numbers a client service's requests and progress tokens from 0. When a session
//! gets a new service (a parked [`Client`](crate::Client) revived, or a saved session
//! resumed by a new process), its ids would repeat those of the services before it, and
//! a late answer to an earlier service's timed-out request would complete a new one.
//! So each service sends its numbers moved into a range of its own, `index · 2^32` up,
//! and answers and progress outside that range are dropped: they belong to an earlier
//! service. Subscription ids (our listen's id) come back moved too; the server's own
//! ids pass untouched.

use rmcp::model::{
    ClientNotification, GetMeta, JsonRpcMessage, NumberOrString, ServerJsonRpcMessage,
    ServerNotification, ServerResult,
};
use rmcp::service::{RoleClient, TxJsonRpcMessage};

/// Width of one range: rmcp draws ids from a counter starting at 0, and no service
/// sends anywhere near 2^32 requests.
pub const ID_RANGE_SPAN: i64 = 1 << 32;

/// The last range: `2^20 - 1`, so every id stays below `2^52`, exact as a JSON number
/// in every reader (JavaScript's included). A `Client` that parks 100 ms after each
/// use (its default) and is used again at once, again and again, runs through them in
/// a day, and then stays running; a bridge's link (parked after 30 s) in a year.
pub const MAX_ID_RANGE: u64 = (1 << 20) - 1;

/// One range's move of a client's ids: `base = index · 2^32`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    base: i64,
}

impl IdRange {
    /// The range of `index` (at most [`MAX_ID_RANGE`]); range 0 moves nothing.
    pub fn new(index: u64) -> Self {
        let index = i64::try_from(index.min(MAX_ID_RANGE)).unwrap_or(0);
        Self {
            base: index.saturating_mul(ID_RANGE_SPAN),
        }
    }

    /// A number of the service to the wire's.
    fn out(self, n: &mut NumberOrString) {
        if let NumberOrString::Number(n) = n {
            *n = n.saturating_add(self.base);
        }
    }

    /// A wire number back to the service's; `false` if it is not this generation's.
    fn back(self, n: &mut NumberOrString) -> bool {
        let range = self.base..self.base.saturating_add(ID_RANGE_SPAN);
        match n {
            NumberOrString::Number(v) if range.contains(v) => {
                *v -= self.base;
                true
            }
            NumberOrString::Number(_) => false,
            // rmcp takes "5" for its id 5, so a server that echoes ids as strings is
            // answered too; any other string is none of our ids. The first generation
            // passes it on as an unshifted session would.
            NumberOrString::String(text) => match text.parse::<i64>() {
                Ok(v) if range.contains(&v) => {
                    *n = NumberOrString::Number(v - self.base);
                    true
                }
                _ => self.base == 0,
            },
        }
    }

    /// `id` back to the service's if it is a number of this generation's; anything
    /// else (an id the server drew) as it is.
    fn back_if_ours(self, id: &mut NumberOrString) {
        let mut moved = id.clone();
        if matches!(moved, NumberOrString::Number(_)) && self.back(&mut moved) {
            *id = moved;
        }
    }

    /// Moves the numbers of a message the client sends (its request's id and
    /// progress token, the request a cancellation names) into the range.
    pub fn shift_out(self, item: &mut TxJsonRpcMessage<RoleClient>) {
        if self.base == 0 {
            return;
        }
        match item {
            JsonRpcMessage::Request(r) => {
                self.out(&mut r.id);
                let meta = r.request.get_meta_mut();
                if let Some(mut token) = meta.get_progress_token() {
                    self.out(&mut token.0);
                    meta.set_progress_token(token);
                }
            }
            JsonRpcMessage::Notification(n) => {
                if let ClientNotification::CancelledNotification(c) = &mut n.notification
                    && let Some(id) = &mut c.params.request_id
                {
                    self.out(id);
                }
            }
            // Answers to the server's requests carry the server's ids.
            JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
        }
    }

    /// Moves the numbers of a message the server sent back to the client's; `false`
    /// for an answer or progress outside the range (an earlier range's).
    pub fn shift_back(self, message: &mut ServerJsonRpcMessage) -> bool {
        if self.base == 0 {
            return true;
        }
        match message {
            JsonRpcMessage::Response(r) => {
                // A listen's result names its subscription by the listen's id.
                if let ServerResult::SubscriptionsListenResult(listen) = &mut r.result
                    && let Some(mut id) = listen.meta.subscription_id()
                {
                    self.back_if_ours(&mut id);
                    listen.meta.set_subscription_id(id);
                }
                self.back(&mut r.id)
            }
            JsonRpcMessage::Error(e) => e.id.as_mut().is_none_or(|id| self.back(id)),
            JsonRpcMessage::Notification(n) => {
                // A notification of a subscription names it by our listen's id.
                if let Some(mut id) = n.notification.get_meta().subscription_id() {
                    self.back_if_ours(&mut id);
                    n.notification.get_meta_mut().set_subscription_id(id);
                }
                match &mut n.notification {
                    ServerNotification::ProgressNotification(p) => {
                        self.back(&mut p.params.progress_token.0)
                    }
                    // The server's own request (legacy lifecycle) keeps its id; our
                    // listen (2026-07-28) is moved back.
                    ServerNotification::CancelledNotification(c) => {
                        if let Some(id) = &mut c.params.request_id {
                            self.back_if_ours(id);
                        }
                        true
                    }
                    _ => true,
                }
            }
            // The server's requests carry its own ids.
            JsonRpcMessage::Request(_) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn out(shift: IdRange, message: Value) -> Value {
        let mut item: TxJsonRpcMessage<RoleClient> = serde_json::from_value(message).unwrap();
        shift.shift_out(&mut item);
        serde_json::to_value(&item).unwrap()
    }

    fn back(shift: IdRange, message: Value) -> Option<Value> {
        let mut item: ServerJsonRpcMessage = serde_json::from_value(message).unwrap();
        shift
            .shift_back(&mut item)
            .then(|| serde_json::to_value(&item).unwrap())
    }

    #[test]
    fn each_generation_sends_and_takes_its_own_range_only() {
        let second = IdRange::new(2);
        let base = 2 * ID_RANGE_SPAN;
        let request = out(
            second,
            json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                   "params": {"name": "t", "_meta": {"progressToken": 4}}}),
        );
        assert_eq!(request["id"], base + 3);
        assert_eq!(request["params"]["_meta"]["progressToken"], base + 4);
        let cancel = out(
            second,
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": 3}}),
        );
        assert_eq!(cancel["params"]["requestId"], base + 3);
        // An answer to the server's request keeps the server's id.
        let answer = out(second, json!({"jsonrpc": "2.0", "id": 3, "result": {}}));
        assert_eq!(answer["id"], 3);

        let ok = |id: Value| json!({"jsonrpc": "2.0", "id": id, "result": {}});
        assert_eq!(back(second, ok(json!(base + 3))).unwrap()["id"], 3);
        // The same number from the generation before, or the one after: not ours.
        assert!(back(second, ok(json!(3))).is_none());
        assert!(back(second, ok(json!(base - 1))).is_none());
        assert!(back(second, ok(json!(base + ID_RANGE_SPAN))).is_none());
        assert!(back(second, ok(json!("brmcp-x"))).is_none());
        let error =
            |id: Value| json!({"jsonrpc": "2.0", "id": id, "error": {"code": -1, "message": "m"}});
        assert!(back(second, error(json!(3))).is_none());
        assert_eq!(back(second, error(json!(base))).unwrap()["id"], 0);
        let progress = |token: i64| {
            json!({"jsonrpc": "2.0", "method": "notifications/progress",
                   "params": {"progressToken": token, "progress": 1}})
        };
        assert!(back(second, progress(4)).is_none());
        let mine = back(second, progress(base + 4)).unwrap();
        assert_eq!(mine["params"]["progressToken"], 4);
        // The server's own requests and other notifications pass untouched.
        let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
        assert_eq!(back(second, ping.clone()).unwrap()["id"], 3);

        // An id echoed as a numeric string is taken as the number (rmcp does so);
        // another generation's, or any other string, is not ours.
        assert_eq!(
            back(second, ok(json!((base + 3).to_string()))).unwrap()["id"],
            3
        );
        assert!(back(second, ok(json!("3"))).is_none());
        assert!(back(second, ok(json!("-1"))).is_none());

        // A subscription is named by our listen's id: on its notifications, on the
        // listen's result and on the server's cancellation of it. The server's own
        // request keeps its id when it cancels it.
        let sub = "io.modelcontextprotocol/subscriptionId";
        let changed = back(
            second,
            json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                   "params": {"_meta": {sub: base + 5}}}),
        )
        .unwrap();
        assert_eq!(changed["params"]["_meta"][sub], 5);
        let listened = back(
            second,
            json!({"jsonrpc": "2.0", "id": base + 5,
                   "result": {"resultType": "complete", "_meta": {sub: base + 5}}}),
        )
        .unwrap();
        assert_eq!(
            (
                listened["id"].clone(),
                listened["result"]["_meta"][sub].clone()
            ),
            (json!(5), json!(5))
        );
        let cancel = |id: Value| {
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                   "params": {"requestId": id}})
        };
        let ours = back(second, cancel(json!(base + 5))).unwrap();
        assert_eq!(ours["params"]["requestId"], 5);
        let theirs = back(second, cancel(json!(5))).unwrap();
        assert_eq!(theirs["params"]["requestId"], 5);
        let named = back(second, cancel(json!("srv-1"))).unwrap();
        assert_eq!(named["params"]["requestId"], "srv-1");

        // The first generation moves nothing and drops nothing.
        let first = IdRange::new(0);
        assert_eq!(
            out(first, json!({"jsonrpc": "2.0", "id": 3, "method": "ping"}))["id"],
            3
        );
        assert_eq!(back(first, ok(json!("brmcp-x"))).unwrap()["id"], "brmcp-x");

        // The last generation still fits.
        let last = IdRange::new(u64::MAX);
        let top = out(last, json!({"jsonrpc": "2.0", "id": 7, "method": "ping"}));
        let top_id = MAX_ID_RANGE as i64 * ID_RANGE_SPAN + 7;
        assert_eq!(top["id"], top_id);
        assert_eq!(back(last, ok(json!(top_id))).unwrap()["id"], 7);
        assert!(back(last, ok(json!(1i64 << 52))).is_none());
        assert!(top_id < 1 << 52, "exact in JavaScript");
    }
}
