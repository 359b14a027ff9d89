//! Bots announcing themselves in Bison Relay posts, as their users run it on a devnet:
//! alice's operator writes the announcement with `serve announce` and publishes it with
//! `devnet post`; bob's bridge, subscribed to alice's and carol's posts, discovers
//! alice (`bots discover --json`), and bob adds her with `bots add`. Carol is hostile:
//! her post carrying alice's announcement, an oversized one and a malformed one are
//! skipped and counted, never shown. And on a devnet with a directory that does not
//! list alice, bob's agent finds her through the directory tools, marked as announced,
//! and adds her once bob accepted the question.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::processes::{Procs, brmcp, devnet_up, free_port, http_bridge, spawn, uid_in, wait_for};

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

/// The bridge in `dirs` (its data directory and its client's config), subscribed to
/// `users`' posts, started: its listen address and its output.
fn subscribed_bridge(
    procs: &mut Procs,
    (bridge_arg, rpc_arg): (&str, &str),
    users: &[&str],
) -> (String, std::sync::mpsc::Receiver<String>) {
    let mut args = vec![
        "bridge",
        "--datadir",
        bridge_arg,
        "--rpc-config",
        rpc_arg,
        "bots",
        "subscribe",
    ];
    args.extend_from_slice(users);
    run(&args);
    let listen = format!("127.0.0.1:{}", free_port());
    let bridge = spawn(procs, http_bridge(bridge_arg, Path::new(rpc_arg), &listen));
    wait_for(&bridge, "Ctrl-C stops the bridge.");
    (listen, bridge)
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
    let out = devnet_up(&mut procs, dir, &["--nodes", "3"]);
    let uid = |nick: &str| uid_in(&out, nick);
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
    let (_listen, _bridge) =
        subscribed_bridge(&mut procs, (bridge_arg, rpc_arg), &["alice", "carol"]);

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

/// The agent's side: an MCP client that declares elicitation and accepts every
/// question, keeping them.
#[derive(Clone, Default)]
struct Accepting {
    asked: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Accepting {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        let capabilities: rmcp::model::ClientCapabilities =
            serde_json::from_value(serde_json::json!({"elicitation": {}})).expect("capabilities");
        rmcp::model::ClientConfig::new(capabilities, rmcp::model::Implementation::new("user", "1"))
    }

    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        if let rmcp::model::ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.asked.lock().expect("lock").push(message);
        }
        Ok(rmcp::model::ElicitResult::new(
            rmcp::model::ElicitationAction::Accept,
        ))
    }
}

