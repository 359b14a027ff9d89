//! The twelve end-to-end checks of the simulator: the real clientrpc client
//! (`brmcp_clientrpc`) against the devnet, each node reached through the
//! config file the devnet writes for it.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{QUIET, WAIT, start, start_specs};
use brmcp::host::journal::{JournalHandler, PmJournal};
use brmcp_adapters::{BoxError, PeerId};
use brmcp_clientrpc::{
    BotConfig, ClientRpcConfig, ClientRpcError, ClientRpcHost, Streams, TipOutcome,
};
use brmcp_clientrpc::{ReceivedPm, ReceivedTip};
use brmcp_devnet::{CertMode, DevnetConfig, NodeInfo, NodeSpec, StreamKind};
use serde_json::json;
use tokio::sync::mpsc;

/// The client config from the node's `brmcp-serve.conf`, with test-sized backoff.
fn config(info: &NodeInfo) -> ClientRpcConfig {
    let bot = BotConfig::load(&info.config_path).unwrap();
    let mut cfg = ClientRpcConfig::from_bot_config(&bot)
        .with_backoff(Duration::from_millis(50), Duration::from_millis(400));
    cfg.request_timeout = Some(WAIT);
    cfg.tip_timeout = WAIT;
    cfg
}

/// A PM handler that forwards every PM it processes.
fn pm_sink() -> (
    impl Fn(ReceivedPm) -> std::future::Ready<Result<(), BoxError>> + Send + Sync + 'static,
    mpsc::UnboundedReceiver<ReceivedPm>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = move |pm: ReceivedPm| {
        let _ = tx.send(pm);
        std::future::ready(Ok(()))
    };
    (handler, rx)
}

/// A tip handler that forwards every tip it processes.
fn tip_sink() -> (
    impl Fn(ReceivedTip) -> std::future::Ready<Result<(), BoxError>> + Send + Sync + 'static,
    mpsc::UnboundedReceiver<ReceivedTip>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handler = move |tip: ReceivedTip| {
        let _ = tx.send(tip);
        std::future::ready(Ok(()))
    };
    (handler, rx)
}

async fn host(info: &NodeInfo, streams: Streams) -> ClientRpcHost {
    let host = ClientRpcHost::new(config(info)).unwrap();
    host.connect(streams).await.unwrap();
    host
}

async fn next<T>(rx: &mut mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("item in time")
        .expect("channel open")
}

async fn nothing<T: std::fmt::Debug>(rx: &mut mpsc::UnboundedReceiver<T>) {
    if let Ok(Some(item)) = tokio::time::timeout(QUIET, rx.recv()).await {
        panic!("unexpected item: {item:?}");
    }
}

/// Waits until `f` holds.
async fn eventually(what: &str, f: impl Fn() -> bool) {
    let start = tokio::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < WAIT, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn acked(net: &crate::common::Net, node: &NodeInfo, kind: StreamKind) -> Vec<bool> {
    net.devnet
        .log(node.id, kind)
        .unwrap()
        .iter()
        .map(|e| e.acked)
        .collect()
}

fn peer(info: &NodeInfo) -> PeerId {
    PeerId::from_bytes(info.uid)
}

/// 1. mTLS pinning: the right `rpc.cert` connects, another is refused, the devnet
/// refuses a client without `rpc-client.cert`, and brclientd's layout works pinned or
/// by its CA.
#[tokio::test]
async fn check_01_mtls_pinning() {
    let net = start_specs(
        vec![
            NodeSpec::new("alice"),
            NodeSpec::new("bob"),
            NodeSpec::new("daemon").cert_mode(CertMode::Brclientd),
        ],
        DevnetConfig::default(),
    )
    .await;
    let (alice, bob, daemon) = (net.node("alice"), net.node("bob"), net.node("daemon"));

    let good = host(&alice, Streams::new()).await;
    assert_eq!(good.version().await.unwrap().app_name, "brclient");

    let mut wrong_pin = config(&alice);
    wrong_pin.server_cert = bob.certs.server_cert.clone().into();
    let err = ClientRpcHost::new(wrong_pin)
        .unwrap()
        .connect(Streams::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ClientRpcError::Tls(_)), "{err:?}");

    let mut no_client_cert = config(&alice);
    no_client_cert.client_cert = None;
    no_client_cert.client_key = None;
    let err = ClientRpcHost::new(no_client_cert)
        .unwrap()
        .connect(Streams::new())
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("CertificateRequired"),
        "{err:?}"
    );

    let pinned = host(&daemon, Streams::new()).await;
    assert_eq!(pinned.version().await.unwrap().app_name, "brclientd");
    let mut by_ca = config(&daemon);
    by_ca.server_cert = daemon.certs.ca_cert.clone().into();
    let by_ca = ClientRpcHost::new(by_ca).unwrap();
    by_ca.connect(Streams::new()).await.unwrap();
    assert_eq!(by_ca.version().await.unwrap().app_name, "brclientd");
    for h in [good, pinned, by_ca] {
        h.close();
    }
    net.devnet.shutdown().await;
}

