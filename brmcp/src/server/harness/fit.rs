//! Whether a tool answer fits one brmcp message: an answer the envelope cannot carry
//! must become a refusal (and a refund) before the call is completed, not a send that
//! fails after the caller paid.
//!
//! One message is at most [`MAX_PARTS`] parts of the router's chunk length; the tool
//! result travels inside a JSON-RPC response, whose wrapper takes the rest.

use brmcp_adapters::RouterConfig;
use brmcp_adapters::wire::MAX_PARTS;
use rmcp::model::RequestId;

/// Bytes kept for the JSON-RPC response around a tool result: 256.
///
/// The wrapper `{"jsonrpc":"2.0","id":…,"result":…}` is 33 bytes plus the request id's
/// JSON: the SDKs use numbers or short strings (a UUID is 38 bytes), so this leaves room
/// for any id up to 223 bytes. A longer id is counted exactly, so it can only make the
/// bound smaller, never let a larger answer through.
pub const ANSWER_WRAPPER_BYTES: usize = 256;

/// The JSON-RPC response's bytes besides the result and the id: `{"jsonrpc":"2.0","id":`
/// (22), `,"result":` (10) and `}` (1), as rmcp writes them.
const WRAPPER_FIXED_BYTES: usize = 33;

/// The most bytes of one JSON-RPC message a router with `config` can send: [`MAX_PARTS`]
/// parts of `config.chunk_len` raw bytes. With the defaults, 12.5 MiB.
pub fn max_message_bytes(config: &RouterConfig) -> usize {
    usize::from(MAX_PARTS).saturating_mul(config.chunk_len)
}

/// The largest tool result (its JSON, as rmcp serializes a `CallToolResult`) a harness
/// on a router with `config` delivers: [`max_message_bytes`] less
/// [`ANSWER_WRAPPER_BYTES`]. A larger answer is replaced by a refusal saying so, and a
/// paid call is refunded. A forwarder of another server's answers can size its reads to
/// this (or to [`max_message_bytes`] for a whole JSON-RPC line): anything longer cannot
/// reach the caller.
pub fn max_answer_bytes(config: &RouterConfig) -> usize {
    max_message_bytes(config).saturating_sub(ANSWER_WRAPPER_BYTES)
}

/// Bytes of the JSON-RPC wrapper around the answer to request `id`.
fn wrapper_len(id: &RequestId) -> usize {
    let id_len = match id {
        RequestId::Number(n) => n.to_string().len(),
        // Escapes and quotes included, as serde writes it.
        RequestId::String(s) => serde_json::to_string(s.as_ref()).map_or(usize::MAX, |s| s.len()),
    };
    WRAPPER_FIXED_BYTES.saturating_add(id_len)
}

/// Whether a result of `result_len` bytes answering request `id` fits one message of a
/// router with `config`, keeping at least [`ANSWER_WRAPPER_BYTES`] for the wrapper.
pub(super) fn fits(result_len: usize, id: &RequestId, config: &RouterConfig) -> bool {
    let wrapper = wrapper_len(id).max(ANSWER_WRAPPER_BYTES);
    result_len.saturating_add(wrapper) <= max_message_bytes(config)
}

/// The refusal that replaces an answer of `len` bytes that does not fit.
pub(super) fn too_large(len: usize, config: &RouterConfig, charged: bool) -> String {
    let refunded = if charged { "; refunded" } else { "" };
    format!(
        "answer too large to deliver: {len} bytes, over the {} bytes one answer can carry{refunded}",
        max_answer_bytes(config)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolResult, ContentBlock, ServerJsonRpcMessage, ServerResult};

    fn framed(result: &CallToolResult, id: RequestId) -> usize {
        let message =
            ServerJsonRpcMessage::response(ServerResult::CallToolResult(result.clone()), id);
        serde_json::to_vec(&message).unwrap().len()
    }

    #[test]
    fn the_wrapper_is_counted_as_rmcp_writes_it() {
        let result = CallToolResult::success(vec![ContentBlock::text("hello \"world\"")]);
        let len = serde_json::to_vec(&result).unwrap().len();
        for id in [
            RequestId::Number(0),
            RequestId::Number(-12345),
            RequestId::Number(i64::MAX),
            RequestId::String("req-\"7\"\n".into()),
            RequestId::String("é".repeat(40).into()),
        ] {
            assert_eq!(
                len + wrapper_len(&id),
                framed(&result, id.clone()),
                "{id:?}"
            );
        }
    }

    #[test]
    fn the_bound_follows_the_chunk_length_and_a_long_id_lowers_it() {
        let mut config = RouterConfig::server();
        assert_eq!(max_message_bytes(&config), 64 * 200 * 1024);
        config.chunk_len = 1000;
        assert_eq!(max_message_bytes(&config), 64_000);
        let bound = max_answer_bytes(&config);
        assert_eq!(bound, 64_000 - ANSWER_WRAPPER_BYTES);
        let id = RequestId::Number(7);
        assert!(fits(bound, &id, &config));
        assert!(!fits(bound + 1, &id, &config));
        let long = RequestId::String("i".repeat(1000).into());
        assert!(!fits(bound, &long, &config));
        assert!(fits(
            64_000 - 1000 - 2 - WRAPPER_FIXED_BYTES,
            &long,
            &config
        ));
    }
}
