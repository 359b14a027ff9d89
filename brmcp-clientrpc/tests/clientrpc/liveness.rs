//! Liveness: the client answers the server's pings and accepts its pongs; a server
//! that stops answering is dropped and reconnected; a request in flight when the
//! socket dies fails as such, but for a PM, which is sent again once the socket is
//! back.

use std::time::Duration;

use crate::common::{Certs, Fake, FakeOptions, Reply, default_reply, eventually};
use brmcp_clientrpc::{ClientRpcError, ClientRpcHost, PM_RESENDS, Streams};

const WAIT: Duration = Duration::from_secs(5);

#[tokio::test]
async fn pings_are_answered_both_ways_and_the_connection_stays_up() {
    let certs = Certs::brclient();
    let fake = Fake::start(
        &certs,
        FakeOptions {
            ping_interval: Some(Duration::from_millis(30)),
            ..FakeOptions::default()
        },
    )
    .await;
    let config = certs
        .config(&fake)
        .with_ping(Duration::from_millis(40), Duration::from_millis(300));
    let host = ClientRpcHost::new(config).unwrap();
    host.connect(Streams::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pongs = fake.pongs();
    assert!(pongs.len() >= 5, "{} pongs", pongs.len());
    assert!(pongs.iter().all(|p| p == &[7u8; 16]), "echoed payloads");
    // The client's own pings got pongs: no reconnect.
    assert_eq!(fake.connections(), 1);
    assert_eq!(host.status().connects, 1);
    host.version().await.unwrap();
    host.close();
}

#[tokio::test]
async fn a_server_that_stops_answering_is_dropped_and_reconnected() {
    let (certs, fake) = Fake::brclient().await;
    let config = certs
        .config(&fake)
        .with_ping(Duration::from_millis(40), Duration::from_millis(100));
    let host = ClientRpcHost::new(config).unwrap();
    host.connect(Streams::new()).await.unwrap();
    fake.stall_connections();
    eventually("reconnected", WAIT, || fake.connections() == 2).await;
    eventually("host up again", WAIT, || host.status().connected).await;
    host.version().await.unwrap();
    host.close();
}

#[tokio::test]
async fn a_request_in_flight_fails_when_the_socket_dies() {
    let (certs, fake) = Fake::brclient().await;
    fake.set_handler(|call| {
        if call.method == "VersionService.Version" {
            Reply::later(std::future::pending())
        } else {
            default_reply(call)
        }
    });
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new()).await.unwrap();
    let call = tokio::spawn({
        let host = host.clone();
        async move { host.version().await }
    });
    eventually("request sent", WAIT, || {
        fake.requests_of("VersionService.Version").len() == 1
    })
    .await;
    fake.drop_connections();
    let err = call.await.unwrap().unwrap_err();
    assert!(matches!(err, ClientRpcError::ConnectionLost), "{err:?}");
    // The next call waits for the reconnection and goes through.
    fake.set_handler(default_reply);
    host.version().await.unwrap();
    eventually("status", WAIT, || host.status().connects == 2).await;
    host.close();
    let err = host.version().await.unwrap_err();
    assert!(matches!(err, ClientRpcError::Closed), "{err:?}");
}

#[tokio::test]
async fn a_failed_connect_can_be_retried() {
    let (certs, fake) = Fake::brclient().await;
    fake.refuse_next(1);
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    let err = host.connect(Streams::new()).await.unwrap_err();
    assert!(!matches!(err, ClientRpcError::Closed), "{err:?}");
    assert!(!host.status().connected);
    host.connect(Streams::new()).await.expect("second try");
    host.version().await.unwrap();
    host.close();
}

#[tokio::test]
async fn a_spawned_host_keeps_trying_and_waiting_calls_go_through() {
    let (certs, fake) = Fake::brclient().await;
    fake.refuse_next(3);
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.spawn(Streams::new()).await.unwrap();
    // Issued before any connection exists: it waits for one.
    let version = host.version().await.unwrap();
    assert_eq!(version.app_name, "brclient");
    assert_eq!(fake.accepts().len(), 4, "three refused, one kept");
    assert_eq!(host.status().connects, 1);
    host.close();
}

#[tokio::test]
async fn a_pm_in_flight_when_the_socket_dies_is_sent_again_once_it_is_back() {
    let (certs, fake) = Fake::brclient().await;
    // The client takes nothing until told to: every PM stays unanswered.
    fake.set_handler(|call| {
        if call.method == "ChatService.PM" {
            Reply::later(std::future::pending())
        } else {
            default_reply(call)
        }
    });
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new()).await.unwrap();
    let pm = tokio::spawn({
        let host = host.clone();
        async move { host.pm(&"22".repeat(32), "the answer").await }
    });
    eventually("PM sent", WAIT, || {
        fake.requests_of("ChatService.PM").len() == 1
    })
    .await;
    fake.drop_connections();
    eventually("PM sent again", WAIT, || {
        fake.requests_of("ChatService.PM").len() == 2
    })
    .await;
    // Lost once more, then taken: the PM is sent.
    fake.drop_connections();
    eventually("PM sent a third time", WAIT, || {
        fake.requests_of("ChatService.PM").len() == 3
    })
    .await;
    fake.set_handler(default_reply);
    fake.drop_connections();
    let err = pm.await.unwrap().unwrap_err();
    assert!(
        matches!(err, ClientRpcError::ConnectionLost),
        "sent {} times, then given up: {err:?}",
        1 + PM_RESENDS
    );
    let sent = fake.requests_of("ChatService.PM");
    assert_eq!(sent.len(), 3);
    assert!(
        sent.iter()
            .all(|r| r.params["msg"]["message"] == "the answer"),
        "the same PM each time"
    );
    // One loss: sent again and taken.
    fake.set_handler({
        let first = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        move |call| {
            if call.method == "ChatService.PM"
                && first.swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                Reply::later(std::future::pending())
            } else {
                default_reply(call)
            }
        }
    });
    let pm = tokio::spawn({
        let host = host.clone();
        async move { host.pm(&"22".repeat(32), "once more").await }
    });
    eventually("PM sent", WAIT, || {
        fake.requests_of("ChatService.PM").len() == 4
    })
    .await;
    fake.drop_connections();
    pm.await.unwrap().unwrap();
    assert_eq!(fake.requests_of("ChatService.PM").len(), 5);
    host.close();
}
