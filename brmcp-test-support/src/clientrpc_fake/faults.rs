//! Fault scripting: the failures a test makes the fake produce, from refused
//! connections to brclient's own (out-of-order live items, logs reset, refused streams).

use serde_json::{Value, json};

use super::server::{FIRST_SEQ, send_live};
use super::{Fake, frame, lock};

impl Fake {
    /// The next pushed item's sequence id, on every stream.
    pub fn set_next_seq(&self, seq: u64) {
        let mut state = lock(&self.shared.state);
        state.next_seq = seq;
        for log in state.logs.values_mut() {
            log.next = seq;
        }
    }

    /// Closes the next `n` TCP connections right after accepting them.
    pub fn refuse_next(&self, n: usize) {
        lock(&self.shared.state).refuse = n;
    }

    /// Answers the next `n` acks with an error, without clearing anything.
    pub fn fail_acks(&self, n: usize) {
        lock(&self.shared.state).fail_acks = n;
    }

    /// Drops every live connection (the socket closes without a close frame).
    pub fn drop_connections(&self) {
        let state = lock(&self.shared.state);
        for conn in state.conns.values() {
            conn.close.send_replace(true);
        }
    }

    /// Ends every live stream the way the server does when a stream handler returns:
    /// a response to the stream's request, with an error.
    pub fn end_streams(&self, code: i64, message: &str) {
        let state = lock(&self.shared.state);
        for conn in state.conns.values() {
            for (_, _, id) in &conn.streams {
                let _ = conn.out.send(frame(&json!({
                    "jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}
                })));
            }
        }
    }

    /// Stops reading every live connection: no more requests handled, no pongs.
    pub fn stall_connections(&self) {
        let state = lock(&self.shared.state);
        for conn in state.conns.values() {
            conn.stall.send_replace(true);
        }
    }

    /// Answers the next `n` opens of the stream `base` with this error at once, as
    /// brclient does on a replay-log I/O error: nothing replayed, nothing registered.
    pub fn refuse_streams(&self, base: &str, n: usize, code: i64, message: &str) {
        lock(&self.shared.state)
            .refuse_streams
            .insert(base.to_owned(), (n, code, message.to_owned()));
    }

    /// brclient's replay logs removed (every entry acknowledged, the files gone): ids
    /// start over from the first file, so they repeat earlier ones.
    pub fn reset_logs(&self) {
        let mut state = lock(&self.shared.state);
        state.logs.clear();
        state.held.clear();
        state.next_seq = FIRST_SEQ;
    }

    /// Stores an item like [`push`](Self::push) but does not send it live yet: the
    /// goroutine that sends it runs late. [`release`](Self::release) sends it.
    pub fn push_held(&self, base: &str, params: Value) -> u64 {
        let (id, params) = self.store(base, params);
        lock(&self.shared.state)
            .held
            .entry(base.to_owned())
            .or_default()
            .push(params);
        id
    }

    /// Sends the held items of `base` live, last stored first (out of id order).
    pub fn release(&self, base: &str) {
        let mut state = lock(&self.shared.state);
        let held = state.held.remove(base).unwrap_or_default();
        for params in held.into_iter().rev() {
            send_live(&state, base, &params);
        }
    }
}
