//! End to end with the real serving harness (`brmcp::server`) behind the fabric: an
//! agent lists the harness's priced tools, calls a free one and a paid one through the
//! bridge in autopay mode; the payer tips the harness (`Harness::record_tip`), the
//! reissue with the same call key runs the tool once, and the harness's ledger shows
//! the one charge.

use std::sync::atomic::Ordering;

use crate::common::harness_bot::harness_env;
use crate::common::{FORTUNE_PRICE, autopay, call, connect, text};
use brmcp::bridge::SpendStatus;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn free_and_paid_calls_through_the_harness() {
    let env = harness_env(autopay).await;
    let agent = connect(&env.bridge, env.bot_id, ()).await;

    let tools = agent.list_all_tools().await.unwrap();
    let meta = |name: &str, key: &str| {
        tools
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.meta.as_ref())
            .and_then(|m| m.get(key).cloned())
    };
    assert_eq!(meta("echo", "brmcp/priceAtoms"), Some(json!(0)));
    assert_eq!(
        meta("fortune", "brmcp/priceAtoms"),
        Some(json!(FORTUNE_PRICE))
    );
    assert_eq!(meta("quote", "brmcp/pricing"), Some(json!("dynamic")));
    assert_eq!(
        agent.peer_info().unwrap().instructions.as_deref(),
        Some("a test bot")
    );

    let echo = agent
        .call_tool(call("echo", json!({"text": "hi"})))
        .await
        .unwrap();
    assert_eq!(echo.is_error, Some(false));
    assert_eq!(text(&echo), "hi");
    assert_eq!(echo.structured_content, Some(json!({"echo": "hi"})));

    let fortune = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(fortune.is_error, Some(false), "{fortune:?}");
    assert_eq!(text(&fortune), "fortune #1");
    assert_eq!(env.bot.probe.fortunes.load(Ordering::SeqCst), 1, "ran once");
    assert_eq!(env.payments.load(Ordering::SeqCst), 1, "paid once");
    assert_eq!(
        env.bot.harness.balance_matoms(env.bridge_id).await.unwrap(),
        0,
        "charged once"
    );
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(today, FORTUNE_PRICE);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].status, SpendStatus::Paid);

    // A dynamically priced call: the harness names the price when it refuses.
    let quote = agent
        .call_tool(call("quote", json!({"n": 7})))
        .await
        .unwrap();
    assert_eq!(text(&quote), "a quote");
    assert_eq!(env.bridge.spend_log().unwrap().1, FORTUNE_PRICE + 7);
    agent.cancel().await.unwrap();
    env.bridge.close().await;
    env.bot.harness.close();
}
