//! Fuzz harnesses: one plain function per target in `fuzz/fuzz_targets/`.
//!
//! Compiled only under `cfg(fuzzing)` (set by `cargo fuzz`, and by
//! `fuzz/.cargo/config.toml` for a plain `cargo check`) and in this crate's own tests,
//! which replay every file of the committed corpus `fuzz/corpus/<target>/` through the
//! same function. Each harness panics only when a property fails.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use crate::conn::{CallError, Conn};
use crate::error::ClientRpcError;
use crate::host::run::Item;
use crate::proto::{self, Unknown};
use crate::streams::{MAX_QUEUED_PER_STREAM, StreamKind, StreamQueue, stream_queue};

/// Frames one input is cut into at most: enough for every reply and a run of items.
const MAX_FRAMES: usize = 256;

/// Calls waiting for their response when the frames arrive.
const CALLS: usize = 3;

/// The first JSON value of a frame, as an independent reader sees it. Invalid UTF-8
/// is read as U+FFFD: the connection skips the fields it does not know without
/// checking their text, so such a frame still counts there.
fn first_value(frame: &[u8]) -> Option<Value> {
    let text = String::from_utf8_lossy(frame);
    serde_json::Deserializer::from_str(&text)
        .into_iter::<Value>()
        .next()
        .and_then(Result::ok)
}

/// A frame's id as a number, when it is one (the connection tolerates a float).
fn frame_id(value: &Value) -> Option<u64> {
    let id = value.get("id")?;
    id.as_u64().or_else(|| {
        let f = id.as_f64()?;
        (f >= 0.0 && f.fract() == 0.0 && f < 9_007_199_254_740_992.0).then_some(f as u64)
    })
}

/// Feeds websocket frames from the clientrpc server (NUL-separated in `data`) into a
/// connection with every stream open and [`CALLS`] calls waiting, as its reader does.
///
/// - A frame never registers a call or a stream, and ends at most one of them: a
///   response ends the call or stream whose request id it carries, nothing else.
/// - An item reaches only the stream its method names, as the frame's `params`, only
///   from a frame without an id; no queue ever holds more than
///   [`MAX_QUEUED_PER_STREAM`] items. Each item is decoded as the host decodes it.
/// - A call answered gets the frame's result (`{}` without one) or its error; a call
///   never answered gets [`ClientRpcError::ConnectionLost`] when the connection closes.
pub fn frames(data: &[u8]) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    runtime.block_on(run_frames(data));
}

async fn run_frames(data: &[u8]) {
    let (conn, mut out) = Conn::detached(1, crate::MAX_IN_FLIGHT);
    let mut queues: BTreeMap<String, (StreamKind, StreamQueue)> = BTreeMap::new();
    let mut stream_ids: BTreeMap<u64, String> = BTreeMap::new();
    for kind in StreamKind::ALL {
        let (sink, queue) = stream_queue();
        let ended = conn.open_stream(kind.method(), &json!({}), sink).await;
        assert!(ended.is_ok(), "a detached connection opens streams");
        let Some(Message::Text(text)) = out.recv().await else {
            panic!("open_stream sent no request");
        };
        let request: Value = serde_json::from_str(&text).expect("our request is JSON");
        let method = request["method"].as_str().expect("a method").to_owned();
        let id = request["id"].as_u64().expect("a numeric id");
        stream_ids.insert(id, method.clone());
        queues.insert(method, (kind, queue));
    }
    let mut calls = Vec::new();
    for n in 0..CALLS {
        let conn: Arc<Conn> = conn.clone();
        calls.push(tokio::spawn(async move {
            conn.call("ChatService.PM", &json!({"n": n})).await
        }));
    }
    // Call request id → which call.
    let mut call_ids: BTreeMap<u64, usize> = BTreeMap::new();
    while call_ids.len() < CALLS {
        let Some(Message::Text(text)) = out.recv().await else {
            panic!("a call sent no request");
        };
        let request: Value = serde_json::from_str(&text).expect("our request is JSON");
        let n = request["params"]["n"].as_u64().expect("our params") as usize;
        call_ids.insert(request["id"].as_u64().expect("a numeric id"), n);
    }
    // What each answered call must get: its result, or the error's code.
    let mut answers: BTreeMap<usize, Result<Value, i64>> = BTreeMap::new();

    for frame in data.split(|b| *b == 0).take(MAX_FRAMES) {
        let (pending_before, streams_before) = conn.registered();
        conn.dispatch(frame);
        let (pending_after, streams_after) = conn.registered();
        let value = first_value(frame);
        let id = value.as_ref().and_then(frame_id);

        let before: BTreeSet<_> = pending_before.iter().collect();
        let after: BTreeSet<_> = pending_after.iter().collect();
        assert!(after.is_subset(&before), "a frame registered a call");
        let ended: Vec<_> = before.difference(&after).copied().copied().collect();
        assert!(ended.len() <= 1, "one frame ended calls {ended:?}");
        if let Some(&call) = ended.first() {
            assert_eq!(
                id,
                Some(call),
                "call {call} ended by a frame with id {id:?}"
            );
            let value = value.as_ref().expect("a decoded frame");
            let want = match value.get("error").filter(|e| !e.is_null()) {
                Some(error) => Err(error
                    .get("code")
                    .map_or(Some(0), Value::as_i64)
                    .expect("a code")),
                None => Ok(value
                    .get("result")
                    .filter(|r| !r.is_null())
                    .cloned()
                    .unwrap_or_else(|| json!({}))),
            };
            answers.insert(call_ids[&call], want);
        }

        let before: BTreeSet<_> = streams_before.iter().collect();
        let after: BTreeSet<_> = streams_after.iter().collect();
        assert!(after.is_subset(&before), "a frame opened a stream");
        let gone: Vec<_> = before.difference(&after).copied().collect();
        assert!(gone.len() <= 1, "one frame ended streams {gone:?}");
        if let Some(method) = gone.first() {
            let by_id = id.and_then(|id| stream_ids.get(&id)) == Some(*method);
            assert!(by_id, "stream {method} ended by a frame with id {id:?}");
        }

        let mut delivered = 0;
        for (method, (kind, queue)) in &mut queues {
            assert!(
                queue.rx.len() <= MAX_QUEUED_PER_STREAM,
                "{method} over its bound"
            );
            while let Ok((params, _at)) = queue.rx.try_recv() {
                delivered += 1;
                let value = value.as_ref().expect("an item from a decoded frame");
                assert_eq!(value.get("method").and_then(Value::as_str), Some(&**method));
                assert!(id.is_none() && value.get("id").is_none_or(Value::is_null));
                let sent = value.get("params").cloned().unwrap_or(Value::Null);
                assert_eq!(params, sent, "{method}: the item is not the frame's params");
                let _ = Item::decode(*kind, &params);
                queue.done();
            }
        }
        assert!(delivered <= 1, "one frame delivered {delivered} items");
    }

    conn.close("the input ended");
    for (n, call) in calls.into_iter().enumerate() {
        let got = call.await.expect("a call task ends");
        match (answers.get(&n), got) {
            (Some(Ok(want)), Ok(result)) => assert_eq!(&result, want, "call {n}"),
            (Some(Err(code)), Err(CallError::Failed(ClientRpcError::Rpc { code: c, .. }))) => {
                assert_eq!(*code, c, "call {n}");
            }
            (None, Err(CallError::Failed(ClientRpcError::ConnectionLost))) => {}
            (want, got) => panic!("call {n}: want {want:?}, got {got:?}"),
        }
    }
}

