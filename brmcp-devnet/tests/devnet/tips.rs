//! Tips through the devnet: balances move, the payer sees `TipProgress` with
//! `completed`, the payee a `ReceivedTip`, both in milliatoms; a payee that cannot
//! invoice gets retries then a terminal event; brclient's validation texts.

use std::time::Duration;

use crate::common::{QUIET, WAIT, b64, connect, start, u64_str};
use brmcp_devnet::{DevnetConfig, StreamKind};
use serde_json::{Value, json};

const PROGRESS: &str = "PaymentsService.TipProgress[2]";
const RECEIVED: &str = "PaymentsService.TipStream[3]";

fn fast() -> DevnetConfig {
    let mut cfg = DevnetConfig::default();
    cfg.tip_retry_spacing = Duration::from_millis(60);
    cfg
}

fn tip(user: &str, dcr: f64, attempts: i32) -> Value {
    json!({"user": user, "dcrAmount": dcr, "maxAttempts": attempts})
}

#[tokio::test]
async fn tip_moves_balances_and_reports_on_both_sides() {
    let net = start(&["alice", "bob"], fast()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let before = (net.devnet.balance(&alice.uid), net.devnet.balance(&bob.uid));
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    a.request(PROGRESS, json!({}));
    b.request(RECEIVED, json!({}));

    // 0.0001 DCR = 10,000 atoms = 10,000,000 matoms.
    assert_eq!(
        a.ok("PaymentsService.TipUser", tip("bob", 0.0001, 3)).await,
        json!({})
    );
    let p = a.item(PROGRESS, WAIT).await.unwrap();
    assert_eq!(p["amountMatoms"], "10000000");
    assert_eq!(p["completed"], true);
    assert_eq!(p["attempt"], 1);
    assert_eq!(p["nick"], "bob");
    assert_eq!(b64(&p["uid"]), bob.uid);
    assert!(p.get("willRetry").is_none() && p.get("attemptErr").is_none());
    let r = b.item(RECEIVED, WAIT).await.unwrap();
    assert_eq!(r["amountMatoms"], "10000000");
    assert_eq!(b64(&r["uid"]), alice.uid);
    assert!(r.get("nick").is_none(), "ReceivedTip has no nick");

    assert_eq!(net.devnet.balance(&alice.uid), before.0 - 10_000_000);
    assert_eq!(net.devnet.balance(&bob.uid), before.1 + 10_000_000);

    // Both ack; reconnecting redelivers nothing.
    a.ok(
        "PaymentsService.AckTipProgress",
        json!({"sequenceId": p["sequenceId"]}),
    )
    .await;
    b.ok(
        "PaymentsService.AckTipReceived",
        json!({"sequenceId": r["sequenceId"]}),
    )
    .await;
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    a.request(PROGRESS, json!({}));
    b.request(RECEIVED, json!({}));
    assert_eq!(a.item(PROGRESS, QUIET).await, None);
    assert_eq!(b.item(RECEIVED, QUIET).await, None);

    // Amounts round to whole atoms as dcrutil.NewAmount does: 0.00012345678 DCR ->
    // 12345.678 atoms -> 12346 atoms -> 12,346,000 matoms.
    a.request(PROGRESS, json!({}));
    a.ok(
        "PaymentsService.TipUser",
        tip(&bob.uid_hex(), 0.000_123_456_78, 1),
    )
    .await;
    assert_eq!(
        a.item(PROGRESS, WAIT).await.unwrap()["amountMatoms"],
        "12346000"
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn payee_unable_to_invoice_gets_retries_then_a_terminal_event() {
    let net = start(&["alice", "bob"], fast()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet.set_can_invoice(bob.id, false).unwrap();
    let before = net.devnet.balance(&alice.uid);
    let mut a = connect(&alice).await;
    a.request(PROGRESS, json!({}));
    a.ok("PaymentsService.TipUser", tip("bob", 0.001, 3)).await;

    let events = a.items(PROGRESS, 3).await;
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["attempt"], i + 1);
        assert_eq!(e["attemptErr"], "unable to generate payment invoice");
        assert_eq!(e["amountMatoms"], "100000000");
        assert!(e.get("completed").is_none());
    }
    assert_eq!(events[0]["willRetry"], true);
    assert_eq!(events[1]["willRetry"], true);
    assert!(
        events[2].get("willRetry").is_none(),
        "terminal: {}",
        events[2]
    );
    assert_eq!(a.item(PROGRESS, QUIET).await, None);
    assert_eq!(net.devnet.balance(&alice.uid), before);
    assert!(
        net.devnet
            .log(bob.id, StreamKind::TipReceived)
            .unwrap()
            .is_empty()
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn unanswered_invoice_requests_give_up_with_max_attempts_text() {
    let net = start(&["alice", "bob"], fast()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet.set_online(bob.id, false).unwrap();
    let mut a = connect(&alice).await;
    a.request(PROGRESS, json!({}));
    a.ok("PaymentsService.TipUser", tip("bob", 0.001, 2)).await;
    let e = a.item(PROGRESS, WAIT).await.unwrap();
    assert_eq!(
        e["attemptErr"],
        "attempt 2 >= max attempts 2 to fetch invoice"
    );
    assert_eq!(e["attempt"], 2);
    assert!(e.get("willRetry").is_none() && e.get("completed").is_none());
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn payee_coming_online_within_the_spacing_is_paid() {
    let mut cfg = fast();
    cfg.tip_retry_spacing = Duration::from_secs(3);
    let net = start(&["alice", "bob"], cfg).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    net.devnet.set_online(bob.id, false).unwrap();
    let mut a = connect(&alice).await;
    a.request(PROGRESS, json!({}));
    a.ok("PaymentsService.TipUser", tip("bob", 0.01, 1)).await;
    assert_eq!(a.item(PROGRESS, QUIET).await, None, "waiting for the payee");
    net.devnet.set_online(bob.id, true).unwrap();
    assert_eq!(a.item(PROGRESS, WAIT).await.unwrap()["completed"], true);
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn insufficient_balance_fails_each_attempt() {
    let net = start(&["alice", "bob"], fast()).await;
    let alice = net.node("alice");
    net.devnet.set_balance(alice.uid, 5);
    let mut a = connect(&alice).await;
    a.request(PROGRESS, json!({}));
    a.ok("PaymentsService.TipUser", tip("bob", 1.0, 2)).await;
    let events = a.items(PROGRESS, 2).await;
    assert_eq!(events[0]["attemptErr"], "insufficient local balance");
    assert_eq!(events[0]["willRetry"], true);
    assert!(events[1].get("willRetry").is_none());
    assert_eq!(net.devnet.balance(&alice.uid), 5);
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn tip_user_validation_texts_in_brclient_order() {
    let net = start(&["alice", "bob"], fast()).await;
    let alice = net.node("alice");
    let mut a = connect(&alice).await;
    let cases: &[(Value, &str)] = &[
        // The user is resolved before the amount is looked at.
        (tip("zed", 0.0, 0), "user zed not found"),
        (tip("bob", 0.0, 3), "cannot pay user 0.000000 <= 0"),
        (tip("bob", -1.5, 3), "cannot pay user -1.500000 <= 0"),
        (
            json!({"user": "bob", "dcrAmount": 0.1}),
            "maxAttempts 0 <= 0",
        ),
        (
            json!({"user": "bob", "dcrAmount": "NaN", "maxAttempts": 1}),
            "invalid coin amount",
        ),
    ];
    for (params, text) in cases {
        let (code, got) = a.err("PaymentsService.TipUser", params.clone()).await;
        assert_eq!((code, got.as_str()), (-32603, *text), "{params}");
    }
    net.devnet.set_tip_gating(alice.id, true, 0.5).unwrap();
    assert_eq!(
        a.err("PaymentsService.TipUser", tip("bob", 0.6, 1)).await,
        (-32603, "tip exceeds max limit: 0.5".to_owned())
    );
    net.devnet.set_tip_gating(alice.id, false, 0.0).unwrap();
    assert_eq!(
        a.err("PaymentsService.TipUser", tip("bob", 0.1, 1)).await,
        (-32603, "remote tip sending not allowed".to_owned())
    );
    let (code, text) = a
        .err(
            "PaymentsService.TipUser",
            json!({"user": "bob", "dcrAmount": 1, "maxAttempts": 1, "tag": 3}),
        )
        .await;
    assert_eq!(
        (code, text.as_str()),
        (
            -32602,
            "unable to decode params: proto: unknown field \"tag\""
        )
    );
    net.devnet.shutdown().await;
}

#[tokio::test]
async fn injected_tips_reach_the_tip_stream_and_the_balance() {
    let net = start(&["bob"], fast()).await;
    let bob = net.node("bob");
    let before = net.devnet.balance(&bob.uid);
    net.devnet.inject_tip(bob.id, [0x22; 32], 7_000).unwrap();
    let mut b = connect(&bob).await;
    b.request(RECEIVED, json!({}));
    let r = b.item(RECEIVED, WAIT).await.unwrap();
    assert_eq!(r["uid"], "IiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiIiI=");
    assert_eq!(r["amountMatoms"], "7000");
    assert!(u64_str(&r["sequenceId"]) > 1 << 32);
    assert_eq!(net.devnet.balance(&bob.uid), before + 7_000);
    net.devnet.shutdown().await;
}
