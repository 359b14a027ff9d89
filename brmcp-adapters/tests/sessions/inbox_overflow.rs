//! A session whose inbound queue overflows, in messages or in bytes, is closed; other
//! sessions are untouched, and reading makes room.

use std::time::Duration;

use brmcp_adapters::mem::{Faults, Pair};
use brmcp_adapters::{BrTransport, RouterConfig};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::Transport;
use rmcp::{RoleClient, RoleServer};
use serde_json::json;

fn message(value: serde_json::Value) -> ClientJsonRpcMessage {
    serde_json::from_value(value).expect("a client message")
}

fn initialize() -> ClientJsonRpcMessage {
    message(json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}
    }))
}

/// A progress notification carrying about `len` bytes of message text.
fn big_notification(n: u32, len: usize) -> ClientJsonRpcMessage {
    message(json!({
        "jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": n, "progress": n, "message": "x".repeat(len)}
    }))
}

/// Whether the server side of a session yields a message (not the end).
async fn received(session: &mut BrTransport<RoleServer>) -> bool {
    Transport::<RoleServer>::receive(session).await.is_some()
}

fn notification(n: u32) -> ClientJsonRpcMessage {
    message(json!({
        "jsonrpc": "2.0", "method": "notifications/progress",
        "params": {"progressToken": n, "progress": n}
    }))
}

#[tokio::test(start_paused = true)]
async fn overflow_closes_only_that_session() {
    let mut server = RouterConfig::server();
    server.inbox_capacity = 4;
    let pair = Pair::with_configs(15, Faults::none(), server, RouterConfig::client());

    // Two raw sessions; the server side is accepted but not read yet.
    let mut flooded = pair.client.dial(pair.server_id).expect("dial");
    let mut calm = pair.client.dial(pair.server_id).expect("dial");
    Transport::<RoleClient>::send(&mut flooded, initialize())
        .await
        .expect("send");
    Transport::<RoleClient>::send(&mut calm, initialize())
        .await
        .expect("send");
    for n in 0..10 {
        Transport::<RoleClient>::send(&mut flooded, notification(n))
            .await
            .expect("send");
    }
    for n in 0..2 {
        Transport::<RoleClient>::send(&mut calm, notification(n))
            .await
            .expect("send");
    }
    tokio::time::sleep(Duration::from_millis(10)).await;

    let stats = pair.server.stats();
    assert_eq!(stats.sessions_accepted, 2, "{stats:?}");
    assert_eq!(stats.sessions_overflowed, 1, "{stats:?}");
    assert_eq!(stats.sessions_open, 1);

    let mut first = pair.server.accept().await.expect("accepted");
    let mut second = pair.server.accept().await.expect("accepted");
    if first.sid() != flooded.sid() {
        std::mem::swap(&mut first, &mut second);
    }
    // The flooded session yields what fit in its queue, then ends.
    let mut got = 0;
    while Transport::<RoleServer>::receive(&mut first).await.is_some() {
        got += 1;
    }
    assert_eq!(got, 4);
    // The calm one got everything and stays open.
    for _ in 0..3 {
        assert!(
            Transport::<RoleServer>::receive(&mut second)
                .await
                .is_some()
        );
    }
    let more = tokio::time::timeout(
        Duration::from_secs(1),
        Transport::<RoleServer>::receive(&mut second),
    )
    .await;
    assert!(more.is_err(), "the calm session must still be open");
    assert_eq!(calm.sid(), second.sid());
}

#[tokio::test(start_paused = true)]
async fn byte_bound_closes_the_session_and_reading_makes_room() {
    let mut server = RouterConfig::server();
    // Room for many messages by count; the bytes bound two 3,000-byte notifications.
    server.inbox_capacity = 64;
    server.max_inbox_bytes = 7_000;
    let pair = Pair::with_configs(16, Faults::none(), server, RouterConfig::client());

    let mut flooded = pair.client.dial(pair.server_id).expect("dial");
    let mut paced = pair.client.dial(pair.server_id).expect("dial");
    for session in [&mut flooded, &mut paced] {
        Transport::<RoleClient>::send(session, initialize())
            .await
            .expect("send");
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let mut first = pair.server.accept().await.expect("accepted");
    let mut second = pair.server.accept().await.expect("accepted");
    if first.sid() != flooded.sid() {
        std::mem::swap(&mut first, &mut second);
    }
    // Both read their initialize; the queues are empty.
    assert!(received(&mut first).await);
    assert!(received(&mut second).await);

    // The paced session reads each notification before the next is sent: its queue
    // never holds more than one, and it stays open however much it receives.
    for n in 0..5 {
        Transport::<RoleClient>::send(&mut paced, big_notification(n, 3_000))
            .await
            .expect("send");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert!(received(&mut second).await);
    }
    // Unread, the third 3,000-byte notification passes 7,000 bytes.
    for n in 0..3 {
        Transport::<RoleClient>::send(&mut flooded, big_notification(n, 3_000))
            .await
            .expect("send");
    }
    tokio::time::sleep(Duration::from_millis(10)).await;
    let stats = pair.server.stats();
    assert_eq!(stats.sessions_overflowed, 1, "{stats:?}");
    assert_eq!(stats.sessions_open, 1, "{stats:?}");
    let mut got = 0;
    while Transport::<RoleServer>::receive(&mut first).await.is_some() {
        got += 1;
    }
    assert_eq!(got, 2, "what fit in the bytes, then the end");

    // A single message larger than the bound still reaches an empty queue.
    Transport::<RoleClient>::send(&mut paced, big_notification(9, 10_000))
        .await
        .expect("send");
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(received(&mut second).await);
    assert_eq!(pair.server.stats().sessions_open, 1);
}
