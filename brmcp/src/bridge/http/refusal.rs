//! The answers of the gates: on the MCP paths a JSON-RPC error object whose message
//! MCP clients show (the Python SDK surfaces the error of a non-2xx JSON body, the
//! TypeScript SDK the body's text), plain text elsewhere.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::access::bearer_scheme;

/// The JSON-RPC code of a refusal: the start of the range JSON-RPC leaves to servers;
/// the HTTP status tells the refusals apart.
const REFUSAL_CODE: i64 = -32000;

/// Longest part of a request's path repeated in a refusal, in characters: enough for
/// a bot name (64) or a uid (64), short enough for a log line.
const MAX_ECHOED: usize = 80;

/// The path prefix of the MCP endpoints.
const MCP_PREFIX: &str = "/mcp";

/// Whether `path` is one of the MCP endpoints' (answered in JSON-RPC).
pub(super) fn is_mcp_path(path: &str) -> bool {
    path == MCP_PREFIX || path.starts_with("/mcp/")
}

/// How a refusal is written: JSON-RPC for MCP clients, or plain text.
#[derive(Debug, Clone, Copy)]
pub(super) enum Form {
    JsonRpc,
    Plain,
}

impl Form {
    /// The form of the answers to a request for `path`.
    pub(super) fn of(path: &str) -> Self {
        if is_mcp_path(path) {
            Self::JsonRpc
        } else {
            Self::Plain
        }
    }

    /// `status` with `message`.
    pub(super) fn refuse(self, status: StatusCode, message: &str) -> Response {
        match self {
            Self::Plain => plain(status, message),
            Self::JsonRpc => {
                // The request's id is not read (the body is the session's): null, as
                // JSON-RPC says for an id that could not be determined.
                let body = serde_json::json!({
                    "jsonrpc": "2.0",
                    "id": null,
                    "error": {"code": REFUSAL_CODE, "message": message},
                });
                (
                    status,
                    [(header::CONTENT_TYPE, "application/json")],
                    body.to_string(),
                )
                    .into_response()
            }
        }
    }

    /// 401 saying what was wrong with the credential of `headers` (missing, not a
    /// bearer token, or not the one), revealing nothing of the token itself.
    pub(super) fn unauthorized(self, headers: &HeaderMap) -> Response {
        let why = match headers.get(header::AUTHORIZATION) {
            None => {
                "unauthorized: no bearer token; send `Authorization: Bearer <token>` with the \
                 bridge's token (`brmcp bridge --datadir DIR token show` prints it)"
            }
            Some(value) if !bearer_scheme(value) => {
                "unauthorized: the Authorization header must be `Bearer <token>`"
            }
            Some(_) => {
                "unauthorized: wrong bearer token (rotated? `brmcp bridge --datadir DIR token \
                 show` prints the current one)"
            }
        };
        let mut response = self.refuse(StatusCode::UNAUTHORIZED, why);
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    }
}

/// `status` with `text` as plain text.
pub(super) fn plain(status: StatusCode, text: &str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("{text}\n"),
    )
        .into_response()
}

/// `response` telling the client to retry after `secs` seconds (at least 1).
pub(super) fn retry_after(secs: u64, mut response: Response) -> Response {
    if let Ok(value) = HeaderValue::from_str(&secs.max(1).to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// `text` from a request, cut to [`MAX_ECHOED`] characters, as a quoted string with
/// its control characters escaped.
pub(super) fn echoed(text: &str) -> String {
    let mut cut: String = text.chars().take(MAX_ECHOED).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{cut:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_text_is_quoted_escaped_and_bounded() {
        assert_eq!(echoed("alice"), "\"alice\"");
        assert_eq!(echoed("a\nb\u{1b}"), "\"a\\nb\\u{1b}\"");
        let long = "x".repeat(500);
        assert_eq!(echoed(&long).chars().count(), MAX_ECHOED + 3);
    }

    #[test]
    fn mcp_paths_are_told_apart() {
        for path in ["/mcp", "/mcp/", "/mcp/alice", "/mcp/directory/x"] {
            assert!(is_mcp_path(path), "{path}");
        }
        for path in ["/", "/mcpx", "/payments", "/other/mcp"] {
            assert!(!is_mcp_path(path), "{path}");
        }
    }
}
