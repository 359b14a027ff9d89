//! A client that never re-initializes (as a plain go-sdk client) keeps calling our server
//! across its idle expiry: the server resumes the session from its record, answering
//! every request that arrives on it, however many. A session id that was never ours
//! still gets session-not-found, for every request.

use std::time::Duration;

use crate::common::raw::RawClient;
use brmcp_adapters::mem::uid;
use brmcp_adapters::{RouterConfig, SESSION_NOT_FOUND};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(5);

fn call(id: u64, text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": "echo", "arguments": {"text": text}}})
}

fn echoed(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("<no text>")
}

#[tokio::test(start_paused = true)]
async fn plain_client_keeps_its_session_across_idle_expiry() {
    let mut config = RouterConfig::server();
    config.server_idle_timeout = Some(Duration::from_secs(60));
    let mut raw = RawClient::new(uid(2), config);
    let probe = crate::common::serve(&raw.server);

    raw.send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "go-sdk", "version": "v1.6.1"}}}))
        .await;
    let init = raw.recv(WAIT).await.expect("initialize answered");
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    raw.send(call(2, "before")).await;
    assert_eq!(echoed(&raw.recv(WAIT).await.unwrap()), "before");

    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(raw.server.stats().sessions_expired, 1);

    // Three requests at once on the forgotten session: each is served.
    for (id, t) in [(3, "a"), (4, "b"), (5, "c")] {
        raw.send(call(id, t)).await;
    }
    let mut answers = Vec::new();
    while let Some(answer) = raw.recv(WAIT).await {
        answers.push(answer);
    }
    answers.sort_by_key(|a| a["id"].as_u64());
    let got: Vec<(u64, &str)> = answers
        .iter()
        .map(|a| (a["id"].as_u64().unwrap_or(0), echoed(a)))
        .collect();
    assert_eq!(got, vec![(3, "a"), (4, "b"), (5, "c")], "{answers:?}");
    let stats = raw.server.stats();
    assert_eq!(stats.sessions_resumed, 1, "{stats:?}");
    assert_eq!(stats.dropped_unknown_session, 0, "{stats:?}");
    assert_eq!(probe.calls.load(std::sync::atomic::Ordering::SeqCst), 4);

    // The resumed session is the client's: its info and the negotiated version.
    raw.send(json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "whoami", "arguments": {}}}))
        .await;
    let answer = raw.recv(WAIT).await.expect("answered");
    assert_eq!(echoed(&answer), "go-sdk 2025-06-18", "{answer:?}");

    // A resumed session is resumable in its turn.
    tokio::time::sleep(Duration::from_secs(120)).await;
    raw.send(call(6, "again")).await;
    let answer = raw.recv(WAIT).await.expect("answered");
    assert_eq!((answer["id"].as_u64(), echoed(&answer)), (Some(6), "again"));
    let stats = raw.server.stats();
    assert_eq!(
        (stats.sessions_expired, stats.sessions_resumed),
        (2, 2),
        "{stats:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_session_never_ours_is_not_found_for_every_request() {
    let mut raw = RawClient::new(uid(2), RouterConfig::server());
    let _probe = crate::common::serve(&raw.server);
    raw.send(call(1, "x")).await;
    raw.send(call(2, "y")).await;
    for id in [1, 2] {
        let answer = raw.recv(WAIT).await.expect("answered, not dropped");
        assert_eq!(answer["id"], id);
        assert_eq!(answer["error"]["code"], SESSION_NOT_FOUND.0);
    }
    assert_eq!(raw.server.stats().sessions_accepted, 0);
}
