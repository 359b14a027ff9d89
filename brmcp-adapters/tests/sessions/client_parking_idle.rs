//! A `Client`'s idle session is parked (its rmcp service dropped, its entry kept) and
//! revived by a lease with nothing on the wire; a parked client closes when dropped or
//! when another dial takes its sid, and a peer kept past its lease sends nothing.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use brmcp_adapters::{LeaseError, RouterConfig};
use serde_json::json;

use crate::common::client_parking::{PARK_AFTER, SETTLE, Watcher, connect, echo, pair, parked};
use crate::common::{call, serve};

#[tokio::test(start_paused = true)]
async fn an_idle_client_parks_and_comes_back_without_a_handshake() {
    let pair = pair(31, RouterConfig::client());
    serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;
    assert_eq!(echo(&client, "first").await, "first");
    assert!(!client.is_parked());

    tokio::time::sleep(PARK_AFTER / 2).await;
    assert!(!client.is_parked(), "parked before its delay");
    for round in 1..=3u64 {
        tokio::time::sleep(PARK_AFTER * 2).await;
        assert!(client.is_parked(), "round {round}: not parked");
        let stats = pair.client.stats();
        assert_eq!(stats.client_parked, round, "{stats:?}");
        assert_eq!(
            stats.sessions_open, 1,
            "a parked session is kept: {stats:?}"
        );

        let sent = pair.fabric.stats().sent;
        let said = format!("after {round}");
        assert_eq!(echo(&client, &said).await, said);
        // The call and its answer, one PM each: no initialize, no ping.
        assert_eq!(pair.fabric.stats().sent - sent, 2, "round {round}");
        assert_eq!(pair.client.stats().client_revived, round);
    }
    let server = pair.server.stats();
    assert_eq!(server.sessions_accepted, 1, "{server:?}");
    assert_eq!(server.dropped_unknown_session, 0, "{server:?}");
    assert_eq!(server.sessions_open, 1, "one session all along: {server:?}");

    client.close().await;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(pair.client.stats().sessions_open, 0);
}

#[tokio::test(start_paused = true)]
async fn a_parked_client_is_closed_when_dropped() {
    let (pair, client) = parked(32).await;
    drop(client);
    tokio::time::sleep(SETTLE).await;
    let stats = pair.client.stats();
    assert_eq!(stats.sessions_open, 0, "{stats:?}");
    assert_eq!(stats.sessions_closed, 1, "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_peer_kept_past_its_lease_sends_nothing_once_parked() {
    let pair = pair(45, RouterConfig::client());
    let probe = serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;
    let kept = (*client.lease().await.unwrap()).clone();
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());

    let sent = pair.fabric.stats().sent;
    let late = tokio::time::timeout(
        Duration::from_secs(5),
        kept.call_tool(call("echo", json!({"text": "late"}))),
    )
    .await
    .expect("the call hung");
    assert!(late.is_err(), "{late:?}");
    tokio::time::sleep(SETTLE).await;
    assert_eq!(pair.fabric.stats().sent, sent, "a parked session sent");
    assert_eq!(probe.calls.load(SeqCst), 0);
    assert!(client.is_parked());
    // The client itself goes on.
    assert_eq!(echo(&client, "leased").await, "leased");
}

#[tokio::test(start_paused = true)]
async fn a_client_whose_sid_another_dial_took_is_closed() {
    // Parked, then its sid dialed again (`dial_on` resumes a sid it is given): the new
    // session's entry replaces the client's.
    let (pair, parked) = parked(44).await;
    let _taken = pair.client.dial_on(pair.server_id, parked.sid()).unwrap();
    tokio::time::sleep(SETTLE).await;
    assert_eq!(parked.lease().await.err(), Some(LeaseError::Closed));
    assert_eq!(pair.client.stats().client_revived, 0, "revived another's");

    // Running, likewise.
    let running = connect(&pair, Watcher::default()).await;
    assert_eq!(echo(&running, "before").await, "before");
    let _taken_too = pair.client.dial_on(pair.server_id, running.sid()).unwrap();
    tokio::time::sleep(SETTLE).await;
    assert_eq!(running.lease().await.err(), Some(LeaseError::Closed));

    // Dropping the clients leaves the sessions that took their sids open.
    let open = pair.client.stats().sessions_open;
    drop((parked, running));
    tokio::time::sleep(SETTLE).await;
    assert_eq!(pair.client.stats().sessions_open, open);
}
