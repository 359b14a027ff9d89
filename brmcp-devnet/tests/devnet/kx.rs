//! Mediated key exchange through the devnet: `MediateKX` through a contact who knows
//! the target makes the two users contacts and emits `KXCompleted` on both sides; an
//! unknown mediator is refused with brclient's text; a mediator who does not know the
//! target answers `{}` and nothing follows; the mediator is checked before the
//! target, and a target already a contact is refused with brclient's text.

use crate::common::{QUIET, WAIT, b64, connect, start, u64_str};
use brmcp_devnet::{DevnetConfig, StreamKind};
use serde_json::json;

const KXS: &str = "ChatService.KXStream[1]";

/// alice–bob and bob–carol are contacts; alice and carol are not.
async fn chain() -> crate::common::Net {
    let mut cfg = DevnetConfig::default();
    cfg.kx_all = false;
    let net = start(&["alice", "bob", "carol"], cfg).await;
    let (a, b, c) = (net.node("alice"), net.node("bob"), net.node("carol"));
    net.devnet.kx(a.id, b.id).unwrap();
    net.devnet.kx(b.id, c.id).unwrap();
    net
}

#[tokio::test]
async fn mediation_makes_contacts_and_completes_on_both_sides() {
    let net = chain().await;
    let (alice, bob, carol) = (net.node("alice"), net.node("bob"), net.node("carol"));
    let mut a = connect(&alice).await;
    let mut c = connect(&carol).await;
    let pm = json!({"user": carol.uid_hex(), "msg": {"message": "hi"}});
    let (_, text) = a.err("ChatService.PM", pm.clone()).await;
    assert_eq!(text, format!("user {} not found", carol.uid_hex()));
    a.request(KXS, json!({}));
    c.request(KXS, json!({}));
    // The KX with bob already completed on both: skip those items.
    assert_eq!(b64(&a.item(KXS, WAIT).await.unwrap()["uid"]), bob.uid);
    assert_eq!(b64(&c.item(KXS, WAIT).await.unwrap()["uid"]), bob.uid);

    let result = a
        .ok(
            "ChatService.MediateKX",
            json!({"mediator": bob.uid_hex(), "target": carol.uid_hex()}),
        )
        .await;
    assert_eq!(result, json!({}));
    let on_alice = a.item(KXS, WAIT).await.expect("KXCompleted on alice");
    assert_eq!(b64(&on_alice["uid"]), carol.uid);
    assert_eq!(on_alice["nick"], "carol");
    assert!(u64_str(&on_alice["sequenceId"]) > 1 << 32);
    let on_carol = c.item(KXS, WAIT).await.expect("KXCompleted on carol");
    assert_eq!(b64(&on_carol["uid"]), alice.uid);
    assert_eq!(on_carol["nick"], "alice");

    // Now contacts: the PM goes through, and carol can name alice by nick.
    assert_eq!(a.ok("ChatService.PM", pm).await, json!({}));
    let back = json!({"user": "alice", "msg": {"message": "hello"}});
    assert_eq!(c.ok("ChatService.PM", back).await, json!({}));
    assert_eq!(net.devnet.log(alice.id, StreamKind::Kx).unwrap().len(), 2);
}

#[tokio::test]
async fn an_unknown_mediator_is_refused_and_an_unaware_one_does_nothing() {
    let net = chain().await;
    let (alice, bob, carol) = (net.node("alice"), net.node("bob"), net.node("carol"));
    let mut a = connect(&alice).await;
    let mut c = connect(&carol).await;
    a.request(KXS, json!({}));
    c.request(KXS, json!({}));
    a.item(KXS, WAIT).await.unwrap();
    c.item(KXS, WAIT).await.unwrap();

    // carol is no contact of alice's, so she cannot mediate.
    let (code, text) = a
        .err(
            "ChatService.MediateKX",
            json!({"mediator": carol.uid_hex(), "target": bob.uid_hex()}),
        )
        .await;
    assert_eq!(code, -32603);
    assert_eq!(text, format!("user {} not found", carol.uid_hex()));
    // Unknown fields are refused like every request's.
    let (code, _) = a
        .err(
            "ChatService.MediateKX",
            json!({"mediator": bob.uid_hex(), "target": carol.uid_hex(), "via": 1}),
        )
        .await;
    assert_eq!(code, -32602);

    // bob knows no such target: the request is accepted and nothing completes.
    let stranger = hex::encode([0x5a; 32]);
    let result = a
        .ok(
            "ChatService.MediateKX",
            json!({"mediator": "bob", "target": stranger}),
        )
        .await;
    assert_eq!(result, json!({}));
    assert_eq!(a.item(KXS, QUIET).await, None);
    assert_eq!(c.item(KXS, QUIET).await, None);
    assert_eq!(net.devnet.log(alice.id, StreamKind::Kx).unwrap().len(), 1);
}

#[tokio::test]
async fn the_mediator_is_checked_first_and_an_existing_contact_is_refused() {
    let net = chain().await;
    let (alice, bob, carol) = (net.node("alice"), net.node("bob"), net.node("carol"));
    net.devnet.kx(alice.id, carol.id).unwrap();
    let mut a = connect(&alice).await;
    let mut c = connect(&carol).await;
    a.request(KXS, json!({}));
    c.request(KXS, json!({}));
    for _ in 0..2 {
        a.item(KXS, WAIT).await.unwrap();
        c.item(KXS, WAIT).await.unwrap();
    }

    // Both bad: brclient resolves the mediator before it parses the target.
    let (code, text) = a
        .err(
            "ChatService.MediateKX",
            json!({"mediator": "mallory", "target": "not hex"}),
        )
        .await;
    assert_eq!(code, -32603);
    assert_eq!(text, "user mallory not found");
    let (_, text) = a
        .err(
            "ChatService.MediateKX",
            json!({"mediator": "bob", "target": "not hex"}),
        )
        .await;
    assert!(text.starts_with("invalid target: encoding/hex: "), "{text}");

    // carol is already alice's contact: refused, and no second KX on either side.
    let (code, text) = a
        .err(
            "ChatService.MediateKX",
            json!({"mediator": bob.uid_hex(), "target": carol.uid_hex()}),
        )
        .await;
    assert_eq!(code, -32603);
    assert_eq!(
        text,
        format!(
            "cannot request mediate identity: already havesession with target {}",
            carol.uid_hex()
        )
    );
    assert_eq!(a.item(KXS, QUIET).await, None);
    assert_eq!(c.item(KXS, QUIET).await, None);
    assert_eq!(net.devnet.log(alice.id, StreamKind::Kx).unwrap().len(), 2);
    assert_eq!(net.devnet.log(carol.id, StreamKind::Kx).unwrap().len(), 2);
}
