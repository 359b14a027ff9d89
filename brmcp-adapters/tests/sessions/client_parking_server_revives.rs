//! The server's next message revives a parked `Client`, and its handler still gets it;
//! a flood or a crowd of leases revives it once; an answer meant for an earlier service
//! of the session never completes a request of a later one.

#![allow(deprecated)] // logging and roots: deprecated in MCP, still spoken.

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use brmcp_adapters::{LeaseError, RouterConfig};
use rmcp::model::{
    ClientResult, LoggingLevel, LoggingMessageNotificationParam, PingRequest, ServerRequest,
};
use serde_json::json;

use crate::common::client_parking::{
    PARK_AFTER, SETTLE, Watcher, connect, echo, inject, pair, pushed,
};
use crate::common::{call, serve, text};

#[tokio::test(start_paused = true)]
async fn the_servers_messages_revive_a_parked_client() {
    let watcher = Watcher::default();
    let seen = watcher.seen.clone();
    let (pair, client, server) = pushed(34, watcher).await;

    let park = || async {
        tokio::time::sleep(PARK_AFTER * 2).await;
        assert!(client.is_parked());
    };

    park().await;
    server.notify_tool_list_changed().await.expect("notify");
    tokio::time::sleep(SETTLE).await;
    assert_eq!(seen.list_changed.load(SeqCst), 1, "list change lost");
    assert!(!client.is_parked());

    park().await;
    server
        .notify_logging_message(LoggingMessageNotificationParam::new(
            LoggingLevel::Info,
            json!("to a parked client"),
        ))
        .await
        .expect("log");
    tokio::time::sleep(SETTLE).await;
    assert_eq!(seen.logs.load(SeqCst), 1, "log line lost");

    park().await;
    let pong = tokio::time::timeout(
        SETTLE,
        server.send_request(ServerRequest::PingRequest(PingRequest::default())),
    )
    .await
    .expect("no answer to the ping")
    .expect("ping failed");
    assert!(matches!(pong, ClientResult::EmptyResult(_)), "{pong:?}");
    assert_eq!(seen.pings.load(SeqCst), 1);

    park().await;
    let roots = tokio::time::timeout(SETTLE, server.list_roots())
        .await
        .expect("no answer to roots/list")
        .expect("roots/list failed");
    assert_eq!(roots.roots[0].uri, "file:///parked");
    assert_eq!(seen.roots.load(SeqCst), 1);

    let stats = pair.client.stats();
    assert_eq!(stats.client_parked, 4, "{stats:?}");
    assert_eq!(stats.client_revived, 4, "{stats:?}");
    // And the client's own calls still work on the session revived by the server.
    let lease = client.lease().await.expect("lease");
    let tools = lease.list_all_tools().await.expect("tools");
    assert!(tools.is_empty());
}

/// A hostile server floods a parked session: it is revived once, its inbox bound
/// holds (the session is closed for overflow), and leases racing for it revive it
/// once.
#[tokio::test(start_paused = true)]
async fn a_flood_or_a_crowd_of_leases_revives_once() {
    const FLOOD: usize = 2_000;
    let pair = pair(36, RouterConfig::client());
    serve(&pair.server);
    let watcher = Watcher::default();
    let seen = watcher.seen.clone();
    let client = Arc::new(connect(&pair, watcher).await);

    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());
    let leases: Vec<_> = (0..32)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.lease().await.map(|_| ()) })
        })
        .collect();
    for lease in leases {
        lease.await.unwrap().expect("a racing lease");
    }
    assert_eq!(pair.client.stats().client_revived, 1);
    assert_eq!(echo(&client, "crowd").await, "crowd");

    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());
    for n in 0..FLOOD {
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                         "params": {"level": "info", "data": n}});
        inject(&pair, client.sid(), &log);
    }
    tokio::time::sleep(SETTLE).await;
    let stats = pair.client.stats();
    assert_eq!(stats.client_revived, 2, "{stats:?}");
    // The flood arrives faster than the revived service reads: past the inbox bound
    // the session is closed for overflow, not queued without end.
    let logs = seen.logs.load(SeqCst);
    assert_eq!(stats.sessions_overflowed, 1, "{stats:?}");
    assert!(logs < FLOOD, "{logs} of {FLOOD}: {stats:?}");
    assert_eq!(client.lease().await.err(), Some(LeaseError::Closed));
}

/// An answer with the id of a request an earlier service of the session sent (a late
/// answer to a call that timed out before the session parked) does not complete the
/// revived service's request of the same number.
#[tokio::test(start_paused = true)]
async fn an_earlier_services_answer_does_not_complete_a_later_request() {
    let mut config = RouterConfig::client();
    config.request_timeout = Some(Duration::from_secs(20));
    let pair = pair(37, config);
    serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;
    {
        // The handshake took id 0; this call is id 1, and times out.
        let lease = client.lease().await.expect("lease");
        let late = lease
            .call_tool(call("sleep", json!({"secs": 25})))
            .await
            .expect_err("timed out");
        assert!(late.to_string().contains("no answer"), "{late}");
    }
    // The real late answer to id 1 arrives (and is dropped) before the session parks.
    tokio::time::sleep(PARK_AFTER * 3).await;
    assert!(client.is_parked());
    // Answers, progress and cancellations reaching the parked session are dropped
    // without a service: none can concern it.
    for id in [1, 0] {
        inject(
            &pair,
            client.sid(),
            &json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        );
    }
    inject(
        &pair,
        client.sid(),
        &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1}}),
    );
    inject(
        &pair,
        client.sid(),
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 1}}),
    );
    tokio::time::sleep(SETTLE).await;
    let stats = pair.client.stats();
    assert!(client.is_parked(), "a late message revived the session");
    assert_eq!(stats.dropped_parked_answer, 4, "{stats:?}");
    assert_eq!(stats.client_revived, 0, "{stats:?}");

    // The revived service numbers from 0 again: its second request is its id 1.
    let lease = client.lease().await.expect("lease");
    assert_eq!(
        text(
            &lease
                .call_tool(call("echo", json!({"text": "zero"})))
                .await
                .unwrap()
        ),
        "zero"
    );
    let call = lease.call_tool(call("sleep", json!({"secs": 5})));
    let forged = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for id in [1, 0] {
            inject(
                &pair,
                client.sid(),
                &json!({"jsonrpc": "2.0", "id": id,
                        "result": {"content": [{"type": "text", "text": "slept 25"}]}}),
            );
        }
    };
    let (answer, ()) = tokio::join!(call, forged);
    assert_eq!(text(&answer.expect("answered")), "slept 5");
}
