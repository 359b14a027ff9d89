//! Hostile input to the 2025-11-25 form of tasks: the `task` param, cursors, and the
//! answers rewritten in rmcp's event streams.

use serde_json::{Value, json};

use super::*;

#[test]
fn task_params_out_of_bounds_or_malformed_are_refused() {
    for task in [
        json!(null),
        json!("soon"),
        json!(1),
        json!([{"ttl": 1}]),
        json!({"ttl": -1}),
        json!({"ttl": 0}),
        json!({"ttl": 0.5}),
        json!({"ttl": 1e20}),
        json!({"ttl": MAX_REQUESTED_TTL_MS + 1}),
        json!({"ttl": "1000"}),
        json!({"ttl": true}),
        json!({"ttl": {}}),
    ] {
        assert!(check_task(&task).is_err(), "{task}");
    }
    for task in [
        json!({}),
        json!({"ttl": null}),
        json!({"ttl": 1}),
        json!({"ttl": 60_000}),
        json!({"ttl": MAX_REQUESTED_TTL_MS}),
        // What the SDKs add beside ttl (a poll interval asked for) is not refused.
        json!({"ttl": 1_000, "pollInterval": 500}),
    ] {
        assert_eq!(check_task(&task), Ok(()), "{task}");
    }
}

fn message(params: Value) -> Map<String, Value> {
    let Value::Object(m) = json!({"jsonrpc": "2.0", "id": 1, "method": "m", "params": params})
    else {
        unreachable!()
    };
    m
}

#[test]
fn only_the_bridges_own_cursors_are_taken() {
    assert_eq!(cursor(&message(json!({}))), Ok(0));
    assert_eq!(cursor(&message(json!({"cursor": null}))), Ok(0));
    assert_eq!(cursor(&message(json!({"cursor": "42"}))), Ok(42));
    for bad in [
        json!("-1"),
        json!("4 2"),
        json!("0x10"),
        json!(""),
        json!("99999999999999999999"),
        json!(42),
        json!(["42"]),
    ] {
        assert!(cursor(&message(json!({ "cursor": bad }))).is_err(), "{bad}");
    }
}

#[test]
fn a_task_id_must_be_a_string() {
    assert_eq!(task_id(&message(json!({"taskId": "abc"}))), Ok("abc"));
    for bad in [
        json!({}),
        json!({"taskId": 1}),
        json!({"taskId": null}),
        json!([]),
    ] {
        assert!(task_id(&message(bad.clone())).is_err(), "{bad}");
    }
}

#[test]
fn the_tasks_capability_becomes_the_extension_and_asking_capabilities_are_dropped() {
    let Value::Object(caps) = json!({
        "tasks": {"list": {}},
        "elicitation": {"form": {}},
        "sampling": {},
        "roots": {"listChanged": true},
        "experimental": {"x": {}},
        "extensions": {"io.example/x": {"a": 1}},
    }) else {
        unreachable!()
    };
    let out = Value::Object(with_extension(&caps));
    // A task's run asks the agent nothing (its requests would have no stream).
    assert_eq!(
        out,
        json!({
            "experimental": {"x": {}},
            "extensions": {"io.example/x": {"a": 1}, TASKS_EXTENSION: {}},
        })
    );
    // A hostile `extensions` that is not an object is replaced, not trusted.
    let Value::Object(caps) = json!({"tasks": {}, "extensions": 5}) else {
        unreachable!()
    };
    let out = Value::Object(with_extension(&caps));
    assert_eq!(out, json!({"extensions": {TASKS_EXTENSION: {}}}));
}

#[test]
fn only_the_answer_to_the_request_is_edited_in_an_event_stream() {
    let id = json!(7);
    let is_answer = |m: &Value| {
        (m.get("result").is_some() || m.get("error").is_some()) && m.get("id") == Some(&id)
    };
    let mut edit = Some(|m: &mut Value| m["result"] = json!("edited"));
    // A notification and another request's answer pass as they came.
    for event in [
        "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n",
        "id: 3\ndata: {\"jsonrpc\":\"2.0\",\"id\":8,\"result\":{}}\n\n",
        "data: not json\n\n",
        ": a comment\n\n",
    ] {
        assert_eq!(
            edit_event(event, &is_answer, &mut edit),
            (event.to_owned(), false)
        );
    }
    assert!(edit.is_some(), "nothing edited yet");
    let (out, done) = edit_event(
        "id: 4\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\n\
         data: \"id\":7,\"result\":{}}\n\n",
        &is_answer,
        &mut edit,
    );
    assert!(done);
    let data: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(data.len(), 1, "{out}");
    let message: Value = serde_json::from_str(data[0]).expect("json");
    assert_eq!(message["result"], json!("edited"));
    assert!(out.starts_with("id: 4\nevent: message\n"), "{out}");
    assert!(out.ends_with("\n\n"), "{out}");
}

#[tokio::test]
async fn an_answer_rewritten_in_json_or_a_stream_loses_its_stale_length() {
    let answer = json!({"jsonrpc": "2.0", "id": 1, "result": {"a": 1}});
    let json_response = Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, answer.to_string().len())
        .body(Body::from(answer.to_string()))
        .expect("response");
    let out = rewrite(json_response, Some(&json!(1)), |m| {
        m["result"] = json!({"a": "a longer value than before"});
    })
    .await;
    assert!(out.headers().get(header::CONTENT_LENGTH).is_none());
    let body = axum::body::to_bytes(out.into_body(), 1 << 16)
        .await
        .expect("body");
    let got: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(got["result"]["a"], json!("a longer value than before"));

    // The stream is read up to the answer, what follows it is not waited for.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    tx.send(Ok(Bytes::from("data: {\"jsonrpc\":\"2.0\",\"id\":1,")))
        .await
        .expect("send");
    tx.send(Ok(Bytes::from("\"result\":{}}\n\n")))
        .await
        .expect("send");
    let stream = Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(tokio_stream_of(rx)))
        .expect("response");
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        rewrite(stream, Some(&json!(1)), |m| m["result"] = json!({"b": 2})),
    )
    .await
    .expect("not held after the answer");
    drop(tx);
    let body = axum::body::to_bytes(out.into_body(), 1 << 16)
        .await
        .expect("body");
    let text = String::from_utf8_lossy(&body);
    assert!(text.contains("\"b\":2"), "{text}");
}

fn tokio_stream_of(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}