/// 2. Version round trip; responses coming back out of order are matched by id.
#[tokio::test]
async fn check_02_version_and_out_of_order_responses() {
    let net = start(&["alice"], DevnetConfig::default()).await;
    let alice = net.node("alice");
    net.devnet
        .delay_method(
            alice.id,
            "ChatService.UserPublicIdentity",
            Some(Duration::from_millis(300)),
        )
        .unwrap();
    let h = host(&alice, Streams::new()).await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (slow, fast) = tokio::join!(
        async {
            let r = h.public_identity().await;
            order.lock().unwrap().push("identity");
            r
        },
        async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let r = h.version().await;
            order.lock().unwrap().push("version");
            r
        }
    );
    assert_eq!(*order.lock().unwrap(), ["version", "identity"]);
    assert_eq!(slow.unwrap().nick, "alice");
    assert_eq!(fast.unwrap().app_name, "brclient");
    h.close();
    net.devnet.shutdown().await;
}

/// 3. A→B by hex uid and by nick: B's stream yields both (uid decoded, string ids
/// parsed), B acknowledges, and a reconnect redelivers nothing.
#[tokio::test]
async fn check_03_pm_by_uid_and_nick_acked_not_redelivered() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let (handler, mut pms) = pm_sink();
    let b = host(&bob, Streams::new().pms(handler)).await;
    let a = host(&alice, Streams::new()).await;

    a.pm(&bob.uid_hex(), "by uid").await.unwrap();
    a.pm("bob", "by nick").await.unwrap();
    let first = next(&mut pms).await;
    let second = next(&mut pms).await;
    assert_eq!(
        (first.msg.message.as_str(), second.msg.message.as_str()),
        ("by uid", "by nick")
    );
    assert_eq!(first.uid, peer(&alice));
    assert_eq!(first.nick, "alice");
    let log = net.devnet.log(bob.id, StreamKind::Pm).unwrap();
    assert_eq!(first.sequence_id, log[0].sequence_id);
    assert_eq!(second.sequence_id, log[1].sequence_id);
    assert!(first.sequence_id > 1 << 32);
    eventually("both acked", || {
        acked(&net, &bob, StreamKind::Pm) == [true, true]
    })
    .await;

    net.devnet.drop_connections(bob.id).unwrap();
    eventually("reconnected", || {
        b.status().connects >= 2 && b.status().connected
    })
    .await;
    nothing(&mut pms).await;
    a.close();
    b.close();
    net.devnet.shutdown().await;
}

/// 4. B dies before acknowledging: the restarted bot gets the same sequence id again,
/// and its PM journal recognises it: one PM recorded, acknowledged at last.
#[tokio::test]
async fn check_04_crash_before_ack_is_deduplicated() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let store_dir = tempfile::tempdir().unwrap();
    net.devnet
        .fail_next(bob.id, "ChatService.AckReceivedPM", 1, "disk full")
        .unwrap();

    let journal = |dir: &std::path::Path| {
        let inbox = Arc::new(PmJournal::open(dir).unwrap());
        (
            inbox.clone(),
            JournalHandler::new(inbox, Arc::new(tokio::sync::Notify::new())),
        )
    };
    let (inbox, handler) = journal(store_dir.path());
    let b1 = host(&bob, Streams::new().pms(handler)).await;
    let a = host(&alice, Streams::new()).await;
    a.pm("bob", "once").await.unwrap();
    eventually("recorded", || inbox.len().unwrap() == 1).await;
    // Recorded, but the ack failed: the server still holds it.
    eventually("ack attempted", || {
        net.devnet
            .requests(bob.id)
            .unwrap()
            .iter()
            .any(|r| r.method.as_deref() == Some("ChatService.AckReceivedPM"))
    })
    .await;
    b1.close();
    let seq = inbox.unprocessed(10).unwrap()[0].seq;
    drop(inbox);

    // The restarted bot opens from the start and gets the item again.
    let (inbox, handler) = journal(store_dir.path());
    let b2 = host(&bob, Streams::new().pms(handler)).await;
    eventually("acked after redelivery", || {
        acked(&net, &bob, StreamKind::Pm) == [true]
    })
    .await;
    let acks_of_it = net
        .devnet
        .requests(bob.id)
        .unwrap()
        .iter()
        .filter(|r| {
            r.method.as_deref() == Some("ChatService.AckReceivedPM")
                && r.raw.contains(&seq.to_string())
        })
        .count();
    assert!(
        acks_of_it >= 2,
        "the failed ack, then one after the redelivery"
    );
    tokio::time::sleep(QUIET).await;
    let rows = inbox.unprocessed(10).unwrap();
    assert_eq!(rows.len(), 1, "deduplicated by the journal: {rows:?}");
    assert_eq!(rows[0].body, "once");
    a.close();
    b2.close();
    net.devnet.shutdown().await;
}

