//! A paid call whose answer is lost (the bot ran it, the reply never came) is retried
//! once on a fresh session with the same call key: the bot replays the outcome instead
//! of running or charging the call again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::common::{FORTUNE_PRICE, agent, autopay, call, env_full, text};
use brmcp::adapters::RouterConfig;
use serde_json::json;

#[tokio::test]
async fn lost_reply_is_retried_with_the_same_key() {
    let mut router = RouterConfig::client();
    // Long enough for the agent's initialize (the bot's tool list) on a loaded
    // machine; the lost reply is waited for this long before the retry.
    router.request_timeout = Some(Duration::from_secs(3));
    let env = env_full(autopay, |c| c, router).await;
    let agent = agent(&env).await;
    // The paid attempt runs, then its reply is lost (refusals and replays answer
    // before the loss applies).
    env.bot.lose_replies.store(1, Ordering::SeqCst);
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(text(&r), "fortune #1");
    let keys = env.bot.calls_of("fortune");
    assert_eq!(keys.len(), 3, "refused, lost, replayed: {keys:?}");
    assert!(keys.iter().all(|k| k.is_some() && *k == keys[0]));
    assert_eq!(env.bot.executions("fortune"), 1, "ran once");
    assert_eq!(env.payer.count(), 1, "paid once");
    assert_eq!(env.bot.balance(&env.bridge_id), 0, "charged once");
    assert_eq!(env.bridge.spend_log().unwrap().1, FORTUNE_PRICE);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_bot_error_is_not_retried() {
    let env = env_full(autopay, |c| c, RouterConfig::client()).await;
    let agent = agent(&env).await;
    let err = agent
        .call_tool(call("no-such-tool", json!({})))
        .await
        .expect_err("an unknown tool is a JSON-RPC error");
    assert!(err.to_string().contains("unknown tool"), "{err}");
    assert_eq!(env.bot.calls_of("no-such-tool").len(), 1, "sent once");
    agent.cancel().await.unwrap();
}
