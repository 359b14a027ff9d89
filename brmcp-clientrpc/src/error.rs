//! The clientrpc host's error type.

use std::path::PathBuf;

use brmcp_adapters::BoxError;

/// Why a clientrpc operation failed.
///
/// Errors the server returned keep its text unchanged ([`Rpc`](Self::Rpc)), so
/// "user carol not found" or brclient's "RM is too large" reach the caller as written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientRpcError {
    /// The configuration is unusable (bad URL, a missing key in the config file, a
    /// certificate without a key, ...).
    #[error("config: {0}")]
    Config(String),
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
    /// A PEM file holds no usable certificate or key.
    #[error("pem: {0}")]
    Pem(String),
    /// TLS setup or handshake failed: the server's certificate is not the pinned one
    /// and chains to no configured CA, or the server refused our client certificate.
    #[error("tls: {0}")]
    Tls(#[source] BoxError),
    /// The TCP connection could not be made.
    #[error("connect: {0}")]
    Connect(#[source] std::io::Error),
    /// The server refused the websocket upgrade for authentication: HTTP 401 (no or
    /// malformed basic auth, or no credentials configured on the server) or 403 (wrong
    /// credentials).
    #[error("authentication refused (http {status})")]
    Auth {
        /// The HTTP status, 401 or 403.
        status: u16,
    },
    /// The server answered the websocket upgrade with another HTTP status (a wrong
    /// path, or brclientd's pre-setup API).
    #[error("websocket upgrade refused (http {status})")]
    Http {
        /// The HTTP status.
        status: u16,
    },
    /// The websocket failed (handshake or framing).
    #[error("websocket: {0}")]
    WebSocket(#[source] BoxError),
    /// The server answered the request with an error. `message` is the server's text.
    #[error("{method}: {message} (code {code})")]
    Rpc {
        /// The method called.
        method: String,
        /// The JSON-RPC error code (-32603 for handler errors, -32602 for params the
        /// server could not decode, 10000 for a stream that ended).
        code: i64,
        /// The server's error text, unchanged.
        message: String,
    },
    /// The connection died while the request was in flight. The server may still have
    /// carried it out: a PM may have been sent, a tip scheduled.
    #[error("connection lost")]
    ConnectionLost,
    /// No answer (or no connection) within the request timeout. As for
    /// [`ConnectionLost`](Self::ConnectionLost), the server may still carry it out.
    #[error("timed out")]
    Timeout,
    /// The server sent something that is not the expected message.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The client's identity was refused by the
    /// [`Streams::identity`](super::Streams::identity) check (a data directory bound
    /// to another client), with the check's text.
    #[error("identity: {0}")]
    Identity(String),
    /// A tip needs the TipProgress stream, which this host does not consume.
    #[error("tip progress stream not consumed by this host")]
    NoTipProgress,
    /// The host was closed.
    #[error("host closed")]
    Closed,
}

impl ClientRpcError {
    /// The server's error text, for [`Rpc`](Self::Rpc) errors.
    pub fn server_message(&self) -> Option<&str> {
        match self {
            Self::Rpc { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The JSON-RPC error code, for [`Rpc`](Self::Rpc) errors.
    pub const fn code(&self) -> Option<i64> {
        match self {
            Self::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}