/// 5. B offline: A's PMs succeed; B receives them when it comes online, in order.
#[tokio::test]
async fn check_05_offline_recipient_in_order() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet.set_online(bob.id, false).unwrap();
    let (handler, mut pms) = pm_sink();
    let b = host(&bob, Streams::new().pms(handler)).await;
    let a = host(&alice, Streams::new()).await;
    for i in 0..6 {
        a.pm("bob", format!("p{i}")).await.unwrap();
    }
    nothing(&mut pms).await;
    net.devnet.set_online(bob.id, true).unwrap();
    for i in 0..6 {
        assert_eq!(next(&mut pms).await.msg.message, format!("p{i}"));
    }
    a.close();
    b.close();
    net.devnet.shutdown().await;
}

/// 6. Errors reach the caller with the server's code and text.
#[tokio::test]
async fn check_06_server_errors_surface_unchanged() {
    let mut cfg = DevnetConfig::default();
    cfg.max_msg_size = 4_096;
    let net = start(&["alice", "bob"], cfg).await;
    let alice = net.node("alice");
    let a = host(&alice, Streams::new()).await;

    let err = a.pm("carol", "hi").await.unwrap_err();
    assert_eq!(
        (err.code(), err.server_message()),
        (Some(-32603), Some("user carol not found"))
    );
    let err = a.pm("bob", "").await.unwrap_err();
    assert_eq!(err.server_message(), Some("msg is empty"));
    let err = a.pm("bob", "z".repeat(5_000)).await.unwrap_err();
    let text = err.server_message().unwrap();
    assert!(
        text.starts_with("cannot enqueue message rpc.RMPrivateMessage estimated as larger")
            && text.ends_with("> 4096: RM is too large"),
        "{text}"
    );
    let err = a
        .call(
            "ChatService.PM",
            &json!({"user": "bob", "msg": {"message": "x"}, "urgent": true}),
        )
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(-32602));
    assert_eq!(
        err.server_message(),
        Some("unable to decode params: proto: unknown field \"urgent\"")
    );
    a.close();
    net.devnet.shutdown().await;
}

/// 7. A tips B: paid on A's TipProgress, received with the same milliatoms on B,
/// both acknowledged, balances moved; a payee that cannot invoice gets retries and a
/// terminal failure.
#[tokio::test]
async fn check_07_tips_paid_and_failed() {
    let mut cfg = DevnetConfig::default();
    cfg.tip_retry_spacing = Duration::from_millis(50);
    let net = start(&["alice", "bob"], cfg).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let before = (net.devnet.balance(&alice.uid), net.devnet.balance(&bob.uid));
    let (tips, mut received) = tip_sink();
    let b = host(&bob, Streams::new().tips(tips)).await;
    let a = host(&alice, Streams::new()).await;

    let outcome = a.tip(peer(&bob), 10_000).await.unwrap();
    assert_eq!(outcome, TipOutcome::Paid { attempts: 1 });
    let tip = next(&mut received).await;
    assert_eq!((tip.uid, tip.amount_matoms), (peer(&alice), 10_000_000));
    assert_eq!(net.devnet.balance(&alice.uid), before.0 - 10_000_000);
    assert_eq!(net.devnet.balance(&bob.uid), before.1 + 10_000_000);
    eventually("both sides acked", || {
        acked(&net, &alice, StreamKind::TipProgress) == [true]
            && acked(&net, &bob, StreamKind::TipReceived) == [true]
    })
    .await;

    net.devnet.set_can_invoice(bob.id, false).unwrap();
    let mut progress = a.subscribe_tip_progress();
    let outcome = a.tip(peer(&bob), 20_000).await.unwrap();
    assert_eq!(
        outcome,
        TipOutcome::Failed {
            attempts: 3,
            error: "unable to generate payment invoice".into()
        }
    );
    let mut retries = 0;
    while let Ok(event) = progress.try_recv() {
        if event.will_retry {
            retries += 1;
        }
    }
    assert_eq!(retries, 2, "two willRetry events before the terminal one");
    nothing(&mut received).await;
    a.close();
    b.close();
    net.devnet.shutdown().await;
}

