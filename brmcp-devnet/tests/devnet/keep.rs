//! What a devnet keeps in its directory when it stops (it writes nothing at a stop,
//! so dropping it here stands for a SIGKILL; the process tests of `brmcp devnet` kill
//! it for real): relay queues for offline nodes, replay logs with their acks,
//! wallets, recent tips; and a directory of an older devnet that kept none adopted.

use brmcp_devnet::{Devnet, DevnetConfig, NodeSpec, StreamKind, TipDirection, read_wallets};
use serde_json::json;

use crate::common::{WAIT, connect, u64_str};

const PMS: &str = "ChatService.PMStream[1]";

#[tokio::test]
async fn a_restart_keeps_queues_logs_acks_and_wallets() {
    restart_keeps(DevnetConfig::default()).await;
}

/// The same, with the kept state compacted into a new snapshot after every change.
#[tokio::test]
async fn a_restart_keeps_it_all_when_compacted_while_running() {
    let mut cfg = DevnetConfig::default();
    cfg.journal_compact_bytes = 1;
    restart_keeps(cfg).await;
}

async fn restart_keeps(cfg: DevnetConfig) {
    let dir = tempfile::tempdir().unwrap();
    let specs = vec![NodeSpec::new("alice"), NodeSpec::new("bob").offline()];
    let devnet = Devnet::start_with(dir.path(), specs, cfg.clone())
        .await
        .unwrap();
    let (alice, bob) = (
        devnet.node_by_nick("alice").unwrap(),
        devnet.node_by_nick("bob").unwrap(),
    );
    // Bob is offline: the relay queues his mail.
    devnet
        .inject_pm(bob.id, [0x11; 32], "carol", "q1", 0)
        .unwrap();
    devnet
        .inject_pm(bob.id, [0x11; 32], "carol", "q2", 0)
        .unwrap();
    assert_eq!(devnet.relay_queue_len(bob.id).unwrap(), 2);
    // Alice acknowledges the first of two PMs.
    devnet
        .inject_pm(alice.id, [0x22; 32], "dave", "a1", 0)
        .unwrap();
    devnet
        .inject_pm(alice.id, [0x22; 32], "dave", "a2", 0)
        .unwrap();
    let mut a = connect(&alice).await;
    a.request(PMS, json!({"unackedFrom": "0"}));
    let items = a.items(PMS, 2).await;
    let first = u64_str(&items[0]["sequenceId"]);
    a.ok(
        "ChatService.AckReceivedPM",
        json!({"sequenceId": first.to_string()}),
    )
    .await;
    devnet.set_balance(alice.uid, 5_000);
    devnet.inject_tip(alice.id, [0x22; 32], 7_000).unwrap();
    // A tip to offline bob waits for his invoice.
    a.ok(
        "PaymentsService.TipUser",
        json!({"user": "bob", "dcrAmount": 0.00000002, "maxAttempts": 100}),
    )
    .await;
    drop(a);
    drop(devnet);

    let specs = vec![NodeSpec::new("alice"), NodeSpec::new("bob")];
    let devnet = Devnet::start_with(dir.path(), specs, cfg).await.unwrap();
    let (alice2, bob2) = (
        devnet.node_by_nick("alice").unwrap(),
        devnet.node_by_nick("bob").unwrap(),
    );
    assert_eq!((alice2.uid, bob2.uid), (alice.uid, bob.uid));
    // Bob came online: his queued mail is in his log, once, in order.
    assert_eq!(devnet.relay_queue_len(bob2.id).unwrap(), 0);
    let bob_log = devnet.log(bob2.id, StreamKind::Pm).unwrap();
    let texts: Vec<&str> = bob_log
        .iter()
        .map(|e| e.params["msg"]["message"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["q1", "q2"]);
    // Alice's acknowledged PM is not replayed, the other is, with its id.
    let mut a = connect(&alice2).await;
    a.request(PMS, json!({"unackedFrom": "0"}));
    let again = a.item(PMS, WAIT).await.unwrap();
    assert_eq!(again["msg"]["message"], "a2");
    assert_eq!(again["sequenceId"], items[1]["sequenceId"]);
    // The tip was paid once bob came back: 2 atoms.
    let deadline = tokio::time::Instant::now() + WAIT;
    while devnet
        .log(bob2.id, StreamKind::TipReceived)
        .unwrap()
        .is_empty()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the kept tip is paid"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(devnet.balance(&alice.uid), 12_000 - 2_000);
    assert_eq!(devnet.balance(&bob.uid), 10 * 100_000_000_000 + 2_000);
    let outcome = devnet.log(alice2.id, StreamKind::TipProgress).unwrap();
    assert_eq!(outcome.len(), 1);
    assert_eq!(outcome[0].params["completed"], true);
    // The next id follows the kept ones.
    devnet
        .inject_pm(alice2.id, [0x22; 32], "dave", "a3", 0)
        .unwrap();
    let next = a.item(PMS, WAIT).await.unwrap();
    assert!(u64_str(&next["sequenceId"]) > u64_str(&items[1]["sequenceId"]));
    drop(a);

    // The wallets, read from the directory while the devnet runs.
    let wallets = read_wallets(dir.path()).unwrap().unwrap();
    let nicks: Vec<&str> = wallets.iter().map(|w| w.nick.as_str()).collect();
    assert_eq!(nicks, ["alice", "bob"]);
    assert_eq!(wallets[0].balance_matoms, 10_000);
    let tips = &wallets[0].recent_tips;
    assert_eq!(tips.len(), 2, "{tips:?}");
    assert_eq!(tips[0].direction, TipDirection::Sent);
    assert_eq!(
        (tips[0].matoms, tips[0].peer_nick.as_deref()),
        (2_000, Some("bob"))
    );
    assert_eq!(tips[1].direction, TipDirection::Received);
    assert_eq!(
        (tips[1].matoms, tips[1].peer_nick.as_deref()),
        (7_000, None)
    );
    assert_eq!(wallets[1].balance_matoms, 10 * 100_000_000_000 + 2_000);
    devnet.shutdown().await;
}

#[tokio::test]
async fn a_directory_of_an_older_devnet_is_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let devnet = Devnet::start(dir.path(), &["alice"]).await.unwrap();
    let alice = devnet.node_by_nick("alice").unwrap();
    devnet
        .inject_pm(alice.id, [0x22; 32], "dave", "old", 0)
        .unwrap();
    let old_id = devnet.log(alice.id, StreamKind::Pm).unwrap()[0].sequence_id;
    devnet.shutdown().await;
    // What an older devnet left: identities and certificates, no kept state.
    std::fs::remove_file(dir.path().join("devnet-state.json")).unwrap();
    std::fs::remove_file(dir.path().join("devnet-journal.jsonl")).unwrap();
    assert_eq!(read_wallets(dir.path()).unwrap(), None);

    let devnet = Devnet::start(dir.path(), &["alice"]).await.unwrap();
    let again = devnet.node_by_nick("alice").unwrap();
    assert_eq!(again.uid, alice.uid);
    assert_eq!(devnet.balance(&alice.uid), 10 * 100_000_000_000);
    devnet
        .inject_pm(again.id, [0x22; 32], "dave", "new", 0)
        .unwrap();
    let log = devnet.log(again.id, StreamKind::Pm).unwrap();
    assert_eq!(log.len(), 1);
    assert!(log[0].sequence_id > old_id, "ids above the older run's");
    assert!(read_wallets(dir.path()).unwrap().is_some());
    devnet.shutdown().await;
}
