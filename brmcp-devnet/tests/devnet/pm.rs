//! PMs through the devnet: addressing by hex uid and by nick, the ReceivedPM shape,
//! replay logs with cumulative acks and redelivery on every stream open,
//! store-and-forward for offline nodes with order kept and expiry, logs outliving
//! dropped connections and restarts, and 64-bit ids as strings.

use std::time::Duration;

use crate::common::{QUIET, WAIT, b64, connect, start, u64_str};
use brmcp_devnet::{DevnetConfig, StreamKind};
use serde_json::{Value, json};

const PMS: &str = "ChatService.PMStream[1]";

fn pm(user: &str, text: &str) -> Value {
    json!({"user": user, "msg": {"message": text}})
}

#[tokio::test]
async fn pm_by_hex_uid_and_by_nick_arrives_as_received_pm() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    b.request(PMS, json!({"unackedFrom": "0"}));
    a.request(PMS, json!({}));

    assert_eq!(
        a.ok("ChatService.PM", pm(&bob.uid_hex(), "by uid <b>"))
            .await,
        json!({})
    );
    assert_eq!(
        a.ok("ChatService.PM", pm("BOB", "by nick")).await,
        json!({})
    );

    let items = b.items(PMS, 2).await;
    assert_eq!(items[0]["msg"]["message"], "by uid <b>");
    assert_eq!(items[1]["msg"]["message"], "by nick");
    let mut last = 0;
    for item in &items {
        assert_eq!(b64(&item["uid"]), alice.uid);
        assert_eq!(item["nick"], "alice");
        assert!(item["msg"].get("mode").is_none(), "normal mode is omitted");
        let seq = u64_str(&item["sequenceId"]);
        assert!(seq > 1 << 32 && seq > last, "{seq}");
        last = seq;
        let ts = u64_str(&item["timestampMs"]);
        assert!(ts > 1_700_000_000_000);
    }
    let first = u64_str(&items[0]["sequenceId"]);
    assert!(last - first > 1, "ids grow by the entry length");
    assert_eq!(a.item(PMS, QUIET).await, None, "no echo to the sender");

    // A hex prefix longer than four characters also resolves.
    a.ok("ChatService.PM", pm(&bob.uid_hex()[..10], "prefix"))
        .await;
    assert_eq!(b.item(PMS, WAIT).await.unwrap()["msg"]["message"], "prefix");

    // Bob's view of alice.
    let nick = b
        .ok("ChatService.UserNick", json!({"hexUid": alice.uid_hex()}))
        .await;
    assert_eq!(nick["nick"], "alice");
    let (code, text) = b
        .err(
            "ChatService.UserNick",
            json!({"hexUid": hex::encode([7u8; 32])}),
        )
        .await;
    assert_eq!(
        (code, text),
        (-32603, format!("user {} not found", hex::encode([7u8; 32])))
    );
    // As brclient: `uid` (base64 on the wire) wins when it is 32 bytes, whatever
    // `hexUid` says; `hexUid` is read only otherwise, and only at full length.
    let b64e = |bytes: &[u8]| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(bytes)
    };
    let alice_uid = hex::decode(alice.uid_hex()).unwrap();
    let nick = b
        .ok(
            "ChatService.UserNick",
            json!({"uid": b64e(&alice_uid), "hexUid": hex::encode([7u8; 32])}),
        )
        .await;
    assert_eq!(nick["nick"], "alice");
    let nick = b
        .ok(
            "ChatService.UserNick",
            json!({"uid": b64e(&alice_uid[..31]), "hexUid": alice.uid_hex()}),
        )
        .await;
    assert_eq!(nick["nick"], "alice");
    for params in [
        json!({}),
        json!({"uid": b64e(&alice_uid[..31])}),
        json!({"hexUid": &alice.uid_hex()[..10]}),
    ] {
        let (code, text) = b.err("ChatService.UserNick", params).await;
        assert_eq!((code, text.as_str()), (-32603, "invalid uid and hex_uid"));
    }
    let (code, text) = b
        .err(
            "ChatService.UserNick",
            json!({"hexUid": format!("x{}", &alice.uid_hex()[1..])}),
        )
        .await;
    assert_eq!(
        (code, text.as_str()),
        (-32603, "encoding/hex: invalid byte: U+0078 'x'")
    );
    // The node itself is not in its own address book.
    let (code, text) = b
        .err("ChatService.UserNick", json!({"hexUid": bob.uid_hex()}))
        .await;
    assert_eq!(
        (code, text),
        (-32603, format!("user {} not found", bob.uid_hex()))
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn unacked_items_replay_on_every_stream_open_until_acked() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let mut a = connect(&alice).await;
    for i in 0..3 {
        a.ok("ChatService.PM", pm("bob", &format!("m{i}"))).await;
    }
    // Stored before any stream is open; two streams on one connection both get all.
    let mut b = connect(&bob).await;
    b.request("ChatService.PMStream[1]", json!({}));
    b.request("ChatService.PMStream[2]", json!({"unacked_from": 0}));
    let one = b.items("ChatService.PMStream[1]", 3).await;
    let two = b.items("ChatService.PMStream[2]", 3).await;
    assert_eq!(one, two);
    let ids: Vec<u64> = one.iter().map(|i| u64_str(&i["sequenceId"])).collect();

    // Ack the first; a new connection replays the other two.
    b.ok(
        "ChatService.AckReceivedPM",
        json!({"sequenceId": ids[0].to_string()}),
    )
    .await;
    drop(b);
    let mut b = connect(&bob).await;
    b.request(PMS, json!({"unackedFrom": "0"}));
    let again: Vec<u64> = b
        .items(PMS, 2)
        .await
        .iter()
        .map(|i| u64_str(&i["sequenceId"]))
        .collect();
    assert_eq!(again, &ids[1..]);

    // unackedFrom skips what the client already processed.
    b.request(
        "ChatService.PMStream[2]",
        json!({"unackedFrom": ids[1].to_string()}),
    );
    let rest = b.items("ChatService.PMStream[2]", 1).await;
    assert_eq!(u64_str(&rest[0]["sequenceId"]), ids[2]);
    assert_eq!(b.item("ChatService.PMStream[2]", QUIET).await, None);

    // A cumulative ack of the last clears everything; acking an old id is a no-op.
    b.ok("ChatService.AckReceivedPM", json!({"sequence_id": ids[2]}))
        .await;
    b.ok("ChatService.AckReceivedPM", json!({"sequenceId": "0"}))
        .await;
    let log = net.devnet.log(bob.id, StreamKind::Pm).unwrap();
    assert_eq!(
        log.iter().map(|e| e.acked).collect::<Vec<_>>(),
        [true, true, true]
    );
    drop(b);
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    assert_eq!(b.item(PMS, QUIET).await, None, "nothing left to redeliver");

    // A live item after the replay, on the same stream.
    a.ok("ChatService.PM", pm("bob", "live")).await;
    assert_eq!(b.item(PMS, WAIT).await.unwrap()["msg"]["message"], "live");
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn offline_recipient_receives_in_order_on_coming_online() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    net.devnet.set_online(bob.id, false).unwrap();

    let mut a = connect(&alice).await;
    for i in 0..5 {
        // Accepted by the relay: the call returns although bob is away.
        a.ok("ChatService.PM", pm("bob", &format!("n{i}"))).await;
    }
    assert_eq!(b.item(PMS, QUIET).await, None);
    assert_eq!(net.devnet.relay_queue_len(bob.id).unwrap(), 5);

    net.devnet.set_online(bob.id, true).unwrap();
    let items = b.items(PMS, 5).await;
    let texts: Vec<&str> = items
        .iter()
        .map(|i| i["msg"]["message"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["n0", "n1", "n2", "n3", "n4"]);
    let ts: Vec<u64> = items.iter().map(|i| u64_str(&i["timestampMs"])).collect();
    assert!(
        ts.windows(2).all(|w| w[0] <= w[1]),
        "relay accept times: {ts:?}"
    );
    assert_eq!(net.devnet.relay_queue_len(bob.id).unwrap(), 0);
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn offline_sender_blocks_until_back_online() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet.set_online(alice.id, false).unwrap();
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    let id = a.request("ChatService.PM", pm("bob", "eventually"));
    assert_eq!(
        a.response_to(&json!(id), QUIET).await,
        None,
        "PM waits for the relay"
    );
    net.devnet.set_online(alice.id, true).unwrap();
    assert_eq!(
        a.response_to(&json!(id), WAIT).await.unwrap()["result"],
        json!({})
    );
    assert_eq!(
        b.item(PMS, WAIT).await.unwrap()["msg"]["message"],
        "eventually"
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn queued_pms_expire_on_the_devnet_clock() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet.set_online(bob.id, false).unwrap();
    let mut a = connect(&alice).await;
    a.ok("ChatService.PM", pm("bob", "stale")).await;
    net.devnet.advance_clock(Duration::from_secs(8 * 24 * 3600));
    a.ok("ChatService.PM", pm("bob", "fresh")).await;
    net.devnet.set_online(bob.id, true).unwrap();
    assert_eq!(net.devnet.relay_expired(), 1);
    let log = net.devnet.log(bob.id, StreamKind::Pm).unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].params["msg"]["message"], "fresh");
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn logs_survive_dropped_connections_and_restarts() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    a.ok("ChatService.PM", pm("bob", "one")).await;
    let first = b.item(PMS, WAIT).await.unwrap();

    net.devnet.drop_connections(bob.id).unwrap();
    assert!(b.closed(WAIT).await);
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    assert_eq!(
        b.item(PMS, WAIT).await.unwrap(),
        first,
        "redelivered: never acked"
    );

    net.devnet.restart_node(bob.id).await.unwrap();
    assert!(b.closed(WAIT).await);
    a.ok("ChatService.PM", pm("bob", "two")).await;
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    let items = b.items(PMS, 2).await;
    assert_eq!(items[0], first);
    assert_eq!(items[1]["msg"]["message"], "two");
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn ids_near_2_pow_53_round_trip_as_strings() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet
        .set_log_file_index(bob.id, StreamKind::Pm, 1 << 21)
        .unwrap();
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    a.ok("ChatService.PM", pm("bob", "big")).await;
    let item = b.item(PMS, WAIT).await.unwrap();
    let seq = u64_str(&item["sequenceId"]);
    assert!(seq > 1 << 53, "{seq}");
    assert_eq!(seq >> 32, 1 << 21);
    // Acked with the exact string; a float would have lost the low bits.
    b.ok(
        "ChatService.AckReceivedPM",
        json!({"sequenceId": seq.to_string()}),
    )
    .await;
    assert!(net.devnet.log(bob.id, StreamKind::Pm).unwrap()[0].acked);
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn kx_and_synthetic_peers() {
    let net = start(&["alice"], DevnetConfig::default()).await;
    let alice = net.node("alice");
    let carol = net
        .devnet
        .add_node(brmcp_devnet::NodeSpec::new("carol"))
        .await
        .unwrap();
    let mut a = connect(&alice).await;
    a.request("ChatService.KXStream[1]", json!({}));
    let (code, text) = a.err("ChatService.PM", pm("carol", "hi")).await;
    assert_eq!((code, text.as_str()), (-32603, "user carol not found"));

    net.devnet.kx(alice.id, carol.id).unwrap();
    let kx = a.item("ChatService.KXStream[1]", WAIT).await.unwrap();
    assert_eq!(kx["nick"], "carol");
    assert_eq!(b64(&kx["uid"]), carol.uid);
    assert!(u64_str(&kx["sequenceId"]) > 1 << 32);
    a.ok("ChatService.PM", pm("carol", "hi")).await;
    assert_eq!(net.devnet.log(carol.id, StreamKind::Pm).unwrap().len(), 1);

    // A PM from a peer that is no node, in /me mode.
    a.request(PMS, json!({}));
    net.devnet
        .inject_pm(alice.id, [0x11; 32], "dave", "waves", 1)
        .unwrap();
    let item = a.item(PMS, WAIT).await.unwrap();
    assert_eq!(item["uid"], "ERERERERERERERERERERERERERERERERERERERERERE=");
    assert_eq!(item["nick"], "dave");
    assert_eq!(
        item["msg"],
        json!({"message": "waves", "mode": "MESSAGE_MODE_ME"})
    );
    net.devnet.shutdown().await;
}
