//! Bots announcing themselves in Bison Relay posts, as their users run it on a devnet:
//! alice's operator writes the announcement with `serve announce` and publishes it with
//! `devnet post`; bob's bridge, subscribed to alice's and carol's posts, discovers
//! alice (`bots discover --json`), and bob adds her with `bots add`. Carol is hostile:
//! her post carrying alice's announcement, an oversized one and a malformed one are
//! skipped and counted, never shown.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::processes::{Procs, brmcp, free_port, spawn, wait_for};

/// How long the bridge has to receive and keep the posts (a noisy shared machine).
const DISCOVER_WAIT: Duration = Duration::from_secs(90);

fn run(args: &[&str]) -> std::process::Output {
    let out = brmcp(args).output().expect("brmcp");
    assert!(out.status.success(), "{args:?}: {out:?}");
    out
}

fn discover(bridge_dir: &str) -> Value {
    let out = run(&[
        "bridge",
        "--datadir",
        bridge_dir,
        "bots",
        "discover",
        "--json",
    ]);
    serde_json::from_slice(&out.stdout).expect("discover --json is JSON")
}

fn post(dir: &str, name: &str, file: &Path) {
    let path = file.to_str().expect("utf-8");
    run(&["devnet", "post", name, path, "--dir", dir]);
}

#[test]
fn a_bot_announces_itself_and_a_bridge_on_another_node_discovers_it() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let dir_arg = dir.to_str().expect("utf-8");
    let mut procs = Procs(Vec::new());
    let devnet = spawn(
        &mut procs,
        brmcp(&["devnet", "--dir", dir_arg, "--nodes", "3"]),
    );
    let out = wait_for(&devnet, "Ctrl-C stops the devnet.");
    let uid = |nick: &str| {
        out.iter()
            .find_map(|l| {
                let mut words = l.split_whitespace();
                (words.next() == Some(nick)).then(|| words.next().map(str::to_owned))
            })
            .flatten()
            .unwrap_or_else(|| panic!("no {nick} in:\n{}", out.join("\n")))
    };
    let (alice, carol) = (uid("alice"), uid("carol"));

    // Alice's operator writes the announcement of her bot (the example tools).
    let alice_dir = dir.join("alice");
    let announcement = dir.join("announcement.txt");
    let announced = run(&[
        "serve",
        "--datadir",
        alice_dir.to_str().expect("utf-8"),
        "announce",
        "--description",
        "fortunes on demand",
        "--out",
        announcement.to_str().expect("utf-8"),
    ]);
    let said = String::from_utf8_lossy(&announced.stderr);
    assert!(
        said.contains("/post new") && said.contains("brmcp devnet post"),
        "{said}"
    );
    let text = std::fs::read_to_string(&announcement).expect("the announcement");
    assert!(text.contains("```brmcp-announcement v1\n"), "{text}");
    assert!(text.contains(&format!("\"uid\":\"{alice}\"")), "{text}");
    assert!(text.contains("- fortune: 10000 atoms per call"), "{text}");

    // Bob subscribes to alice's and carol's posts, then runs his bridge.
    let bridge_dir = dir.join("bob-bridge");
    let bridge_arg = bridge_dir.to_str().expect("utf-8");
    let rpc = dir.join("bob").join("brmcp-serve.conf");
    let rpc_arg = rpc.to_str().expect("utf-8");
    run(&[
        "bridge",
        "--datadir",
        bridge_arg,
        "--rpc-config",
        rpc_arg,
        "bots",
        "subscribe",
        "alice",
        "carol",
    ]);
    let listen = format!("127.0.0.1:{}", free_port());
    let bridge = spawn(
        &mut procs,
        brmcp(&[
            "bridge",
            "--datadir",
            bridge_arg,
            "--rpc-config",
            rpc_arg,
            "--listen",
            &listen,
        ]),
    );
    wait_for(&bridge, "Ctrl-C stops the bridge.");

    // Carol, hostile: alice's announcement as her own post, one past the size bound,
    // and one that is not the block.
    let hostile = dir.join("hostile.txt");
    std::fs::write(&hostile, &text).expect("file");
    post(dir_arg, "carol", &hostile);
    let oversized = dir.join("oversized.txt");
    let own = text.replace(&alice, &carol);
    std::fs::write(&oversized, format!("{}\n{own}", "x".repeat(17 * 1024))).expect("file");
    post(dir_arg, "carol", &oversized);
    let malformed = dir.join("malformed.txt");
    std::fs::write(&malformed, own.replace("\"tools\"", "\"tool\"")).expect("file");
    post(dir_arg, "carol", &malformed);
    // And an ordinary post of alice's, which is no announcement.
    let chat = dir.join("chat.txt");
    std::fs::write(&chat, "hello subscribers").expect("file");
    post(dir_arg, "alice", &chat);
    post(dir_arg, "alice", &announcement);

    let deadline = Instant::now() + DISCOVER_WAIT;
    let found = loop {
        let found = discover(bridge_arg);
        let skipped = &found["skipped"];
        let total: u64 = ["malformed", "oversized", "stale", "not_its_author"]
            .iter()
            .map(|k| skipped[k].as_u64().expect("a count"))
            .sum();
        if total == 3
            && found["announcements"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        {
            break found;
        }
        assert!(Instant::now() < deadline, "not discovered in time: {found}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let skipped = &found["skipped"];
    assert_eq!(skipped["not_its_author"], 1, "{found}");
    assert_eq!(skipped["oversized"], 1, "{found}");
    assert_eq!(skipped["malformed"], 1, "{found}");
    let listed = found["announcements"].as_array().expect("announcements");
    assert_eq!(listed.len(), 1, "only alice's is shown: {found}");
    let bot = &listed[0];
    assert_eq!(bot["uid"], alice.as_str());
    assert_eq!(bot["description"], "fortunes on demand");
    assert_eq!(bot["added"], false);
    let tools = bot["tools"].as_array().expect("tools");
    let fortune = tools
        .iter()
        .find(|t| t["name"] == "fortune")
        .expect("fortune");
    assert_eq!(fortune["price_atoms"], 10_000);
    assert!(
        tools
            .iter()
            .any(|t| t["name"] == "echo" && t["price_atoms"] == 0)
    );

    // Discovered is not added: bob's consent is `bots add`.
    run(&[
        "bridge",
        "--datadir",
        bridge_arg,
        "bots",
        "add",
        "fortunes",
        &alice,
    ]);
    let found = discover(bridge_arg);
    assert_eq!(found["announcements"][0]["added"], true, "{found}");
    let table = run(&["bridge", "--datadir", bridge_arg, "bots", "discover"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains(&alice) && !table.contains(&carol), "{table}");
}
