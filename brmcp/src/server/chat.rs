//! Plain chat: PMs that are not brmcp envelopes.
//!
//! The host hands every PM to [`Harness::handle_pm`](super::Harness::handle_pm); a PM
//! that is not an envelope at all, or an envelope of another version
//! ([`ParseError::is_foreign`](brmcp_adapters::wire::ParseError::is_foreign)), goes to
//! the operator's chat hook instead of the router, from any sender (the allow gate
//! guards MCP, not chat). Malformed envelopes are brmcp traffic and go to the router,
//! which counts and drops them.
//!
//! An optional [`AutoReply`] answers chat with instructions for connecting an agent,
//! at most once per sender per [`interval`](AutoReply::interval).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use brmcp_adapters::PeerId;

/// Default time between two auto-replies to one sender: one hour.
pub const DEFAULT_AUTO_REPLY_INTERVAL: Duration = Duration::from_secs(3600);

/// Senders remembered by the auto-reply throttle. Past it, entries older than the
/// interval are forgotten, and if none is, chat goes unanswered rather than growing
/// the map: a flood of new senders cannot make the harness allocate or send without
/// bound.
pub(crate) const MAX_THROTTLED_SENDERS: usize = 4096;

/// The default auto-reply text.
pub const DEFAULT_AUTO_REPLY: &str = "This is an MCP tool server on Bison Relay: it \
answers AI agents, not chat. To use its tools, ask the operator to add your uid to its \
allowlist, then run a brmcp bridge (`brmcp bridge`) with this bot's uid and point your \
agent (any MCP client) at the bridge. Paid tools are paid for with tips to this bot.";

/// An automatic answer to plain chat.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AutoReply {
    /// The PM sent back.
    pub text: String,
    /// At most one reply per sender per this long.
    pub interval: Duration,
}

impl AutoReply {
    /// Replies `text`, at most once per sender per [`DEFAULT_AUTO_REPLY_INTERVAL`].
    pub fn new(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            interval: DEFAULT_AUTO_REPLY_INTERVAL,
        }
    }

    /// Sets the interval.
    #[must_use]
    pub fn with_interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }
}

impl Default for AutoReply {
    fn default() -> Self {
        Self::new(DEFAULT_AUTO_REPLY)
    }
}

/// When each sender was last answered.
#[derive(Debug)]
pub(crate) struct Throttle {
    interval: Duration,
    last: Mutex<HashMap<PeerId, Duration>>,
}

impl Throttle {
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `peer` may be answered at `now` (time since the epoch); if so, records it.
    pub(crate) fn try_reply(&self, peer: &PeerId, now: Duration) -> bool {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let due = |at: Duration| now.saturating_sub(at) >= self.interval || at > now;
        match last.get(peer) {
            Some(&at) if !due(at) => return false,
            Some(_) => {}
            None if last.len() >= MAX_THROTTLED_SENDERS => {
                last.retain(|_, at| !due(*at));
                if last.len() >= MAX_THROTTLED_SENDERS {
                    return false;
                }
            }
            None => {}
        }
        last.insert(*peer, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: PeerId = PeerId::from_bytes([1; 32]);
    const B: PeerId = PeerId::from_bytes([2; 32]);

    fn mins(m: u64) -> Duration {
        Duration::from_secs(1_000_000 + m * 60)
    }

    #[test]
    fn once_per_sender_per_interval() {
        let throttle = Throttle::new(DEFAULT_AUTO_REPLY_INTERVAL);
        assert!(throttle.try_reply(&A, mins(0)));
        assert!(!throttle.try_reply(&A, mins(59)));
        assert!(throttle.try_reply(&B, mins(59)));
        assert!(throttle.try_reply(&A, mins(60)));
        assert!(!throttle.try_reply(&A, mins(61)));
    }

    #[test]
    fn a_full_map_forgets_old_senders_and_refuses_new_ones_otherwise() {
        let throttle = Throttle::new(DEFAULT_AUTO_REPLY_INTERVAL);
        let peer = |i: usize| {
            let mut bytes = [9; 32];
            bytes[..8].copy_from_slice(&(i as u64).to_be_bytes());
            PeerId::from_bytes(bytes)
        };
        for i in 0..MAX_THROTTLED_SENDERS {
            assert!(throttle.try_reply(&peer(i), mins(0)));
        }
        assert!(!throttle.try_reply(&A, mins(10)), "full of recent senders");
        assert!(throttle.try_reply(&A, mins(60)), "old senders forgotten");
        assert!(throttle.try_reply(&peer(0), mins(60)));
    }
}