/// 8. The socket drops mid-stream: the client reconnects with backoff and reopens PM,
/// TipProgress and TipStream from 0 (the client replays only what it has not
/// cleared); nothing is lost and nothing is delivered twice.
#[tokio::test]
async fn check_08_socket_drop_mid_stream() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let (pm_handler, mut pms) = pm_sink();
    let (tip_handler, mut tips) = tip_sink();
    let b = host(&bob, Streams::new().pms(pm_handler).tips(tip_handler)).await;
    let a = host(&alice, Streams::new()).await;

    for i in 0..4 {
        a.pm("bob", format!("m{i}")).await.unwrap();
    }
    net.devnet.inject_tip(bob.id, [0x33; 32], 1_000).unwrap();
    assert_eq!(
        b.tip(peer(&alice), 1).await.unwrap(),
        TipOutcome::Paid { attempts: 1 }
    );
    let mut got: Vec<String> = Vec::new();
    for _ in 0..4 {
        got.push(next(&mut pms).await.msg.message);
    }
    next(&mut tips).await;
    eventually("all acked before the drop", || {
        acked(&net, &bob, StreamKind::Pm).iter().all(|a| *a)
            && acked(&net, &bob, StreamKind::TipReceived) == [true]
            && acked(&net, &bob, StreamKind::TipProgress) == [true]
    })
    .await;
    let last = |kind| {
        net.devnet
            .log(bob.id, kind)
            .unwrap()
            .last()
            .unwrap()
            .sequence_id
    };
    let (last_pm, last_tip, last_progress) = (
        last(StreamKind::Pm),
        last(StreamKind::TipReceived),
        last(StreamKind::TipProgress),
    );

    net.devnet.drop_connections(bob.id).unwrap();
    for i in 4..8 {
        a.pm("bob", format!("m{i}")).await.unwrap();
    }
    net.devnet.inject_tip(bob.id, [0x33; 32], 2_000).unwrap();
    for _ in 4..8 {
        got.push(next(&mut pms).await.msg.message);
    }
    assert_eq!(got, (0..8).map(|i| format!("m{i}")).collect::<Vec<_>>());
    assert_eq!(next(&mut tips).await.amount_matoms, 2_000);
    nothing(&mut pms).await;
    nothing(&mut tips).await;
    assert!(b.status().connects >= 2);

    // The reopened streams started from 0, the acknowledged items no longer replayed.
    let reopened = |method: &str| {
        net.devnet
            .requests(bob.id)
            .unwrap()
            .into_iter()
            .filter(|r| r.method.as_deref().is_some_and(|m| m.starts_with(method)))
            .map(|r| r.raw)
            .collect::<Vec<_>>()
    };
    for (method, last) in [
        ("ChatService.PMStream[", last_pm),
        ("PaymentsService.TipStream[", last_tip),
        ("PaymentsService.TipProgress[", last_progress),
    ] {
        let opens = reopened(method);
        assert!(opens.len() >= 2, "{method} reopened: {opens:?}");
        assert!(
            !opens.last().unwrap().contains("unackedFrom"),
            "{method} reopened from 0 (everything up to {last} was cleared): {opens:?}"
        );
    }
    a.close();
    b.close();
    net.devnet.shutdown().await;
}

