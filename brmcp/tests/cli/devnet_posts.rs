//! `brmcp devnet post NAME FILE`, as a user runs it: bob subscribes to alice's posts
//! through his clientrpc client, the command publishes FILE as alice's post to the
//! running devnet and prints its id, and bob's posts stream holds it after a SIGKILL
//! of the devnet; bad uses are refused with the reason.

use std::path::Path;
use std::time::Duration;

use brmcp::clientrpc::{BotConfig, ClientRpcConfig, ClientRpcHost, Streams};
use brmcp_devnet::{Devnet, DevnetConfig, NodeSpec};
use serde_json::json;

use crate::processes::{Procs, brmcp, spawn, wait_for};

/// Bound on one clientrpc call of the test's client.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);

fn host(dir: &Path, nick: &str) -> ClientRpcHost {
    let bot = BotConfig::load(dir.join(nick).join("brmcp-serve.conf")).expect("conf");
    let mut config = ClientRpcConfig::from_bot_config(&bot);
    config.request_timeout = Some(REQUEST_TIMEOUT);
    ClientRpcHost::new(config).expect("host")
}

fn post(dir: &str, name: &str, file: &Path) -> std::process::Output {
    brmcp(&[
        "devnet",
        "post",
        name,
        file.to_str().expect("utf-8"),
        "--dir",
        dir,
    ])
    .output()
    .expect("devnet post")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_published_by_the_command_reaches_a_subscriber_and_is_kept() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let dir_arg = dir.to_str().expect("utf-8");
    let file = dir.join("offer.txt");
    std::fs::write(&file, "Fresh fortunes\n10 atoms each").expect("post file");

    // No devnet has run in the directory: refused, nothing left behind.
    let none = post(dir_arg, "alice", &file);
    assert!(!none.status.success());
    assert!(
        String::from_utf8_lossy(&none.stderr).contains("no running devnet"),
        "{none:?}"
    );

    let mut procs = Procs(Vec::new());
    let lines = spawn(
        &mut procs,
        brmcp(&["devnet", "--dir", dir_arg, "--nodes", "3"]),
    );
    let out = wait_for(&lines, "Ctrl-C stops the devnet.");
    assert!(
        out.iter()
            .any(|l| l.contains("brmcp devnet post NAME FILE --dir")),
        "the startup lines say how to post:\n{}",
        out.join("\n")
    );
    let bob = host(dir, "bob");
    bob.spawn(Streams::new()).await.expect("bob's client");
    let subscribed = bob
        .call("PostsService.SubscribeToPosts", &json!({"user": "alice"}))
        .await
        .expect("subscribe");
    assert_eq!(subscribed, json!({}));

    let published = post(dir_arg, "alice", &file);
    assert!(published.status.success(), "{published:?}");
    let id = String::from_utf8(published.stdout).expect("utf-8");
    let id = id.trim();
    assert!(
        id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{id:?}"
    );
    // An unknown author is refused, naming it.
    let unknown = post(dir_arg, "mallory", &file);
    assert!(!unknown.status.success());
    assert!(
        String::from_utf8_lossy(&unknown.stderr).contains("mallory"),
        "{unknown:?}"
    );
    // Every request was answered and taken away.
    let left: Vec<_> = std::fs::read_dir(dir.join("posts"))
        .expect("posts folder")
        .collect();
    assert!(left.is_empty(), "{left:?}");

    // SIGKILL (Procs' drop), then read bob's posts where the next devnet finds them.
    drop(bob);
    drop(procs);
    let specs = ["alice", "bob", "carol"].map(NodeSpec::new).to_vec();
    let devnet = Devnet::start_with(dir, specs, DevnetConfig::default())
        .await
        .expect("devnet restarts on its directory");
    let (bob, carol) = (
        devnet.node_by_nick("bob").expect("bob"),
        devnet.node_by_nick("carol").expect("carol"),
    );
    let posts = devnet.posts_log(bob.id).expect("bob's posts");
    assert_eq!(posts.len(), 1, "{posts:?}");
    let item = &posts[0].params;
    assert_eq!(
        item["post"]["attributes"]["main"],
        "Fresh fortunes\n10 atoms each"
    );
    assert_eq!(item["summary"]["title"], "Fresh fortunes");
    assert_eq!(item["summary"]["authorNick"], "alice");
    use base64::Engine as _;
    let got = base64::engine::general_purpose::STANDARD
        .decode(item["summary"]["id"].as_str().expect("id"))
        .expect("base64");
    assert_eq!(hex::encode(got), id);
    // Carol never subscribed.
    assert!(
        devnet
            .posts_log(carol.id)
            .expect("carol's posts")
            .is_empty()
    );
}
