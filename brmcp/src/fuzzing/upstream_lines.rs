//! JSON-RPC lines an upstream MCP server writes on its stdout, read as its client
//! reads them.

use std::sync::Arc;

use rmcp::RoleClient;
use rmcp::model::{JsonRpcMessage, ServerJsonRpcMessage, ServerNotification};
use rmcp::transport::Transport;
use serde_json::Value;

use crate::server::upstream::child::line_transport;
use crate::server::upstream::client::{PROGRESS_METHOD, Tap};
use crate::server::upstream::progress::{EARLY_PER_TOKEN, EARLY_TOKENS, Routes};

/// Messages one input is read for at most: more than a short input can hold.
const MAX_MESSAGES: usize = 4096;

/// What the client must receive from `stdout`, read with lines of at most `max`
/// bytes: each whole line before the first longer one (the stream ends there) that is
/// a server message and not progress, in order; whether that bound cut the stream.
fn expected(stdout: &[u8], max: usize) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    let mut segments = stdout.split(|b| *b == b'\n').peekable();
    while let Some(line) = segments.next() {
        if line.len() > max {
            return (out, true);
        }
        // The last segment has no newline: the stream ended inside it.
        if segments.peek().is_none() {
            break;
        }
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line.strip_prefix(b"\xef\xbb\xbf").unwrap_or(line);
        let Ok(message) = serde_json::from_slice::<ServerJsonRpcMessage>(line) else {
            continue;
        };
        if !is_progress(&message) {
            out.push(serde_json::to_value(&message).expect("a message serializes"));
        }
    }
    (out, false)
}

/// `value` read as a server message and written again.
///
/// A line that repeats a key can read as another kind than its writing does: rmcp's
/// typed results refuse a repeated field, so such a result reads as a custom one,
/// whose writing keeps only the last value and then reads as the typed result. So the
/// property is held from the first writing on, not for the line itself.
fn write_back(value: &Value) -> Value {
    let again: ServerJsonRpcMessage =
        serde_json::from_value(value.clone()).expect("a message written back reads");
    serde_json::to_value(&again).expect("a message serializes")
}

/// Progress, or a notification named so that did not read as progress.
fn is_progress(message: &ServerJsonRpcMessage) -> bool {
    let JsonRpcMessage::Notification(n) = message else {
        return false;
    };
    match &n.notification {
        ServerNotification::ProgressNotification(_) => true,
        ServerNotification::CustomNotification(c) => c.method == PROGRESS_METHOD,
        _ => false,
    }
}

/// Reads an upstream's stdout as `brmcp serve` does: the line bound, rmcp's line
/// transport, and the tap that takes progress off for the calls' routes. The first
/// byte sets the bound (16 to 4096 bytes); the rest is the stdout.
///
/// - The client receives exactly the whole lines before the first one over the bound,
///   those that are server messages, progress excepted, in order; the stream ends at
///   that line, and the fault that fails the calls is set exactly then.
/// - A received message, written back, reads as itself from its first writing on.
/// - Progress of no call is kept within its bounds.
pub fn upstream_lines(data: &[u8]) {
    let Some((&bound, stdout)) = data.split_first() else {
        return;
    };
    let max = 16 + usize::from(bound) * 16;
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let (want, cut) = expected(stdout, max);
    let routes = Arc::new(Routes::default());
    let received = runtime.block_on(async {
        let (transport, fault) = line_transport(stdout, tokio::io::sink(), max);
        let mut tap = Tap {
            inner: transport,
            routes: routes.clone(),
        };
        let mut received = Vec::new();
        while let Some(message) = Transport::<RoleClient>::receive(&mut tap).await {
            assert!(received.len() < MAX_MESSAGES, "more messages than lines");
            assert!(!is_progress(&message), "progress reached the client");
            let value = serde_json::to_value(&message).expect("a message serializes");
            let once = write_back(&value);
            assert_eq!(
                write_back(&once),
                once,
                "a message written back reads otherwise"
            );
            received.push(value);
        }
        assert_eq!(
            fault.get().is_some(),
            cut,
            "the fault is set iff a line was cut"
        );
        received
    });
    assert_eq!(received, want, "the client did not receive the whole lines");
    let (tokens, most) = routes.lock().early.counts();
    assert!(tokens <= EARLY_TOKENS && most <= EARLY_PER_TOKEN);
}

#[cfg(test)]
mod tests {
    #[test]
    fn upstream_lines_corpus_passes() {
        for (path, data) in super::super::corpus("upstream_lines") {
            eprintln!("upstream_lines: {}", path.display());
            super::upstream_lines(&data);
        }
    }

    #[test]
    fn a_result_with_a_repeated_key_is_received_as_written() {
        // Read as a custom result, written without the repeat, read again as typed.
        let mut data = vec![255u8];
        data.extend_from_slice(br#"{"jsonrpc":"2.0","id":0,"result":{"capabilities":{"tools":{"listChanged":true}},"protocolVersion":"2025-06-18","sersion":"2025-06-18","serverInfo":{"name":"everything","version":"1"},"capabilities":{}}}"#);
        data.push(b'\n');
        let (want, cut) = super::expected(&data[1..], 4096);
        assert!(!cut && want.len() == 1);
        assert_ne!(super::write_back(&want[0]), want[0]);
        super::upstream_lines(&data);
    }

    #[test]
    fn a_long_line_ends_the_stream_after_the_lines_before_it() {
        let mut data = vec![0u8]; // lines of at most 16 bytes
        data.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n");
        super::upstream_lines(&data);
        let (want, cut) = super::expected(&data[1..], 16);
        assert!(cut && want.is_empty());
        let mut data = vec![7u8]; // 128 bytes
        data.extend_from_slice(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\r\n\n{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n");
        data.extend_from_slice(&[b'x'; 129]);
        data.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{}}\n");
        let (want, cut) = super::expected(&data[1..], 128);
        assert!(cut && want.len() == 1, "{want:?}");
        super::upstream_lines(&data);
    }
}
