//! The Bison Relay host for a running brclient or brclientd: a native client of its
//! `clientrpc` interface (JSON-RPC over a TLS websocket at `wss://host:port/ws`).
//!
//! - [`ClientRpcHost`] implements [`PmSender`](brmcp_adapters::PmSender) with `ChatService.PM`
//!   (PMs to one peer leave one at a time, in order), hands every PM received to a
//!   [`PmHandler`] ([`Router`](brmcp_adapters::Router) is one), every tip received to a
//!   [`TipHandler`], and pays tips ([`ClientRpcHost::tip`]), matching each to its
//!   terminal TipProgress event. It asks a contact to mediate a key exchange
//!   ([`ClientRpcHost::mediate_kx`]) and hands every completed one to a [`KxHandler`].
//!   It subscribes to a user's posts ([`ClientRpcHost::subscribe_to_posts`]) and hands
//!   every post received to a [`PostHandler`].
//! - Streams are consumed in the order record (the handler) → acknowledge, an
//!   acknowledgement covering only recorded items; a stream the server ends alone is
//!   reopened alone, the others stay up ([`streams`](self#streams)).
//! - [`ClientRpcConfig`] says where the server is and which certificates to use; it can
//!   come from a bisonbotkit `.conf` file ([`BotConfig`]). The server's `rpc.cert` is
//!   pinned by DER equality (brclient's is a self-signed CA-flagged Ed25519
//!   certificate that stock verifiers refuse); a chain to a configured CA is accepted
//!   too (brclientd).
//! - [`proto`]: the messages, generated from `proto/clientrpc.proto`, and their
//!   protojson form; the handlers get stream items with their user id checked
//!   ([`ReceivedPm`], [`ReceivedTip`], [`TipProgressEvent`], [`KxCompleted`],
//!   [`ReceivedPost`]).
//!
//! The connection: one reader task reads without pause and demultiplexes responses by
//! id and stream items by method; one writer task sends. At most [`MAX_IN_FLIGHT`]
//! requests are in flight per connection, open streams included. Websocket pings go
//! out every [`ping_interval`](ClientRpcConfig::ping_interval); a missing pong drops the
//! connection. Reconnects back off from [`DEFAULT_BACKOFF_INITIAL`] doubling to
//! [`DEFAULT_BACKOFF_MAX`] (both configurable).
//!
//! # Streams
//!
//! See [`StreamKind`] and [`PmHandler`]: each item is handed to its handler, which
//! returns once it is durably recorded; a cumulative acknowledgement of N goes out
//! only when every item received with an id up to N is recorded and N was received
//! [`DEFAULT_ACK_SETTLE`] ago or more. The host drops nothing as a duplicate: streams
//! are (re)opened from 0, the server replaying what it has not cleared, and the
//! handlers' records recognise redeliveries.
//!
//! Crypto: rustls with the ring provider.

#![doc(test(attr(deny(warnings))))]

mod config;
mod conn;
mod error;
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
mod host;
mod items;
pub mod proto;
mod streams;
mod tls;

pub use config::{
    ACK_FLUSH_WAIT, BasicAuth, BotConfig, ClientRpcConfig, DEFAULT_ACK_SETTLE,
    DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_URL, KNOWN_KEYS, MAX_IN_FLIGHT, PemSource,
};
pub use error::ClientRpcError;
pub use host::{
    ClientRpcHost, HostStatus, KxHandler, PM_RESENDS, PmHandler, PostHandler, Streams, TipHandler,
    TipOutcome, TipResultHandler,
};
pub use items::{BadUid, KxCompleted, ReceivedPm, ReceivedPost, ReceivedTip, TipProgressEvent};
pub use streams::{MAX_QUEUED_PER_STREAM, StreamKind};

/// Locks a std mutex, ignoring poisoning: no critical section in this crate leaves its
/// data half-updated.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Sleeps until `at`; never wakes for `None` (a timer that is not set).
pub(crate) async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
