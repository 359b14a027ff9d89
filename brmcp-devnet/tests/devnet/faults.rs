//! The fault dial: latency and drops delay PMs but lose none and keep their order; a
//! PM the relay has not yet delivered is re-sent after a restart; a node taken
//! offline in the live file gets its PMs and tips when it is back; a slow key
//! exchange; a bad edit of the file keeps the last good dial.

use std::path::Path;
use std::time::{Duration, Instant};

use brmcp_devnet::{Devnet, DevnetConfig, FAULTS_FILE, Faults, write_faults};
use serde_json::{Value, json};

use crate::common::{QUIET, WAIT, alice_and_bob_in, b64, connect, start};

const PMS: &str = "ChatService.PMStream[1]";
const KXS: &str = "ChatService.KXStream[1]";
const RECEIVED: &str = "PaymentsService.TipStream[3]";

fn pm(user: &str, text: &str) -> Value {
    json!({"user": user, "msg": {"message": text}})
}

fn dial(text: &str) -> Faults {
    Faults::parse(Path::new(FAULTS_FILE), text).unwrap()
}

/// Waits until the devnet has put a dial satisfying `pred` in force.
async fn until_in_force(devnet: &Devnet, pred: impl Fn(&Faults) -> bool) {
    let deadline = Instant::now() + WAIT;
    while !pred(&devnet.faults()) {
        assert!(
            Instant::now() < deadline,
            "dial not applied: {:?}",
            devnet.faults()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn latency_and_drops_delay_pms_but_lose_none_and_keep_order() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));

    // Latency alone: each PM takes at least the dial's time.
    net.devnet
        .set_faults(dial(r#"{"latency_ms": 300, "jitter_ms": 50, "seed": 1}"#));
    let sent = Instant::now();
    a.ok("ChatService.PM", pm("bob", "slow")).await;
    assert_eq!(b.item(PMS, QUIET / 2).await, None, "not before the latency");
    assert_eq!(b.item(PMS, WAIT).await.unwrap()["msg"]["message"], "slow");
    assert!(sent.elapsed() >= Duration::from_millis(300));

    // Nine in ten deliveries dropped: every PM still arrives, once, in order, and
    // the re-sends cost time.
    net.devnet.set_faults(dial(
        r#"{"pm_drop_rate": 0.9, "latency_ms": 10, "seed": 5}"#,
    ));
    let sent = Instant::now();
    for i in 0..10 {
        a.ok("ChatService.PM", pm("bob", &format!("m{i}"))).await;
    }
    for i in 0..10 {
        let item = b
            .item(PMS, WAIT * 4)
            .await
            .unwrap_or_else(|| panic!("m{i} lost"));
        assert_eq!(item["msg"]["message"], format!("m{i}"));
    }
    assert!(
        sent.elapsed() >= Duration::from_millis(500),
        "drops re-sent later"
    );
    assert_eq!(b.item(PMS, QUIET).await, None, "each delivered once");
    assert_eq!(net.devnet.relay_queue_len(bob.id).unwrap(), 0);

    // Off again: instant.
    net.devnet.set_faults(Faults::default());
    a.ok("ChatService.PM", pm("bob", "fast")).await;
    assert_eq!(
        b.item(PMS, Duration::from_millis(200)).await.unwrap()["msg"]["message"],
        "fast"
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn a_pm_not_yet_delivered_is_resent_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (devnet, alice, bob) = alice_and_bob_in(dir.path()).await;
    devnet.set_faults(dial(r#"{"latency_ms": 60000}"#));
    let mut a = connect(&alice).await;
    a.ok("ChatService.PM", pm("bob", "in flight")).await;
    assert_eq!(devnet.relay_queue_len(bob.id).unwrap(), 1);
    // Dropping the devnet writes nothing: it stands for a SIGKILL.
    drop(a);
    drop(devnet);

    let (devnet, _, bob) = alice_and_bob_in(dir.path()).await;
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    assert_eq!(
        b.item(PMS, WAIT).await.unwrap()["msg"]["message"],
        "in flight"
    );
    assert_eq!(b.item(PMS, QUIET).await, None, "once");
    devnet.shutdown().await;
}

#[tokio::test]
async fn a_node_offline_in_the_file_gets_its_pms_and_tips_in_order_when_back() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet.watch_faults().unwrap();
    let before = net.devnet.balance(&bob.uid);
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    b.request(PMS, json!({}));
    b.request(RECEIVED, json!({}));

    write_faults(net.dir.path(), &dial(r#"{"offline": ["bob"]}"#)).unwrap();
    until_in_force(&net.devnet, |f| f.offline.contains("bob")).await;
    for i in 0..3 {
        a.ok("ChatService.PM", pm("bob", &format!("o{i}"))).await;
    }
    let tip = json!({"user": "bob", "dcrAmount": 0.0001, "maxAttempts": 3});
    a.ok("PaymentsService.TipUser", tip).await;
    assert_eq!(b.item(PMS, QUIET).await, None, "nothing while offline");
    assert_eq!(b.item(RECEIVED, QUIET).await, None);
    assert_eq!(net.devnet.balance(&bob.uid), before);
    assert_eq!(net.devnet.relay_queue_len(bob.id).unwrap(), 3);

    write_faults(net.dir.path(), &Faults::default()).unwrap();
    for i in 0..3 {
        let item = b.item(PMS, WAIT).await.unwrap();
        assert_eq!(item["msg"]["message"], format!("o{i}"));
    }
    let r = b.item(RECEIVED, WAIT).await.expect("the tip when back");
    assert_eq!(b64(&r["uid"]), alice.uid);
    assert_eq!(net.devnet.balance(&bob.uid), before + 10_000_000);
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn a_slow_key_exchange_completes_after_the_dial_time() {
    let mut cfg = DevnetConfig::default();
    cfg.kx_all = false;
    let net = start(&["alice", "bob", "carol"], cfg).await;
    let (alice, bob, carol) = (net.node("alice"), net.node("bob"), net.node("carol"));
    net.devnet.kx(alice.id, bob.id).unwrap();
    net.devnet.kx(bob.id, carol.id).unwrap();
    net.devnet.set_faults(dial(r#"{"kx_delay_ms": 1500}"#));
    let mut a = connect(&alice).await;
    a.request(KXS, json!({}));
    assert_eq!(b64(&a.item(KXS, WAIT).await.unwrap()["uid"]), bob.uid);

    let asked = Instant::now();
    let req = json!({"mediator": "bob", "target": carol.uid_hex()});
    assert_eq!(a.ok("ChatService.MediateKX", req).await, json!({}));
    assert_eq!(a.item(KXS, Duration::from_millis(1000)).await, None);
    let (_, text) = a.err("ChatService.PM", pm(&carol.uid_hex(), "hi")).await;
    assert_eq!(text, format!("user {} not found", carol.uid_hex()));
    let done = a
        .item(KXS, WAIT)
        .await
        .expect("KXCompleted after the delay");
    assert_eq!(b64(&done["uid"]), carol.uid);
    assert!(asked.elapsed() >= Duration::from_millis(1500));
    assert_eq!(a.ok("ChatService.PM", pm("carol", "hi")).await, json!({}));
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn a_bad_edit_keeps_the_last_good_dial_and_a_bad_file_refuses_to_watch() {
    let net = start(&["alice"], DevnetConfig::default()).await;
    let path = net.dir.path().join(FAULTS_FILE);
    std::fs::write(&path, r#"{"latency_ms": "slow"}"#).unwrap();
    let e = net.devnet.watch_faults().unwrap_err();
    assert_eq!(e.key.as_deref(), Some("latency_ms"));
    assert!(e.to_string().contains(FAULTS_FILE), "{e}");

    std::fs::write(&path, r#"{"latency_ms": 40}"#).unwrap();
    net.devnet.watch_faults().unwrap();
    assert_eq!(net.devnet.faults().latency_ms, 40);
    std::fs::write(&path, r#"{"latency_ms": 70, "typo": 1}"#).unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(net.devnet.faults().latency_ms, 40, "last good dial kept");
    std::fs::write(&path, r#"{"latency_ms": 70}"#).unwrap();
    until_in_force(&net.devnet, |f| f.latency_ms == 70).await;
    // Removing the file turns every fault off.
    std::fs::remove_file(&path).unwrap();
    until_in_force(&net.devnet, Faults::is_off).await;
    net.devnet.shutdown().await;
}
