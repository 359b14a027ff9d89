//! The local pages in a real headless Chromium: the bridge's page (a payment waiting
//! appears live, Approve pays it and the agent's call returns, the chart shows it, Deny
//! refuses the next) and `serve`'s operator page (the call's revenue), plus the
//! refusals over plain HTTP: an agent's token opens neither page, a change without
//! the CSRF token or from a foreign origin is refused, a bad cap is refused naming
//! its key.
//!
//! With `BRMCP_UI_SCREENSHOTS=DIR`, the test leaves `bridge-ui.png` and
//! `serve-ui.png` there.

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

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
    use brmcp::bridge::{DAY_SECS, SpendLog};
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
                .reserve_as(at, agent, None, &bot, "fortune", atoms, u64::MAX, 0)
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

/// The single line a `ui` command prints.
fn login_url(args: &[&str]) -> String {
    let out = brmcp(args).output().expect("ui command");
    assert!(out.status.success(), "{args:?}: {out:?}");
    let url = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(url.contains("/ui/login#"), "{url}");
    url
}

fn save(name: &str, png: &[u8]) {
    if let Some(dir) = std::env::var_os("BRMCP_UI_SCREENSHOTS") {
        std::fs::write(std::path::Path::new(&dir).join(name), png).expect("screenshot");
    }
}

/// Plain HTTP against the pages: who gets in, and which changes are refused.
async fn refusals(bridge: &str, serve: &str, secret: &str, agent_token: &str) {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    for base in [bridge, serve] {
        for path in ["/ui/", "/ui/api/state", "/ui/page.js"] {
            let r = http
                .get(format!("http://{base}{path}"))
                .bearer_auth(agent_token)
                .send()
                .await
                .expect("get");
            assert_eq!(r.status(), 403, "{base}{path} with an agent token");
            let r = http
                .get(format!("http://{base}{path}"))
                .send()
                .await
                .expect("get");
            assert_eq!(r.status(), 401, "{base}{path} without a login");
        }
        let r = http
            .post(format!("http://{base}/ui/login"))
            .json(&json!({"secret": agent_token}))
            .send()
            .await
            .expect("login");
        assert_eq!(r.status(), 401, "an agent token does not log in at {base}");
    }
    // The bridge's approval secret does not open the operator page.
    let r = http
        .post(format!("http://{serve}/ui/login"))
        .json(&json!({"secret": secret}))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 401);

    let r = http
        .post(format!("http://{bridge}/ui/login"))
        .json(&json!({"secret": secret}))
        .send()
        .await
        .expect("login");
    assert_eq!(r.status(), 200);
    let set = r.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .to_owned();
    for part in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(set.contains(part), "{set}");
    }
    let cookie = set.split(';').next().expect("pair").to_owned();
    let csrf = r.json::<serde_json::Value>().await.expect("json")["csrf"]
        .as_str()
        .expect("csrf")
        .to_owned();
    let state = http
        .get(format!("http://{bridge}/ui/api/state"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("state");
    assert_eq!(state.status(), 200);
    assert_eq!(state.headers()["cache-control"], "no-store");
    let settings = |body: serde_json::Value| {
        http.post(format!("http://{bridge}/ui/api/settings"))
            .header("cookie", &cookie)
            .json(&body)
    };
    let r = settings(json!({"mode": "autopay"}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 403, "no CSRF token");
    let r = settings(json!({"mode": "autopay"}))
        .header("x-brmcp-csrf", "0".repeat(64))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 403, "a wrong CSRF token");
    let r = settings(json!({"mode": "autopay"}))
        .header("x-brmcp-csrf", &csrf)
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 403, "a foreign origin");
    let r = settings(json!({"per_call_cap_atoms": -5}))
        .header("x-brmcp-csrf", &csrf)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400);
    let why = r.text().await.expect("text");
    assert!(why.contains("per_call_cap_atoms"), "{why}");
    let r = settings(json!({"token": "x".repeat(40)}))
        .header("x-brmcp-csrf", &csrf)
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400, "the token is not the page's to change");
    // Still in approval mode: nothing above changed the settings.
    let state: serde_json::Value = http
        .get(format!("http://{bridge}/ui/api/state"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("state")
        .json()
        .await
        .expect("json");
    assert_eq!(state["settings"]["mode"], "approval");
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
    let bridge_url = login_url(&["bridge", "--datadir", &bridge_dir, "ui"]);
    let serve_url = login_url(&["serve", "--datadir", &alice_arg, "ui"]);
    let secret = bridge_url.rsplit_once('#').expect("fragment").1.to_owned();
    refusals(&listen, &ui_listen, &secret, &token).await;

    let browser = Browser::start().await;
    browser.open(&bridge_url).await;
    browser.wait_text("#pending", "No payment is waiting").await;

    assert!(
        !browser.url().await.contains(&secret),
        "the secret left the address bar"
    );

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
    browser.close().await;
    let _ = agent.cancel().await;
    let _ = research.cancel().await;
}
