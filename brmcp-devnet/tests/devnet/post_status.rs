//! Post status updates through the devnet's `PostsService`, as brclient serves them:
//! a comment on a post reaches the author's `PostsStatusStream` (relayed by the
//! commenter) and the author's other subscribers (relayed by the author) as
//! `ReceivedPostStatus`, redelivered on every stream open until
//! `AckReceivedPostStatus`, and kept across a stop without shutdown.

use brmcp_devnet::DevnetConfig;
use serde_json::json;

use crate::common::{QUIET, WAIT, alice_and_bob_in, b64, connect, start, u64_str};

const STATUS: &str = "PostsService.PostsStatusStream[1]";
const SUBSCRIBE: &str = "PostsService.SubscribeToPosts";
const ACK: &str = "PostsService.AckReceivedPostStatus";

#[tokio::test]
async fn a_comment_reaches_the_author_and_the_other_subscribers() {
    let net = start(&["alice", "bob", "carol"], DevnetConfig::default()).await;
    let (alice, bob, carol) = (net.node("alice"), net.node("bob"), net.node("carol"));
    let mut a = connect(&alice).await;
    let mut b = connect(&bob).await;
    let mut c = connect(&carol).await;
    b.ok(SUBSCRIBE, json!({"user": "alice"})).await;
    c.ok(SUBSCRIBE, json!({"user": "alice"})).await;
    for client in [&mut a, &mut b, &mut c] {
        client.request(STATUS, json!({"unackedFrom": "0"}));
    }
    let post = net.devnet.publish_post(alice.id, "for sale").unwrap();
    let status = net
        .devnet
        .comment_on_post(bob.id, alice.id, post, "how much?")
        .unwrap();
    assert_ne!(status, post);

    let at_author = a
        .item(STATUS, WAIT)
        .await
        .expect("alice gets bob's comment");
    assert!(u64_str(&at_author["sequenceId"]) > 0);
    assert_eq!(b64(&at_author["relayerId"]), bob.uid.to_vec());
    assert_eq!(b64(&at_author["postId"]), post.to_vec());
    assert_eq!(b64(&at_author["statusFrom"]), bob.uid.to_vec());
    assert_eq!(at_author["statusFromNick"], "bob");
    let s = &at_author["status"];
    assert_eq!(s["version"], "1");
    assert_eq!(s["from"], bob.uid_hex());
    assert_eq!(s["link"], hex::encode(post));
    let attrs = &s["attributes"];
    assert_eq!(attrs["comment"], "how much?");
    assert_eq!(attrs["identifier"], hex::encode(post));
    assert_eq!(attrs["statusfrom"], bob.uid_hex());
    assert_eq!(attrs["version"], "1");
    assert_eq!(attrs["from_nick"], "bob");
    assert!(attrs["nonce"].as_str().is_some_and(|n| !n.is_empty()));

    let relayed = c
        .item(STATUS, WAIT)
        .await
        .expect("carol gets it from alice");
    assert_eq!(b64(&relayed["relayerId"]), alice.uid.to_vec());
    assert_eq!(b64(&relayed["statusFrom"]), bob.uid.to_vec());
    assert_eq!(relayed["status"], at_author["status"]);
    // The commenter is not sent its own comment back.
    assert!(b.item(STATUS, QUIET).await.is_none());
}

#[tokio::test]
async fn statuses_are_redelivered_until_acked_and_kept_across_a_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (devnet, alice, bob) = alice_and_bob_in(dir.path()).await;
    let post = devnet.publish_post(alice.id, "news").unwrap();
    for text in ["c1", "c2", "c3"] {
        devnet
            .comment_on_post(bob.id, alice.id, post, text)
            .unwrap();
    }
    let mut a = connect(&alice).await;
    let items = a.unacked(STATUS, 3).await;
    let comments: Vec<&str> = items
        .iter()
        .map(|i| i["status"]["attributes"]["comment"].as_str().unwrap())
        .collect();
    assert_eq!(comments, ["c1", "c2", "c3"]);
    let first = u64_str(&items[0]["sequenceId"]);
    assert_eq!(
        a.ok(ACK, json!({"sequenceId": first.to_string()})).await,
        json!({})
    );
    drop(a);
    let mut a = connect(&alice).await;
    let again = a.unacked(STATUS, 2).await;
    assert_eq!(again[0]["status"]["attributes"]["comment"], "c2");
    assert!(a.item(STATUS, QUIET).await.is_none());
    drop(a);
    assert_eq!(devnet.post_status_log(alice.id).unwrap().len(), 3);
    // Dropped without a stop, as a SIGKILL.
    drop(devnet);

    let (_devnet, alice, _) = alice_and_bob_in(dir.path()).await;
    let mut a = connect(&alice).await;
    let kept = a.unacked(STATUS, 2).await;
    assert_eq!(kept[0]["status"]["attributes"]["comment"], "c2");
    assert_eq!(kept[1]["status"]["attributes"]["comment"], "c3");
    assert_eq!(kept[0]["sequenceId"], again[0]["sequenceId"]);
    assert!(a.item(STATUS, QUIET).await.is_none());
}