/// Decodes the protojson message `value` as `M`, writes it back and decodes that.
fn rewritten<M: prost_reflect::ReflectMessage + Default>(value: &Value) -> Option<Value> {
    let message: M = proto::from_json(value, Unknown::Ignore).ok()?;
    let text = proto::to_json(&message).expect("a message serializes");
    Some(serde_json::from_str(&text).expect("protojson is JSON"))
}

/// Decodes one stream item as the host does: the first byte picks the stream, the
/// rest is the item's JSON `params`.
///
/// - Decoding never panics.
/// - An accepted item written back as protojson (the generated message, as the
///   server would write it) decodes to the same item, with the same sequence id.
pub fn stream_items(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let kind = StreamKind::ALL[usize::from(pick) % StreamKind::ALL.len()];
    let Ok(params) = serde_json::from_slice::<Value>(rest) else {
        return;
    };
    let Ok(item) = Item::decode(kind, &params) else {
        return;
    };
    let again = match kind {
        StreamKind::Pm => rewritten::<proto::ReceivedPm>(&params),
        StreamKind::TipProgress => rewritten::<proto::TipProgressEvent>(&params),
        StreamKind::TipReceived => rewritten::<proto::ReceivedTip>(&params),
        StreamKind::Kx => rewritten::<proto::KxCompleted>(&params),
        StreamKind::Posts => rewritten::<proto::ReceivedPost>(&params),
    }
    .expect("an accepted item's message decodes");
    let decoded = Item::decode(kind, &again)
        .unwrap_or_else(|e| panic!("{kind:?}: written back, refused: {e}: {again}"));
    assert_eq!(decoded.sequence_id(), item.sequence_id());
    assert_eq!(decoded, item, "{kind:?}: written back, decodes otherwise");
}

#[cfg(test)]
mod tests {
    use brmcp_test_support::corpus;

    #[test]
    fn frames_corpus_passes() {
        for (path, data) in corpus("frames") {
            eprintln!("frames: {}", path.display());
            super::frames(&data);
        }
    }

    #[test]
    fn stream_items_corpus_passes() {
        for (path, data) in corpus("stream_items") {
            eprintln!("stream_items: {}", path.display());
            super::stream_items(&data);
        }
    }

    #[test]
    fn frames_answer_calls_and_feed_streams() {
        // Calls are ids 6..9 (after the five streams); an item for the PM stream; a
        // response ending the tip stream (id 3).
        let pm = r#"{"method":"ChatService.PMStream[1]","params":{"sequenceId":"1","uid":"IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI="}}"#;
        let data = [
            r#"{"jsonrpc":"2.0","id":6,"result":{"ok":true}}"#,
            r#"{"jsonrpc":"2.0","id":7.0,"error":{"code":-32000,"message":"no"}}"#,
            pm,
            r#"{"id":3,"error":{"code":1,"message":"gone"}}"#,
            r#"{"id":6,"result":{}}"#,
            "not json",
        ]
        .join("\0");
        super::frames(data.as_bytes());
    }

    #[test]
    fn stream_items_accept_a_pm() {
        let item = br#"{"sequenceId":"7","uid":"IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=","nick":"n","msg":{"message":"hi"}}"#;
        let mut data = vec![0];
        data.extend_from_slice(item);
        super::stream_items(&data);
    }
}
