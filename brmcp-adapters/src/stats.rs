//! Counters an operator or a test can read: what the router received, dropped and why,
//! and what happened to sessions.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident, )*) => {
        /// A snapshot of a router's counters. Counts are totals since the router started,
        /// except the gauges `sessions_open`, `bytes_buffered`, `messages_buffered`,
        /// `queue_pms` and `queue_bytes`.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct RouterStats {
            $( $(#[$doc])* pub $name: u64, )*
        }

        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $( pub(crate) $name: AtomicU64, )*
        }

        impl RouterStats {
            /// Every counter with its field name, in declaration order (for status
            /// snapshots and tables: drop reasons are the `dropped_*` fields).
            pub fn fields(&self) -> impl Iterator<Item = (&'static str, u64)> + use<> {
                [$( (stringify!($name), self.$name), )*].into_iter()
            }
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> RouterStats {
                RouterStats { $( $name: self.$name.load(Relaxed), )* }
            }
        }
    };
}

counters! {
    /// PMs handed to `handle_pm`, chat included.
    pms_received,
    /// Parts from allowed peers that parsed (parts from refused peers are not counted).
    parts_received,
    /// PMs that are not brmcp traffic (chat, other versions), ignored silently.
    dropped_foreign,
    /// Envelopes that did not parse, and parts the reassembler refused as malformed
    /// (bad body, geometry or part count).
    dropped_malformed,
    /// Parts from peers the authorizer refused.
    dropped_disallowed,
    /// Parts past their deadline.
    dropped_expired,
    /// Parts and messages seen before.
    dropped_duplicate,
    /// Parts the reassembler refused for one of its bounds.
    dropped_reassembly,
    /// Complete messages that were not valid JSON-RPC.
    dropped_json,
    /// Parts or messages for a session that does not exist and that may not open one.
    dropped_unknown_session,
    /// New sessions refused because the peer is at its session cap.
    dropped_session_cap,
    /// New sessions refused because nobody is accepting them fast enough.
    dropped_accept_backlog,
    /// Messages handed to sessions.
    messages_delivered,
    /// Partial messages abandoned by the reassembler's expiry.
    partials_expired,
    /// Sessions peers opened that were handed to `accept`.
    sessions_accepted,
    /// Sessions dialed locally.
    sessions_dialed,
    /// Sessions closed for being idle.
    sessions_expired,
    /// Expired or parked sessions re-created, already initialized, for a message on them.
    sessions_resumed,
    /// Times a dialed session a `Client` (or another `ServiceSlot`) holds was parked
    /// while idle.
    client_parked,
    /// Times a parked dialed session was revived, for a lease or a message from the
    /// server.
    client_revived,
    /// Answers, progress reports and cancellations that reached a parked dialed
    /// session, dropped without reviving it: no request of ours or the server's is in
    /// progress there.
    dropped_parked_answer,
    /// Sessions closed because their inbound queue overflowed.
    sessions_overflowed,
    /// Sessions closed, for any reason.
    sessions_closed,
    /// Sessions open now.
    sessions_open,
    /// PMs sent.
    pms_sent,
    /// PM sends the host refused.
    send_errors,
    /// Bytes of partial messages held by the reassembler now.
    bytes_buffered,
    /// Partial messages held by the reassembler now.
    messages_buffered,
    /// PMs waiting in the router's inbound queue now.
    queue_pms,
    /// Bytes of the PMs waiting in the router's inbound queue now.
    queue_bytes,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}
