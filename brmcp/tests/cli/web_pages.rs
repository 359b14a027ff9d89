//! The local pages in a real headless Chromium: the bridge's page (a payment waiting
//! appears live, Approve pays it and the agent's call returns, the chart shows it, Deny
//! refuses the next) and `serve`'s operator page (the call's revenue), both logged in
//! at once in one browser; a login URL from the history logs in no more; another
//! local server the browser visits gets nothing that opens a page; a rotated secret
//! ends its page's session and shows how to log in again. Before the browser, the
//! refusals over plain HTTP of `page_attacks`.
//!
//! With `BRMCP_UI_SCREENSHOTS=DIR`, the test leaves `bridge-ui.png` and
//! `serve-ui.png` there.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::page_attacks::{
    Attacker, SESSION, assert_opens_nothing, code_of, login_url, refusals, replayable,
};
use super::processes::{
    assert_fortune, brmcp, free_port, spawn, start_bridge, start_devnet, wait_for,
};
use super::webdriver::Browser;

/// Days of payments the bridge's spend log holds before it starts: the chart shows
/// each of them beside today's.
const HISTORY_DAYS: i64 = 9;

/// A spend log with a payment to `bot` on each of the last [`HISTORY_DAYS`] days, by
/// the default agent and by `research`, all paid.
fn seed_history(bridge_dir: &std::path::Path, bot: &str) {
    use brmcp::bridge::{DAY_SECS, Payment, SpendLog, Spender};
    use brmcp_adapters::wire::UnixTime;
    brmcp::secure_fs::create_dir(bridge_dir).expect("bridge dir");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        .cast_signed();
    let log = SpendLog::open(bridge_dir, UnixTime(now)).expect("spend log");
    let bot: brmcp_adapters::PeerId = bot.parse().expect("uid");
    for day in 1..=HISTORY_DAYS {
        for (agent, atoms) in [("default", 10_000), ("research", 10_000 * (day as u64 % 3))] {
            if atoms == 0 {
                continue;
            }
            let at = UnixTime(now - day * DAY_SECS);
            let id = log
                .reserve_as(
                    at,
                    &Spender::agent(agent, None),
                    Payment::new(&bot, "fortune", atoms),
                    u64::MAX,
                    0,
                )
                .expect("reserve")
                .expect("fits");
            log.settle(id, Ok(())).expect("settle");
            // Its call was answered: the credit was collected.
            log.collect(at, &bot, agent, "fortune", Some(id), atoms)
                .expect("collect");
        }
    }
}

/// A ledger whose callers (not the devnet's) hold balances and paid for a fortune on
/// each of the last [`HISTORY_DAYS`] days, all completed.
fn seed_ledger(serve_dir: &std::path::Path) {
    use brmcp::server::{CallRequest, Charge, Ledger, MATOMS_PER_ATOM};
    use brmcp_adapters::wire::UnixTime;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        .cast_signed();
    let start = UnixTime(now - (HISTORY_DAYS + 1) * brmcp::bridge::DAY_SECS);
    let ledger = Ledger::open(serve_dir, start).expect("ledger").ledger;
    let callers: Vec<brmcp_adapters::PeerId> = (1..=3u8)
        .map(|n| {
            use sha2::Digest;
            brmcp_adapters::PeerId::from_bytes(sha2::Sha256::digest([n]).into())
        })
        .collect();
    for (i, caller) in callers.iter().enumerate() {
        let atoms = 100_000 * (u64::try_from(i).expect("few") + 1);
        ledger
            .manual_credit(caller, atoms * MATOMS_PER_ATOM, "prepaid", start)
            .expect("credit");
    }
    for day in 1..=HISTORY_DAYS {
        let calls = 1 + day % 3;
        for n in 0..calls {
            let at = UnixTime(now - day * brmcp::bridge::DAY_SECS + n);
            let request = CallRequest {
                caller: callers[usize::try_from(n).expect("few")],
                tool: "fortune",
                price_atoms: 10_000,
                keyed: None,
            };
            let Charge::Run(call) = ledger.charge(&request, at).expect("charge") else {
                panic!("the seeded callers can pay");
            };
            ledger.complete(call, "{}", at).expect("complete");
        }
    }
}

