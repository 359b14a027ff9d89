//! The devnet's JSON-RPC framing over the WebSocket: binary JSON lines, what closes
//! the socket, what is ignored, error codes and texts, id echo, concurrency and the
//! 16-in-flight limit, pings and pongs, keepalive streams, injected faults.

use std::time::Duration;

use crate::common::{Frame, QUIET, WAIT, connect, start, u64_str};
use brmcp_devnet::DevnetConfig;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

fn quiet_config() -> DevnetConfig {
    let mut cfg = DevnetConfig::default();
    cfg.keepalive_floor = Duration::from_millis(50);
    cfg
}

#[tokio::test]
async fn replies_are_binary_json_lines_to_text_or_binary_requests() {
    let net = start(&["alice"], quiet_config()).await;
    let mut c = connect(&net.node("alice")).await;

    c.send_text(r#"{"jsonrpc":"2.0","id":1,"method":"VersionService.Version","params":{}}"#);
    let Some(Frame::Binary(raw)) = c.recv(WAIT).await else {
        panic!("expected a binary frame");
    };
    assert_eq!(raw.last(), Some(&b'\n'), "JSON followed by a newline");
    let text = std::str::from_utf8(&raw).unwrap();
    assert!(
        text.starts_with(r#"{"jsonrpc":"2.0","id":1,"result":{"appVersion":""#),
        "{text}"
    );
    let v: Value = serde_json::from_str(text).unwrap();
    assert_eq!(v["result"]["appName"], "brclient");
    assert_eq!(v["result"]["goRuntime"], "devnet");

    c.send_binary(
        br#"{"jsonrpc":"2.0","id":"dummy_id","method":"VersionService.Version","params":{}}"#,
    );
    let v = c.response_to(&json!("dummy_id"), WAIT).await.unwrap();
    assert_eq!(v["result"]["appName"], "brclient");
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn malformed_messages_close_the_socket_without_a_reply() {
    let net = start(&["alice"], quiet_config()).await;
    let alice = net.node("alice");
    for bad in [
        "not json",
        r#"[{"jsonrpc":"2.0","id":1,"method":"VersionService.Version","params":{}}]"#,
        r#"{"jsonrpc":"1.0","id":1,"method":"VersionService.Version","params":{}}"#,
        r#"{"id":1,"method":"VersionService.Version","params":{}}"#,
        r#"{"jsonrpc":"2.0","id":1,"method":7,"params":{}}"#,
    ] {
        let mut c = connect(&alice).await;
        c.send_text(bad);
        assert_eq!(c.recv(WAIT).await, Some(Frame::Closed), "{bad}");
    }
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn notifications_responses_and_trailing_values_are_ignored() {
    let net = start(&["alice"], quiet_config()).await;
    let alice = net.node("alice");
    let mut c = connect(&alice).await;
    c.send_text(r#"{"jsonrpc":"2.0","method":"VersionService.Version","params":{}}"#);
    c.send_text(r#"{"jsonrpc":"2.0","id":null,"method":"VersionService.Version","params":{}}"#);
    c.send_text(r#"{"jsonrpc":"2.0","id":5,"result":{}}"#);
    assert_eq!(
        c.recv(QUIET).await,
        None,
        "no reply to a notification or a response"
    );
    // Only the first JSON value of a message is read.
    c.send_text(
        r#"{"jsonrpc":"2.0","id":9,"method":"VersionService.Version","params":{}} {"garbage"#,
    );
    assert!(
        c.response_to(&json!(9), WAIT)
            .await
            .unwrap()
            .get("result")
            .is_some()
    );

    let log = net.devnet.requests(alice.id).unwrap();
    assert_eq!(log.len(), 4);
    assert_eq!(log[0].method.as_deref(), Some("VersionService.Version"));
    assert_eq!(log[0].id, None);
    assert_eq!(log[3].id, Some(json!(9)));
    assert!(log[3].raw.ends_with("{\"garbage"));
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn method_and_param_errors_have_brclient_codes_and_texts() {
    let mut cfg = quiet_config();
    cfg.max_msg_size = 2_000;
    let net = start(&["alice", "bob"], cfg).await;
    let mut c = connect(&net.node("alice")).await;
    let cases: &[(&str, Value, i64, &str)] = &[
        (
            "NoSuchService.Version",
            json!({}),
            -32603,
            "unknown service",
        ),
        ("ChatService.Nope", json!({}), -32603, "unknown method"),
        ("GCService.List", json!({}), -32603, "unknown method"),
        // Go's `%.8x` suffix with a letter is not a stream suffix.
        (
            "ChatService.PMStream[0000000a]",
            json!({}),
            -32603,
            "unknown method",
        ),
        ("Version", json!({}), -32603, "method is not Service.Method"),
        (
            "ChatService.AckReceivedPM",
            json!({"sequenceId": "1", "bogus": 1}),
            -32602,
            "unable to decode params: proto: unknown field \"bogus\"",
        ),
        (
            "ChatService.PM",
            json!({"user": "bob"}),
            -32603,
            "msg is nil",
        ),
        (
            "ChatService.PM",
            json!({"user": "bob", "msg": {}}),
            -32603,
            "msg is empty",
        ),
        (
            "ChatService.PM",
            json!({"user": "carol", "msg": {"message": "hi"}}),
            -32603,
            "user carol not found",
        ),
    ];
    for (method, params, code, text) in cases {
        let (got_code, got_text) = c.err(method, params.clone()).await;
        assert_eq!(
            (got_code, got_text.as_str()),
            (*code, *text),
            "{method} {params}"
        );
    }

    let (code, text) = c
        .err("ChatService.AckReceivedPM", json!({"sequenceId": "x1"}))
        .await;
    assert_eq!(code, -32602);
    assert!(
        text.starts_with("unable to decode params: proto: invalid value for uint64"),
        "{text}"
    );
    // Params must be an object.
    let id = c.request("VersionService.Version", json!([]));
    let resp = c.response_to(&json!(id), WAIT).await.unwrap();
    assert_eq!(resp["error"]["code"], -32602);
    c.send_text(r#"{"jsonrpc":"2.0","id":"np","method":"VersionService.Version"}"#);
    let resp = c.response_to(&json!("np"), WAIT).await.unwrap();
    assert_eq!(resp["error"]["code"], -32602);

    // Oversize PM: brclient's text, with the estimate.
    let big = "x".repeat(1_500);
    let (code, text) = c
        .err(
            "ChatService.PM",
            json!({"user": "bob", "msg": {"message": big}}),
        )
        .await;
    assert_eq!(code, -32603);
    assert!(
        text.starts_with(
            "cannot enqueue message rpc.RMPrivateMessage estimated as larger than max message size "
        ) && text.ends_with(" > 2000: RM is too large"),
        "{text}"
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn ids_come_back_as_go_reencodes_them() {
    let net = start(&["alice"], quiet_config()).await;
    let mut c = connect(&net.node("alice")).await;
    let cases = [
        (r#""abc<&>""#, "\"abc\\u003c\\u0026\\u003e\""),
        ("4294967297", "4294967297"),
        ("9007199254740993", "9007199254740992"),
        ("1e3", "1000"),
        (r#"{"b":1,"a":[true]}"#, r#"{"a":[true],"b":1}"#),
    ];
    for (sent, echoed) in cases {
        c.send_text(&format!(
            r#"{{"jsonrpc":"2.0","id":{sent},"method":"VersionService.Version","params":{{}}}}"#
        ));
        let Some(Frame::Binary(raw)) = c.recv(WAIT).await else {
            panic!("no reply for id {sent}");
        };
        let text = String::from_utf8(raw).unwrap();
        assert!(
            text.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{echoed},"result":"#)),
            "{sent}: {text}"
        );
    }
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn requests_run_concurrently_and_reply_out_of_order() {
    let net = start(&["alice"], quiet_config()).await;
    let alice = net.node("alice");
    net.devnet
        .delay_method(
            alice.id,
            "ChatService.UserPublicIdentity",
            Some(Duration::from_millis(300)),
        )
        .unwrap();
    let mut c = connect(&alice).await;
    let slow = c.request("ChatService.UserPublicIdentity", json!({}));
    let fast = c.request("VersionService.Version", json!({}));
    let first = c.recv(WAIT).await.and_then(|f| f.json()).unwrap();
    assert_eq!(first["id"], fast);
    let second = c.recv(WAIT).await.and_then(|f| f.json()).unwrap();
    assert_eq!(second["id"], slow);
    assert_eq!(second["result"]["nick"], "alice");
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn sixteen_in_flight_then_the_reader_stops() {
    let mut cfg = quiet_config();
    cfg.ping_interval = Duration::from_millis(300);
    cfg.pong_timeout = Duration::from_secs(1);
    let net = start(&["alice"], cfg).await;
    let alice = net.node("alice");
    let mut c = connect(&alice).await;
    // Fifteen streams (decimal suffixes above 10 are fine) hold fifteen slots.
    for i in 1..=15 {
        c.request(&format!("ChatService.PMStream[{i}]"), json!({}));
    }
    c.ok("VersionService.Version", json!({})).await;
    assert_eq!(net.devnet.peak_in_flight(alice.id).unwrap(), 16);
    // The sixteenth stream takes the last slot; the next request is read, then the
    // reader waits for a slot and reads nothing more.
    c.request("ChatService.PMStream[16]", json!({}));
    let blocked = c.request("VersionService.Version", json!({}));
    let unread = c.request("VersionService.Version", json!({}));
    assert_eq!(c.response_to(&json!(blocked), QUIET).await, None);
    let seen: Vec<Value> = net
        .devnet
        .requests(alice.id)
        .unwrap()
        .into_iter()
        .filter_map(|r| r.id)
        .collect();
    assert!(seen.contains(&json!(blocked)));
    assert!(
        !seen.contains(&json!(unread)),
        "the 18th request is never read"
    );
    // With the reader stopped, the server's ping goes unanswered: it drops the socket.
    assert!(c.closed(WAIT).await);
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn client_pings_get_sixteen_byte_padded_pongs() {
    let net = start(&["alice"], quiet_config()).await;
    let mut c = connect(&net.node("alice")).await;
    c.send(Message::Ping(b"abc".to_vec().into()));
    let pong = c.recv(WAIT).await;
    assert_eq!(
        pong,
        Some(Frame::Pong(b"abc\0\0\0\0\0\0\0\0\0\0\0\0\0".to_vec()))
    );
    assert_eq!(c.recv(QUIET).await, None, "exactly one pong");
    c.send(Message::Ping(vec![9; 20].into()));
    assert_eq!(c.recv(WAIT).await, Some(Frame::Pong(vec![9; 16])));
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn server_pings_keep_answering_clients_and_drop_silent_ones() {
    let mut cfg = quiet_config();
    cfg.ping_interval = Duration::from_millis(100);
    cfg.pong_timeout = Duration::from_secs(1);
    let net = start(&["alice"], cfg).await;
    let alice = net.node("alice");
    let mut c = connect(&alice).await;
    // An answering client sees 16-byte pings and stays connected across several.
    for _ in 0..3 {
        let Some(Frame::Ping(p)) = c.find(WAIT, |f| matches!(f, Frame::Ping(_))).await else {
            panic!("no ping");
        };
        assert_eq!(p.len(), 16);
    }
    c.ok("VersionService.Version", json!({})).await;
    assert_eq!(net.devnet.connection_count(alice.id).unwrap(), 1);

    // A client that stops reading never answers: dropped after interval + timeout.
    c.pause_reading(true);
    let paused = tokio::time::Instant::now();
    while net.devnet.connection_count(alice.id).unwrap() > 0 {
        assert!(paused.elapsed() < WAIT, "a silent client is never dropped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        paused.elapsed() >= Duration::from_millis(500),
        "not before the pong timeout"
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn an_unsolicited_pong_fails_the_next_ping() {
    let mut cfg = quiet_config();
    cfg.ping_interval = Duration::from_millis(200);
    let net = start(&["alice"], cfg).await;
    let alice = net.node("alice");
    let mut c = connect(&alice).await;
    c.send(Message::Pong(b"hello".to_vec().into()));
    assert!(
        c.closed(WAIT).await,
        "Go's pong handler hands it to the next ping, which fails"
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn an_unresponsive_node_answers_nothing_until_it_recovers() {
    let net = start(&["alice"], quiet_config()).await;
    let alice = net.node("alice");
    let mut c = connect(&alice).await;
    net.devnet.set_unresponsive(alice.id, true).unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.send(Message::Ping(vec![1; 16].into()));
    let id = c.request("VersionService.Version", json!({}));
    assert_eq!(c.recv(QUIET).await, None, "no pong and no reply");
    net.devnet.set_unresponsive(alice.id, false).unwrap();
    assert!(c.response_to(&json!(id), WAIT).await.is_some());
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn keepalive_stream_items_carry_the_suffixed_method() {
    let net = start(&["alice"], quiet_config()).await;
    let mut c = connect(&net.node("alice")).await;
    c.request(
        "VersionService.KeepaliveStream[4]",
        json!({"interval": "10"}),
    );
    let items = c.items("VersionService.KeepaliveStream[4]", 2).await;
    for item in items {
        let ts = u64_str(&item["timestamp"]);
        assert!(ts > 1_700_000_000, "unix seconds as a string: {item}");
    }
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn injected_failures_then_success() {
    let net = start(&["alice", "bob"], quiet_config()).await;
    let alice = net.node("alice");
    net.devnet
        .fail_next(alice.id, "ChatService.PM", 2, "cannot send: relay down")
        .unwrap();
    let mut c = connect(&alice).await;
    let pm = json!({"user": "bob", "msg": {"message": "hi"}});
    for _ in 0..2 {
        assert_eq!(
            c.err("ChatService.PM", pm.clone()).await,
            (-32603, "cannot send: relay down".into())
        );
    }
    assert_eq!(c.ok("ChatService.PM", pm).await, json!({}));
    net.devnet.shutdown().await;
}
