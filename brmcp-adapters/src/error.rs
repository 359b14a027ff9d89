//! The adapter's error type.

use crate::peer::PeerId;

/// A boxed error from a host or another layer.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an adapter operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AdapterError {
    /// The host failed to send a PM to `peer`; the rest of the message was not sent.
    #[error("send to {peer}: {source}")]
    Send {
        /// The peer the PM was for.
        peer: PeerId,
        /// The host's error.
        #[source]
        source: BoxError,
    },
    /// The message could not be split into parts (too large for the chunk length).
    #[error("encode: {0}")]
    Encode(#[from] brmcp_wire::EncodeError),
    /// The message could not be serialized as JSON.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
    /// The operating system's entropy source failed while drawing an id.
    #[error("entropy source: {0}")]
    Entropy(#[source] BoxError),
    /// The message's deadline passed before it could be sent; it was not sent.
    #[error("deadline passed before sending")]
    Expired,
    /// The session is closed.
    #[error("session closed")]
    Closed,
    /// The session's outbound queue exceeded its byte bound; the session was closed.
    #[error("outbound queue over {0} bytes; session closed")]
    OutboundFull(usize),
    /// The router is shut down.
    #[error("router closed")]
    RouterClosed,
}
