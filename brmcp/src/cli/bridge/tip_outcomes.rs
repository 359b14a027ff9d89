//! The bridge's tip payer and late outcomes on a simulated network, wired as the
//! command wires them: a tip confirmed or failed after the bridge stopped waiting, or
//! while it was stopped, settles the spend log.

use std::net::Ipv4Addr;
use std::net::SocketAddr;
use std::time::Duration;

use brmcp_adapters::PeerId;
use brmcp_clientrpc::ClientRpcHost;
use brmcp_devnet::{Devnet, NodeInfo};
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};

use crate::bridge::{Bridge, SpendEntry, SpendStatus};
use crate::cli::bridge::start_bridge;
use crate::server::{Clock, Harness};

/// A devnet with the example bot on alice and the CLI's bridge on bob, tipping
/// through bob's clientrpc, and an agent connected to the bridge. The bridge waits
/// 1 s for a tip; the devnet retries a failed tip attempt after 2 s.
struct Net {
    dir: tempfile::TempDir,
    devnet: Devnet,
    alice: NodeInfo,
    bob: NodeInfo,
    harness: Harness,
    bridge: Bridge,
    host_b: ClientRpcHost,
    agent: RunningService<RoleClient, ()>,
}

async fn net() -> Net {
    let dir = tempfile::tempdir().unwrap();
    let devnet = Devnet::start(dir.path().join("devnet"), &["alice", "bob"])
        .await
        .unwrap();
    let [alice, bob] = <[NodeInfo; 2]>::try_from(devnet.nodes()).unwrap();
    let config = crate::cli::testing::allowing(&alice, &bob);
    let host_a = crate::cli::serve::host_from(&alice.config_path).unwrap();
    let (harness, _upstreams) = crate::cli::serve::start_serving(&alice.dir, &config, &host_a)
        .await
        .unwrap();
    let (bridge, host_b, agent) =
        crate::cli::testing::autopay_bridge(&dir.path().join("bridge"), &bob, &alice, Some(1))
            .await;
    Net {
        dir,
        devnet,
        alice,
        bob,
        harness,
        bridge,
        host_b,
        agent,
    }
}

async fn fortune(net: &Net) -> String {
    let r = net
        .agent
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .unwrap();
    brmcp_adapters::protocol::result_texts(&r)
        .last()
        .unwrap_or_default()
        .to_owned()
}

/// The spend log once its only entry is no longer pending.
async fn settled(bridge: &Bridge) -> (SpendEntry, u64) {
    for _ in 0..200 {
        let (entries, today) = bridge.spend_log().unwrap();
        if let [entry] = entries.as_slice()
            && entry.status != SpendStatus::Pending
        {
            return (entry.clone(), today);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the payment stayed pending: {:?}", bridge.spend_log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tip_paid_after_the_wait_is_recorded_paid() {
    let net = net().await;
    // The first attempt fails; the retry 2 s later succeeds.
    net.devnet.set_can_invoice(net.alice.id, false).unwrap();
    assert_eq!(
        fortune(&net).await,
        "brmcp-bridge: payment not made: tip not confirmed within 1s"
    );
    let (entries, today) = net.bridge.spend_log().unwrap();
    assert_eq!(entries[0].status, SpendStatus::Pending);
    assert_eq!(today, 10_000, "a pending tip counts");
    net.devnet.set_can_invoice(net.alice.id, true).unwrap();

    let (entry, today) = settled(&net.bridge).await;
    assert_eq!(entry.status, SpendStatus::Paid);
    assert_eq!(today, 10_000);
    // The bot was credited, and the credit is reserved for the call it paid for (its
    // retry under its key spends it): another call does not, and pays its own way.
    let bob = PeerId::from_bytes(net.bob.uid);
    let reserved = || {
        let now = crate::server::SystemClock.now();
        net.harness.billing().reserved_matoms(&bob, now).unwrap()
    };
    for _ in 0..200 {
        if reserved() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(reserved(), 10_000_000, "the late tip is the refused call's");
    let text = fortune(&net).await;
    assert!(!text.starts_with("brmcp-bridge"), "{text}");
    assert_eq!(net.bridge.spend_log().unwrap().0.len(), 2);
    assert_eq!(reserved(), 10_000_000, "still the refused call's");
    net.devnet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tip_failing_after_the_wait_frees_the_budget() {
    let net = net().await;
    net.devnet.set_can_invoice(net.alice.id, false).unwrap();
    assert_eq!(
        fortune(&net).await,
        "brmcp-bridge: payment not made: tip not confirmed within 1s"
    );
    // Three attempts, 2 s apart, all refused: the terminal event fails it.
    let (entry, today) = settled(&net.bridge).await;
    assert_eq!(entry.status, SpendStatus::Failed);
    assert_eq!(
        entry.err.as_deref(),
        Some("unable to generate payment invoice")
    );
    assert_eq!(today, 0, "a failed tip no longer counts");
    net.devnet.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tip_paid_while_the_bridge_was_stopped_is_recorded_at_its_next_start() {
    let net = net().await;
    net.devnet.set_can_invoice(net.alice.id, false).unwrap();
    let alice_before = net.devnet.balance(&net.alice.uid);
    assert_eq!(
        fortune(&net).await,
        "brmcp-bridge: payment not made: tip not confirmed within 1s"
    );
    // The bridge stops before any retry of the tip can succeed.
    net.bridge.close().await;
    net.host_b.close();
    net.devnet.set_can_invoice(net.alice.id, true).unwrap();
    for _ in 0..200 {
        if net.devnet.balance(&net.alice.uid) > alice_before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        net.devnet.balance(&net.alice.uid) > alice_before,
        "the client's retry paid the tip"
    );
    let (entries, _) = net.bridge.spend_log().unwrap();
    assert_eq!(
        entries[0].status,
        SpendStatus::Pending,
        "nobody was listening"
    );

    // Started again on the same directory, the bridge gets the outcome the client
    // kept for it and settles the payment.
    let listen = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
    let (bridge, host) = start_bridge(
        &net.dir.path().join("bridge"),
        &net.bob.config_path,
        listen,
        false,
    )
    .await
    .unwrap();
    let (entry, today) = settled(&bridge).await;
    assert_eq!(entry.status, SpendStatus::Paid);
    assert_eq!(today, 10_000);
    host.close();
    net.devnet.shutdown().await;
}
