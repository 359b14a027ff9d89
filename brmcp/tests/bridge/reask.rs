//! A paid call the bot is heard for but has not answered is asked again under its call
//! key: an answer the bot lost reaches the agent long before the request timeout, paid
//! and run once; a bot still running the call has the duplicate wait, and the call
//! runs once; a refusal that says to ask again, or go-sdk's empty success, is not taken
//! for the answer; a bot that is not heard is given up on at the answer bound, and a
//! free tool's call is sent once, never asked again.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use brmcp::adapters::RouterConfig;
use brmcp::adapters::protocol::DUPLICATE_IN_PROGRESS;
use brmcp::bridge::{Config, MAX_REASKS};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use crate::common::harness_bot::harness_env_with;
use crate::common::{Env, FORTUNE_PRICE, agent, autopay, call, connect, env_full, text};

/// A silence probe, an answer bound and a re-ask pause short enough for a test.
const PROBE: Duration = Duration::from_millis(200);
const BOUND: Duration = Duration::from_secs(1);
const REASK: Duration = Duration::from_millis(300);

/// How long a call may take here: far less than the router's request timeout (10
/// minutes), which alone ends the wait for a lost answer without re-asks.
const PROMPT: Duration = Duration::from_secs(30);

/// How long a slow fortune takes: past the answer bound and a re-ask or two.
const SLOW_MS: u64 = 2_500;

fn quick(mut config: Config) -> Config {
    config.answer_bound = BOUND;
    config.reask_after = REASK;
    config
}

fn router() -> RouterConfig {
    let mut router = RouterConfig::client();
    router.silence_probe = Some(PROBE);
    router
}

async fn quick_env() -> Env {
    env_full(autopay, quick, router()).await
}

/// The fortune call through `env`'s bridge, within [`PROMPT`].
async fn fortune(env: &Env) -> CallToolResult {
    let agent = agent(env).await;
    let answer = tokio::time::timeout(PROMPT, agent.call_tool(call("fortune", json!({}))))
        .await
        .expect("answered long before the request timeout")
        .expect("fortune");
    agent.cancel().await.unwrap();
    answer
}

/// Paid once, charged once, run once, and every send under one key.
fn once(env: &Env) -> Vec<Option<String>> {
    let keys = env.bot.calls_of("fortune");
    assert!(
        keys.iter().all(|k| k.is_some() && *k == keys[0]),
        "{keys:?}"
    );
    assert_eq!(env.bot.executions("fortune"), 1, "ran once");
    assert_eq!(env.payer.count(), 1, "paid once");
    assert_eq!(env.bot.balance(&env.bridge_id), 0, "charged once");
    assert_eq!(env.bridge.spend_log().unwrap().1, FORTUNE_PRICE);
    keys
}

#[tokio::test]
async fn an_answer_the_bot_lost_is_asked_for_again_under_its_key() {
    let env = quick_env().await;
    // The paid attempt runs, then its answer is lost; the bot stays on the session.
    env.bot.lose_replies.store(1, SeqCst);
    let answer = fortune(&env).await;
    assert_eq!(text(&answer), "fortune #1");
    let keys = once(&env);
    assert_eq!(keys.len(), 3, "refused, lost, asked again: {keys:?}");
}

#[tokio::test]
async fn a_call_still_running_when_asked_again_runs_once() {
    let env = quick_env().await;
    env.bot.fortune_ms.store(SLOW_MS, SeqCst);
    let answer = fortune(&env).await;
    assert_eq!(text(&answer), "fortune #1");
    let keys = once(&env);
    // Refused for payment, sent paid, then asked again while it ran.
    let sends = keys.len() - 2;
    assert!(
        (1..=MAX_REASKS as usize).contains(&sends),
        "asked again {sends} times: {keys:?}"
    );
}

#[tokio::test]
async fn an_answer_that_is_no_outcome_is_not_taken_for_the_call() {
    let stand_ins = [
        CallToolResult::error(vec![ContentBlock::text(DUPLICATE_IN_PROGRESS)]),
        // go-sdk's answer to a duplicate that waited for a released key.
        CallToolResult::success(vec![]),
    ];
    for stand_in in stand_ins {
        let env = quick_env().await;
        env.bot.fortune_ms.store(SLOW_MS, SeqCst);
        *env.bot.duplicate_answer.lock().unwrap() = Some(stand_in.clone());
        let answer = fortune(&env).await;
        assert_eq!(text(&answer), "fortune #1", "{stand_in:?}");
        assert_ne!(answer.is_error, Some(true));
        let keys = once(&env);
        assert!(keys.len() > 2, "asked again: {keys:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_serving_harness_has_a_call_asked_again_wait_for_its_original() {
    let env = harness_env_with(autopay, quick, router()).await;
    env.bot.probe.fortune_ms.store(SLOW_MS, SeqCst);
    let agent = connect(&env.bridge, env.bot_id, ()).await;
    let answer = tokio::time::timeout(PROMPT, agent.call_tool(call("fortune", json!({}))))
        .await
        .expect("answered")
        .expect("fortune");
    assert_eq!(text(&answer), "fortune #1");
    assert_eq!(env.bot.probe.fortunes.load(SeqCst), 1, "ran once");
    let waited = env.bot.harness.stats().waited;
    assert!(
        (1..=u64::from(MAX_REASKS)).contains(&waited),
        "{waited} duplicates waited"
    );
    assert_eq!(env.payments.load(SeqCst), 1, "paid once");
    assert_eq!(
        env.bot.harness.balance_matoms(env.bridge_id).await.unwrap(),
        0,
        "charged once"
    );
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_bot_that_is_not_heard_is_not_asked_again() {
    let env = quick_env().await;
    let agent = agent(&env).await;
    // The bot goes offline: what is sent to it is stored, and it says nothing.
    env.fabric.set_online(&env.bot_id, false);
    let error = tokio::time::timeout(PROMPT, agent.call_tool(call("fortune", json!({}))))
        .await
        .expect("given up on at the answer bound")
        .expect_err("unanswered");
    assert!(error.to_string().contains("did not answer"), "{error}");
    // Back online, the bot gets what was stored for it: the call, once.
    env.fabric.set_online(&env.bot_id, true);
    tokio::time::sleep(BOUND).await;
    assert_eq!(env.bot.calls_of("fortune").len(), 1, "never asked again");
    assert_eq!(env.payer.count(), 0);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_free_tools_call_is_never_asked_again() {
    let env = quick_env().await;
    let agent = agent(&env).await;
    // `wait` is free and runs until cancelled; the bot is heard on the session all
    // along. A server that lists no price may not keep a key's outcome: a second send
    // could run the tool twice.
    let waited =
        tokio::time::timeout(BOUND + REASK * 8, agent.call_tool(call("wait", json!({})))).await;
    assert!(waited.is_err(), "still running: {waited:?}");
    assert_eq!(env.bot.calls_of("wait").len(), 1, "sent once");
    agent.cancel().await.unwrap();
}
