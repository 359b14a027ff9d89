//! Reading one WebSocket message as Go's `readLoop` does, and the stream suffix rule:
//! what a message is, before any method is looked at.

use serde_json::Value;

use crate::envelope::go_reencode;

/// A message read from the socket.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// Undecodable or wrong version: close the connection, no reply.
    Close,
    /// A notification, a response, or something unrecognised: ignored.
    Ignore {
        method: Option<String>,
        id: Option<Value>,
    },
    /// A request.
    Request(Request),
}

/// A request to dispatch.
#[derive(Debug)]
pub(crate) struct Request {
    /// The id as Go re-encodes it in the reply.
    pub(crate) id_json: String,
    pub(crate) id: Value,
    /// The method as sent, suffix included.
    pub(crate) method: String,
    pub(crate) params: Option<Value>,
}

/// Sorts one WebSocket message (see the `rpc` module docs).
pub(crate) fn classify(data: &[u8]) -> Inbound {
    let mut values = serde_json::Deserializer::from_slice(data).into_iter::<Value>();
    let Some(Ok(Value::Object(obj))) = values.next() else {
        return Inbound::Close;
    };
    // Go decodes into a struct: a field of the wrong type is a decode error.
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        _ => return Inbound::Close,
    }
    let method = match obj.get("method") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => return Inbound::Close,
    };
    let has_error = match obj.get("error") {
        None | Some(Value::Null) => false,
        Some(Value::Object(e)) => {
            let code_ok = e.get("code").is_none_or(|c| c.is_null() || c.is_i64());
            let msg_ok = e
                .get("message")
                .is_none_or(|m| m.is_null() || m.is_string());
            if !(code_ok && msg_ok) {
                return Inbound::Close;
            }
            true
        }
        Some(_) => return Inbound::Close,
    };
    // json.RawMessage fields: present (even as null) means non-nil.
    let has_result = obj.contains_key("result");
    let id = obj.get("id").filter(|v| !v.is_null()).cloned();
    match (id, method) {
        (Some(id), Some(method)) if !has_error && !has_result => Inbound::Request(Request {
            id_json: go_reencode(&id),
            id,
            method,
            params: obj.get("params").cloned(),
        }),
        (id, method) => Inbound::Ignore { method, id },
    }
}

/// The `Service.Method` part of a method with a stream suffix, as Go's unanchored
/// `(\w+\.\w+)\[(\d+)\]`; the method itself when nothing matches.
pub(crate) fn strip_stream_suffix(method: &str) -> &str {
    let b = method.as_bytes();
    (0..b.len())
        .find_map(|start| suffix_match_at(b, start).map(|end| &method[start..end]))
        .unwrap_or(method)
}

/// Whether `\w+\.\w+\[\d+\]` matches at `start`; the end of the first group if so.
fn suffix_match_at(b: &[u8], start: usize) -> Option<usize> {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let run = |mut i: usize, pred: &dyn Fn(u8) -> bool| {
        while i < b.len() && pred(b[i]) {
            i += 1;
        }
        i
    };
    let i = run(start, &word);
    if i == start || b.get(i) != Some(&b'.') {
        return None;
    }
    let j = run(i + 1, &word);
    if j == i + 1 || b.get(j) != Some(&b'[') {
        return None;
    }
    let k = run(j + 1, &|c: u8| c.is_ascii_digit());
    if k == j + 1 || b.get(k) != Some(&b']') {
        return None;
    }
    Some(j)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_suffix_rule() {
        assert_eq!(
            strip_stream_suffix("ChatService.PMStream[1]"),
            "ChatService.PMStream"
        );
        assert_eq!(
            strip_stream_suffix("ChatService.PMStream[12345]"),
            "ChatService.PMStream"
        );
        // Go's `%.8x` suffix with a hex letter does not match.
        assert_eq!(
            strip_stream_suffix("ChatService.PMStream[0000000a]"),
            "ChatService.PMStream[0000000a]"
        );
        assert_eq!(
            strip_stream_suffix("ChatService.PMStream[]"),
            "ChatService.PMStream[]"
        );
        assert_eq!(strip_stream_suffix("ChatService.PM"), "ChatService.PM");
        // Unanchored, as Go's FindStringSubmatch.
        assert_eq!(strip_stream_suffix("x y.z[3] tail"), "y.z");
    }

    #[test]
    fn classification() {
        assert!(matches!(classify(b"not json"), Inbound::Close));
        assert!(matches!(classify(b"[1]"), Inbound::Close));
        assert!(matches!(
            classify(br#"{"jsonrpc":"1.0","id":1,"method":"a.b"}"#),
            Inbound::Close
        ));
        assert!(matches!(
            classify(br#"{"id":1,"method":"a.b"}"#),
            Inbound::Close
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":5}"#),
            Inbound::Close
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","method":"a.b","params":{}}"#),
            Inbound::Ignore {
                method: Some(_),
                id: None
            }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":null,"method":"a.b"}"#),
            Inbound::Ignore { .. }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Inbound::Ignore { .. }
        ));
        // Only the first JSON value counts; trailing garbage is ignored.
        let Inbound::Request(r) =
            classify(b"{\"jsonrpc\":\"2.0\",\"id\":4294967297,\"method\":\"a.b\"} junk")
        else {
            panic!("expected a request");
        };
        assert_eq!(r.id_json, "4294967297");
        assert_eq!(r.method, "a.b");
        assert!(r.params.is_none());
    }
}