/// 9. Liveness: the client answers the devnet's pings and takes its 16-byte padded
/// pongs without dropping the connection.
#[tokio::test]
async fn check_09_liveness_pings_and_padded_pongs() {
    let mut cfg = DevnetConfig::default();
    cfg.ping_interval = Duration::from_millis(50);
    cfg.pong_timeout = Duration::from_secs(1);
    let net = start(&["alice"], cfg).await;
    let alice = net.node("alice");
    let mut client = config(&alice).with_ping(Duration::from_millis(50), Duration::from_secs(1));
    client.request_timeout = Some(WAIT);
    let h = ClientRpcHost::new(client).unwrap();
    h.connect(Streams::new()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    let status = h.status();
    assert!(status.connected && status.connects == 1, "{status:?}");
    assert_eq!(net.devnet.connection_count(alice.id).unwrap(), 1);
    h.version().await.unwrap();
    h.close();
    net.devnet.shutdown().await;
}

/// 10. Stream suffixes are decimal and the client never has more than 16 requests in
/// flight, even with many concurrent calls (the devnet itself takes more than ten
/// streams on one connection: `devnet_framing.rs`).
#[tokio::test]
async fn check_10_decimal_suffixes_and_sixteen_in_flight() {
    let mut cfg = DevnetConfig::default();
    cfg.ping_interval = Duration::from_millis(200);
    cfg.pong_timeout = Duration::from_millis(600);
    let net = start(&["alice"], cfg).await;
    let alice = net.node("alice");
    net.devnet
        .delay_method(
            alice.id,
            "VersionService.Version",
            Some(Duration::from_millis(60)),
        )
        .unwrap();
    let (pm_handler, _pms) = pm_sink();
    let (tip_handler, _tips) = tip_sink();
    let h = host(&alice, Streams::new().pms(pm_handler).tips(tip_handler)).await;
    let calls: Vec<_> = (0..40).map(|_| h.version()).collect();
    for r in futures_util::future::join_all(calls).await {
        r.unwrap();
    }
    let peak = net.devnet.peak_in_flight(alice.id).unwrap();
    assert!((4..=16).contains(&peak), "peak in flight {peak}");
    assert_eq!(h.status().connects, 1, "never dropped for a blocked reader");
    let streams: Vec<String> = net
        .devnet
        .requests(alice.id)
        .unwrap()
        .into_iter()
        .filter_map(|r| r.method)
        .filter(|m| m.contains('['))
        .collect();
    assert_eq!(streams.len(), 3);
    for m in &streams {
        let suffix = m.split('[').nth(1).unwrap().trim_end_matches(']');
        assert!(suffix.bytes().all(|b| b.is_ascii_digit()), "{m}");
    }
    h.close();
    net.devnet.shutdown().await;
}

/// 11. Basic auth: right credentials connect; wrong ones are an auth error (403), and
/// a background host backs off instead of looping.
#[tokio::test]
async fn check_11_basic_auth() {
    let net = start_specs(
        vec![NodeSpec::new("alice").basic_auth("bot", "s3cret")],
        DevnetConfig::default(),
    )
    .await;
    let alice = net.node("alice");
    let good = host(&alice, Streams::new()).await;
    good.version().await.unwrap();

    let wrong = config(&alice).with_basic_auth("bot", "guess");
    let err = ClientRpcHost::new(wrong.clone())
        .unwrap()
        .connect(Streams::new())
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClientRpcError::Auth { status: 403 }),
        "{err:?}"
    );

    let before = net.devnet.accepted_connections(alice.id).unwrap();
    let background =
        ClientRpcHost::new(wrong.with_backoff(Duration::from_millis(100), Duration::from_secs(5)))
            .unwrap();
    background.spawn(Streams::new()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let attempts = net.devnet.accepted_connections(alice.id).unwrap() - before;
    assert!((1..=6).contains(&attempts), "{attempts} attempts in 1 s");
    let status = background.status();
    assert!(!status.connected);
    assert!(status.last_error.unwrap_or_default().contains("403"));
    good.close();
    background.close();
    net.devnet.shutdown().await;
}

/// 12. Ids above 2^32, and above 2^53, round-trip exactly as strings.
#[tokio::test]
async fn check_12_large_ids_round_trip() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet
        .set_log_file_index(bob.id, StreamKind::Pm, (1 << 21) + 3)
        .unwrap();
    net.devnet
        .set_log_file_index(bob.id, StreamKind::TipReceived, u32::MAX)
        .unwrap();
    let (pm_handler, mut pms) = pm_sink();
    let (tip_handler, mut tips) = tip_sink();
    let b = host(&bob, Streams::new().pms(pm_handler).tips(tip_handler)).await;
    let a = host(&alice, Streams::new()).await;
    a.pm("bob", "big").await.unwrap();
    a.pm("bob", "bigger").await.unwrap();
    net.devnet.inject_tip(bob.id, [0x44; 32], 5).unwrap();

    let log = net.devnet.log(bob.id, StreamKind::Pm).unwrap();
    for entry in &log {
        let pm = next(&mut pms).await;
        assert_eq!(pm.sequence_id, entry.sequence_id);
        assert!(pm.sequence_id > 1 << 53);
    }
    let tip = next(&mut tips).await;
    assert_eq!(tip.sequence_id >> 32, u64::from(u32::MAX));
    eventually("acked with the exact ids", || {
        acked(&net, &bob, StreamKind::Pm) == [true, true]
            && acked(&net, &bob, StreamKind::TipReceived) == [true]
    })
    .await;
    a.close();
    b.close();
    net.devnet.shutdown().await;
}
