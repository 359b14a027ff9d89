//! Posts through the devnet's `PostsService`: a subscriber's `PostsStream` carries the
//! posts of the authors it subscribed to as `ReceivedPost`s, redelivered on every
//! stream open until `AckReceivedPost`, kept across a restart; unsubscribed or never
//! subscribed users get none; post requests dropped in the devnet directory are
//! published by the running devnet.

use std::time::Duration;

use brmcp_devnet::{DevnetConfig, POSTS_DIR, PostRequest};
use serde_json::json;

use crate::common::{QUIET, WAIT, alice_and_bob_in, b64, connect, start, u64_str};

const POSTS: &str = "PostsService.PostsStream[1]";
const SUBSCRIBE: &str = "PostsService.SubscribeToPosts";
const UNSUBSCRIBE: &str = "PostsService.UnsubscribeToPosts";
const ACK: &str = "PostsService.AckReceivedPost";

#[tokio::test]
async fn a_subscriber_receives_the_authors_posts_as_received_post() {
    let net = start(&["alice", "bob", "carol"], DevnetConfig::default()).await;
    let (alice, bob, carol) = (net.node("alice"), net.node("bob"), net.node("carol"));
    let mut b = connect(&bob).await;
    let mut c = connect(&carol).await;
    assert_eq!(b.ok(SUBSCRIBE, json!({"user": "alice"})).await, json!({}));
    b.request(POSTS, json!({"unackedFrom": "0"}));
    c.request(POSTS, json!({"unackedFrom": "0"}));

    let id = net
        .devnet
        .publish_post(alice.id, "Market open\nfirst offer")
        .unwrap();
    let item = b.item(POSTS, WAIT).await.expect("bob gets alice's post");
    assert!(u64_str(&item["sequenceId"]) > 0);
    assert_eq!(b64(&item["relayerId"]), alice.uid.to_vec());
    let summary = &item["summary"];
    assert_eq!(b64(&summary["id"]), id.to_vec());
    assert_eq!(b64(&summary["authorId"]), alice.uid.to_vec());
    assert_eq!(b64(&summary["from"]), alice.uid.to_vec());
    assert_eq!(summary["authorNick"], "alice");
    assert_eq!(summary["title"], "Market open");
    assert!(summary["date"].as_str().unwrap().parse::<i64>().unwrap() > 0);
    assert_eq!(item["post"]["version"], "1");
    assert_eq!(
        item["post"]["attributes"]["main"],
        "Market open\nfirst offer"
    );
    // Carol never subscribed.
    assert!(c.item(POSTS, QUIET).await.is_none());
    // Nor does alice get her own post.
    let mut a = connect(&alice).await;
    a.request(POSTS, json!({"unackedFrom": "0"}));
    assert!(a.item(POSTS, QUIET).await.is_none());
}

#[tokio::test]
async fn an_unknown_user_is_refused_and_an_unsubscribed_one_gets_nothing() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    let (alice, bob) = (net.node("alice"), net.node("bob"));
    let mut b = connect(&bob).await;
    let (code, msg) = b.err(SUBSCRIBE, json!({"user": "mallory"})).await;
    assert_eq!((code, msg.as_str()), (-32603, "user mallory not found"));
    b.ok(SUBSCRIBE, json!({"user": alice.uid_hex()})).await;
    b.request(POSTS, json!({"unackedFrom": "0"}));
    net.devnet.publish_post(alice.id, "one").unwrap();
    let item = b.item(POSTS, WAIT).await.unwrap();
    assert_eq!(item["post"]["attributes"]["main"], "one");

    assert_eq!(b.ok(UNSUBSCRIBE, json!({"user": "ALICE"})).await, json!({}));
    net.devnet.publish_post(alice.id, "two").unwrap();
    assert!(b.item(POSTS, QUIET).await.is_none());
    // Unknown params are refused as protojson does.
    let (code, _) = b.err(SUBSCRIBE, json!({"nick": "alice"})).await;
    assert_eq!(code, -32602);
}

#[tokio::test]
async fn posts_are_redelivered_until_acked_and_kept_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (devnet, alice, bob) = alice_and_bob_in(dir.path()).await;
    let mut b = connect(&bob).await;
    b.ok(SUBSCRIBE, json!({"user": "alice"})).await;
    for text in ["p1", "p2", "p3"] {
        devnet.publish_post(alice.id, text).unwrap();
    }
    let items = b.unacked(POSTS, 3).await;
    let first = u64_str(&items[0]["sequenceId"]);
    b.ok(ACK, json!({"sequenceId": first.to_string()})).await;
    drop(b);
    // A new stream gets what was not acknowledged, again.
    let mut b = connect(&bob).await;
    let again = b.unacked(POSTS, 2).await;
    assert_eq!(again[0]["post"]["attributes"]["main"], "p2");
    assert_eq!(again[1]["post"]["attributes"]["main"], "p3");
    assert!(b.item(POSTS, QUIET).await.is_none());
    drop(b);
    // Dropped without a stop, as a SIGKILL.
    drop(devnet);

    let (devnet, alice, bob) = alice_and_bob_in(dir.path()).await;
    let mut b = connect(&bob).await;
    let kept = b.unacked(POSTS, 2).await;
    assert_eq!(kept[0]["post"]["attributes"]["main"], "p2");
    assert_eq!(kept[1]["post"]["attributes"]["main"], "p3");
    assert!(b.item(POSTS, QUIET).await.is_none());
    // The subscription was kept too.
    devnet.publish_post(alice.id, "p4").unwrap();
    let item = b.item(POSTS, WAIT).await.expect("subscription kept");
    assert_eq!(item["post"]["attributes"]["main"], "p4");
}

#[tokio::test]
async fn a_post_request_dropped_in_the_directory_is_published() {
    let net = start(&["alice", "bob"], DevnetConfig::default()).await;
    net.devnet.watch_posts().unwrap();
    let bob = net.node("bob");
    let mut b = connect(&bob).await;
    b.ok(SUBSCRIBE, json!({"user": "alice"})).await;
    b.request(POSTS, json!({"unackedFrom": "0"}));
    let posts = net.dir.path().join(POSTS_DIR);
    let req = PostRequest {
        author: "alice".to_owned(),
        text: "from a file".to_owned(),
    };
    std::fs::write(posts.join("r1.json"), serde_json::to_string(&req).unwrap()).unwrap();
    std::fs::write(
        posts.join("r2.json"),
        r#"{"author": "nobody", "text": "x"}"#,
    )
    .unwrap();
    let item = b.item(POSTS, WAIT).await.expect("published");
    assert_eq!(item["post"]["attributes"]["main"], "from a file");
    let answer = wait_for(&posts.join("r1.id")).await;
    assert_eq!(answer, hex::encode(b64(&item["summary"]["id"])));
    let refused = wait_for(&posts.join("r2.err")).await;
    assert!(refused.contains("nobody"), "{refused}");
    assert!(!posts.join("r1.json").exists() && !posts.join("r2.json").exists());
    assert!(b.item(POSTS, QUIET).await.is_none());
}

async fn wait_for(path: &std::path::Path) -> String {
    for _ in 0..100 {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} never written", path.display());
}