fn texts(result: &rmcp::model::CallToolResult) -> String {
    brmcp::adapters::protocol::result_text(result)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_finds_an_announced_bot_through_the_directory_tools() {
    use rmcp::ServiceExt as _;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let dir_arg = dir.to_str().expect("utf-8");
    let mut procs = Procs(Vec::new());
    let out = devnet_up(&mut procs, dir, &["--directory"]);
    let uid = |nick: &str| uid_in(&out, nick);
    let (alice, directory) = (uid("alice"), uid("directory"));
    let command = out
        .iter()
        .find(|l| l.trim_start().starts_with("brmcp directory "))
        .expect("the directory's command")
        .trim()
        .to_owned();
    let args: Vec<&str> = command.split_whitespace().skip(1).collect();
    let running = spawn(&mut procs, brmcp(&args));
    wait_for(&running, &format!("serving as {directory}"));

    // Alice's announcement; the directory does not list her (her bot never ran).
    let announcement = dir.join("announcement.txt");
    run(&[
        "serve",
        "--datadir",
        dir.join("alice").to_str().expect("utf-8"),
        "announce",
        "--out",
        announcement.to_str().expect("utf-8"),
    ]);

    // Bob's bridge: the directory in its settings, alice's posts subscribed to.
    let bridge_dir = dir.join("bob-bridge");
    let bridge_arg = bridge_dir.to_str().expect("utf-8");
    let rpc = dir.join("bob").join("brmcp-serve.conf");
    let rpc_arg = rpc.to_str().expect("utf-8");
    let token = run(&["bridge", "--datadir", bridge_arg, "token", "show"]);
    let token = String::from_utf8_lossy(&token.stdout).trim().to_owned();
    let settings_path = bridge_dir.join("mcpclient.json");
    let mut settings: Value =
        serde_json::from_slice(&std::fs::read(&settings_path).expect("settings")).expect("JSON");
    settings["directories"] = serde_json::json!([{"uid": directory, "name": "dir"}]);
    std::fs::write(&settings_path, settings.to_string()).expect("settings");
    let (listen, _bridge) = subscribed_bridge(&mut procs, (bridge_arg, rpc_arg), &["alice"]);
    post(dir_arg, "alice", &announcement);
    let deadline = Instant::now() + DISCOVER_WAIT;
    while discover(bridge_arg)["announcements"]
        .as_array()
        .is_none_or(Vec::is_empty)
    {
        assert!(
            Instant::now() < deadline,
            "alice's announcement never arrived"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The agent searches the directory tools and finds alice, marked as announced.
    let user = Accepting::default();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/directory"))
            .auth_header(token),
    );
    let agent = user.clone().serve(transport).await.expect("MCP session");
    let call = |name: &'static str, args: Value| {
        rmcp::model::CallToolRequestParams::new(name)
            .with_arguments(args.as_object().cloned().unwrap_or_default())
    };
    let found = agent
        .call_tool(call(
            "directory_search",
            serde_json::json!({"query": "fortune"}),
        ))
        .await
        .expect("directory_search");
    let shown = texts(&found);
    assert_ne!(found.is_error, Some(true), "{shown}");
    assert!(shown.contains(&format!("announced bot {alice}")), "{shown}");
    assert!(
        shown.contains("\"fortune\" (10000 atoms per call)"),
        "{shown}"
    );

    // Added once the user accepted the question naming it as announced.
    let added = agent
        .call_tool(call(
            "directory_add_bot",
            serde_json::json!({"uid": alice, "name": "fortunes"}),
        ))
        .await
        .expect("directory_add_bot");
    assert_ne!(added.is_error, Some(true), "{}", texts(&added));
    let asked = user.asked.lock().expect("lock").clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(asked[0].contains("announced itself"), "{}", asked[0]);
    let listed = run(&["bridge", "--datadir", bridge_arg, "bots", "list", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("JSON");
    assert_eq!(listed[0]["uid"], alice.as_str(), "{listed}");
    let _ = agent.cancel().await;
}

/// `serve announce` on a bot that sells an upstream MCP server: the upstream is
/// started for its listing and stopped, and the announcement carries the tools
/// `brmcp.json` exposes at their prices, a dynamic one with its bound; the tools it
/// does not name are not announced.
#[test]
fn serve_announce_lists_an_upstreams_tools_with_prices_and_bounds() {
    let python = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .join("target/interop/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/test-deps",
        python.display()
    );
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/upstream_server.py");
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path();
    let mut procs = Procs(Vec::new());
    let out = devnet_up(&mut procs, dir, &["--nodes", "2"]);
    let alice = uid_in(&out, "alice");
    let state = dir.join("py-state");
    std::fs::create_dir_all(&state).expect("state dir");
    let alice_dir = dir.join("alice");
    let config_path = alice_dir.join("brmcp.json");
    let mut config: Value =
        serde_json::from_slice(&std::fs::read(&config_path).expect("brmcp.json")).expect("JSON");
    config["upstreams"] = serde_json::json!([{
        "name": "py",
        "command": python,
        "args": [server],
        "env": {"UPSTREAM_STATE": state},
        "tools": {
            "echo": 0,
            "add": 500,
            "pricey": {"priced_by": "wait", "max_price_atoms": 900, "min_price_atoms": 5}
        }
    }]);
    std::fs::write(&config_path, config.to_string()).expect("brmcp.json");

    let announced = run(&[
        "serve",
        "--datadir",
        alice_dir.to_str().expect("utf-8"),
        "announce",
        "--name",
        "calc",
    ]);
    let text = String::from_utf8(announced.stdout).expect("utf-8");
    let block = text
        .split("```brmcp-announcement v1\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .unwrap_or_else(|| panic!("no block in {text}"));
    let block: Value = serde_json::from_str(block).expect("JSON block");
    assert_eq!(block["uid"], alice.as_str());
    assert_eq!(block["name"], "calc");
    let tools = block["tools"].as_array().expect("tools");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["echo", "add", "pricey"], "{block}");
    assert_eq!(tools[0]["brmcp/priceAtoms"], 0);
    assert_eq!(tools[1]["brmcp/priceAtoms"], 500);
    assert_eq!(tools[2]["brmcp/pricing"], "dynamic");
    assert_eq!(tools[2]["brmcp/priceMinAtoms"], 5);
    assert_eq!(tools[2]["brmcp/priceMaxAtoms"], 900);
    assert!(
        text.contains("- pricey: priced per call, 5 to 900 atoms"),
        "{text}"
    );
}
