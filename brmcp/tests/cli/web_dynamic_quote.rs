//! A dynamically priced tool's payment on the bridge's page, in a real headless
//! Chromium: `brmcp serve` sells an upstream tool priced per call by its companion
//! within 10 to 100 atoms, the bridge runs in approval mode, and the agent's call of
//! it waits on the page showing the quote and the bound it was checked within; the
//! page's Approve pays exactly the quote and the agent gets its result. The same
//! payment is listed by `approvals list` with its quote and bound.

use std::path::Path;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use super::page_attacks::login_url;
use super::processes::{brmcp, spawn, start_bridge, start_devnet, wait_for};
use super::upstream::wait_until_up;
use super::webdriver::Browser;

/// The bound `search` is sold within.
const LEAST: u64 = 10;
const MOST: u64 = 100;
/// What the companion quotes the agent's call: inside the bound.
const QUOTE: u64 = 40;

/// The upstream of the server tests whose `search` is priced by `search-price`.
fn priced_upstream() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/server/priced_upstream.py")
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_a_dynamic_quote_with_its_bound_and_approving_pays_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut procs, alice, _bob) = start_devnet(dir.path());
    let alice_dir = dir.path().join("alice");
    let config_path = alice_dir.join("brmcp.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).expect("brmcp.json"))
            .expect("json");
    let runs = dir.path().join("runs");
    config["upstreams"] = json!([{
        "name": "priced",
        "command": "python3",
        "args": [priced_upstream()],
        "env": {"RUNS_FILE": runs},
        "tools": {"search": {"priced_by": "search-price",
                             "min_price_atoms": LEAST, "max_price_atoms": MOST}}
    }]);
    std::fs::write(&config_path, config.to_string()).expect("write brmcp.json");
    let serve = spawn(
        &mut procs,
        brmcp(&["serve", "--datadir", alice_dir.to_str().expect("utf-8")]),
    );
    wait_for(&serve, "serving upstream(s) priced");
    wait_until_up(&alice_dir, 1).await;
    let (bridge_dir, listen, token) = start_bridge(&mut procs, dir.path(), &alice, "approval");

    let browser = Browser::start().await;
    browser
        .open(&login_url(&["bridge", "--datadir", &bridge_dir, "ui"]))
        .await;
    browser.wait_text("#pending", "No payment is waiting").await;

    let agent = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/alice"))
                .auth_header(token),
        ))
        .await
        .expect("agent session");
    let tools = agent.list_all_tools().await.expect("tools/list");
    let search = tools
        .iter()
        .find(|t| t.name == "search")
        .unwrap_or_else(|| panic!("no search in {tools:?}"));
    assert_eq!(
        serde_json::to_value(&search.meta).expect("meta"),
        json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": LEAST, "brmcp/priceMaxAtoms": MOST})
    );
    let peer = agent.peer().clone();
    let call = tokio::spawn(async move {
        let args = json!({"q": "owls", "quote": QUOTE.to_string()});
        let Value::Object(args) = args else {
            unreachable!()
        };
        peer.call_tool(CallToolRequestParams::new("search").with_arguments(args))
            .await
    });

    // The page shows the amount, the quote and the bound it is within.
    let waiting = browser.wait_text("#pending", "search").await;
    assert!(
        waiting.contains(&format!(
            "{QUOTE} atoms (quoted {QUOTE} atoms, listed {LEAST} to {MOST} atoms)"
        )),
        "{waiting}"
    );

    // `approvals list` shows the same payment, its quote and bound as numbers.
    let listed = brmcp(&[
        "bridge",
        "--datadir",
        &bridge_dir,
        "approvals",
        "list",
        "--json",
    ])
    .output()
    .expect("approvals list");
    assert!(listed.status.success(), "{listed:?}");
    let listed: Value = serde_json::from_slice(&listed.stdout).expect("approvals json");
    let waits = listed.as_array().expect("an array");
    assert_eq!(waits.len(), 1, "{listed}");
    assert_eq!(waits[0]["tool"], "search", "{listed}");
    assert_eq!(waits[0]["atoms"], QUOTE, "{listed}");
    assert_eq!(
        waits[0]["quote"],
        json!({"price_atoms": QUOTE, "min_atoms": LEAST, "max_atoms": MOST}),
        "{listed}"
    );
    let table = brmcp(&["bridge", "--datadir", &bridge_dir, "approvals", "list"])
        .output()
        .expect("approvals list");
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains(&format!(
            "quoted {QUOTE} atoms, listed {LEAST} to {MOST} atoms"
        )),
        "{table}"
    );

    browser.click("#pending button.approve").await;
    let answered = call
        .await
        .expect("join")
        .expect("the approved call answers");
    assert_ne!(answered.is_error, Some(true), "{answered:?}");
    assert_eq!(
        brmcp_test_support::text(&answered),
        "searched owls",
        "{answered:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&runs)
            .expect("runs")
            .lines()
            .count(),
        1,
        "the tool ran once"
    );
    browser.wait_text("#pending", "No payment is waiting").await;
    browser.wait_text("#spend", "paid").await;
    let spent = browser.wait_text("#spend", "search").await;
    assert!(spent.contains(&format!("{QUOTE} atoms")), "{spent}");
    browser.close().await;
    let _ = agent.cancel().await;
}