fn save(name: &str, png: &[u8]) {
    if let Some(dir) = std::env::var_os("BRMCP_UI_SCREENSHOTS") {
        std::fs::write(std::path::Path::new(&dir).join(name), png).expect("screenshot");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pages_approve_a_payment_chart_it_and_show_the_revenue() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut procs, alice, _bob) = start_devnet(dir.path());
    let alice_dir = dir.path().join("alice");
    let alice_arg = alice_dir.to_str().expect("utf-8").to_owned();
    let ui_listen = format!("127.0.0.1:{}", free_port());
    seed_ledger(&alice_dir);
    let serve = spawn(
        &mut procs,
        brmcp(&["serve", "--datadir", &alice_arg, "--ui-listen", &ui_listen]),
    );
    wait_for(&serve, "operator page on");
    seed_history(&dir.path().join("bob-bridge"), &alice);
    let (bridge_dir, listen, token) = start_bridge(&mut procs, dir.path(), &alice, "approval");
    let added = brmcp(&[
        "bridge",
        "--datadir",
        &bridge_dir,
        "token",
        "add",
        "research",
        "--per-call-cap",
        "20000",
        "--per-day-cap",
        "200000",
    ])
    .output()
    .expect("token add");
    assert!(added.status.success(), "{added:?}");
    let research_token = String::from_utf8_lossy(&added.stdout).trim().to_owned();
    refusals(&listen, &ui_listen, &bridge_dir, &alice_arg, &token).await;
    let bridge_url = login_url(&["bridge", "--datadir", &bridge_dir, "ui"]);
    let serve_url = login_url(&["serve", "--datadir", &alice_arg, "ui"]);

    let browser = Browser::start().await;
    browser.open(&bridge_url).await;
    browser.wait_text("#pending", "No payment is waiting").await;
    assert!(
        !browser.url().await.contains(&code_of(&bridge_url)),
        "the code left the address bar"
    );
    let kept = browser
        .script("return sessionStorage.getItem('brmcp.bridge.session');")
        .await;
    let page_token = kept
        .as_str()
        .expect("the session in sessionStorage")
        .to_owned();
    assert_eq!(page_token.len(), 64, "{kept}");

    // The login URL again, as the browser's history holds it: used up.
    browser.open(&bridge_url).await;
    browser.wait_text("#login-status", "used already").await;

    // Another local server, on another port: the browser sends it whatever it sends
    // by host, and none of it opens the bridge's page.
    let attacker = Attacker::start().await;
    browser.open(&format!("http://{}/", attacker.addr)).await;
    let seen = attacker.wait_for("/ui/pixel.gif").await;
    for head in &seen {
        assert!(!head.contains(&page_token), "the token reached it: {head}");
        assert!(!head.to_ascii_lowercase().contains(SESSION), "{head}");
        assert_opens_nothing(&listen, &replayable(head)).await;
    }
    browser.open(&format!("http://{listen}/ui/")).await;
    browser.wait_text("#pending", "No payment is waiting").await;

    let agent = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/alice"))
                .auth_header(token.clone()),
        ))
        .await
        .expect("agent session");
    let peer = agent.peer().clone();
    let call =
        tokio::spawn(async move { peer.call_tool(CallToolRequestParams::new("fortune")).await });
    let waiting = browser.wait_text("#pending", "fortune").await;
    assert!(waiting.contains("10,000 atoms"), "{waiting}");
    browser.click("#pending button.approve").await;
    assert_fortune(&call.await.expect("join").expect("the approved call"));
    browser.wait_text("#spent-24h", "10,000").await;
    browser.wait_text("#chart", "alice · fortune").await;
    browser.wait_text("#spend", "paid").await;
    browser.wait_text("#bots", "fortune").await;
    // Today's bar beside the history's: one bar per day with payments.
    let bars = browser
        .count("#chart rect[data-series='alice · fortune']")
        .await;
    assert_eq!(bars, usize::try_from(HISTORY_DAYS).expect("days") + 1);

    // Another agent's payment, shown as its own, then denied: the agent hears the
    // payment was not made.
    let research = ()
        .serve(StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/alice"))
                .auth_header(research_token),
        ))
        .await
        .expect("the research agent's session");
    let peer = research.peer().clone();
    let call =
        tokio::spawn(async move { peer.call_tool(CallToolRequestParams::new("fortune")).await });
    let waiting = browser.wait_text("#pending", "fortune").await;
    assert!(waiting.contains("research"), "{waiting}");
    save("bridge-ui.png", &browser.screenshot().await);
    browser.click("#pending button.deny").await;
    let denied = call.await.expect("join").expect("the denied call");
    let said = format!("{denied:?}");
    assert!(said.contains("payment denied by the user"), "{said}");
    browser.wait_text("#pending", "No payment is waiting").await;

    // The caps through the form: a bad value is refused naming its key, a good one is
    // written to the file.
    browser.type_into("#per_call_cap_atoms", "-5").await;
    browser.click("#save").await;
    browser
        .wait_text("#settings-msg", "per_call_cap_atoms")
        .await;
    browser.type_into("#per_call_cap_atoms", "50000").await;
    browser.click("#save").await;
    browser.wait_text("#settings-msg", "saved").await;
    let file = std::path::Path::new(&bridge_dir).join("mcpclient.json");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).expect("settings")).expect("json");
    assert_eq!(saved["per_call_cap_atoms"], 50_000);
    assert_eq!(saved["mode"], "approval");
    browser
        .wait_text("#mode-line", "50,000 atoms per call")
        .await;

    browser.open(&serve_url).await;
    browser.wait_text("#earned-24h", "10,000").await;
    browser.wait_text("#journal", "fortune").await;
    browser.wait_text("#revenue-chart", "fortune").await;
    browser.wait_text("#balances", "atoms").await;
    // The history's days and today's, each a bar.
    let bars = browser
        .count("#revenue-chart rect[data-series='fortune']")
        .await;
    assert_eq!(bars, usize::try_from(HISTORY_DAYS).expect("days") + 1);
    save("serve-ui.png", &browser.screenshot().await);

    // Both pages stay logged in in one browser: each keeps its own session.
    browser.open(&format!("http://{listen}/ui/")).await;
    browser.wait_text("#spent-24h", "10,000").await;
    browser.wait_text("#status", "live").await;
    browser.open(&format!("http://{ui_listen}/ui/")).await;
    browser.wait_text("#earned-24h", "10,000").await;
    browser.wait_text("#status", "live").await;

    // A rotated approval secret ends the bridge page's session, which says how to log
    // in again; the operator page's stays.
    browser.open(&format!("http://{listen}/ui/")).await;
    browser.wait_text("#status", "live").await;
    let rotated = brmcp(&["bridge", "--datadir", &bridge_dir, "ui", "--rotate"])
        .output()
        .expect("ui --rotate");
    assert!(rotated.status.success(), "{rotated:?}");
    browser
        .wait_text("#status", "brmcp bridge --datadir DIR ui")
        .await;
    browser.open(&format!("http://{ui_listen}/ui/")).await;
    browser.wait_text("#journal", "fortune").await;
    browser.wait_text("#status", "live").await;
    browser.click("#logout").await;
    browser.wait_text("#status", "logged out").await;
    browser.close().await;
    let _ = agent.cancel().await;
    let _ = research.cancel().await;
}
