//! Fair shares between agents, on the real serving harness at its default rate limit
//! (30 calls a minute per Bison Relay identity, the bridge's, which all its agents
//! share): one agent flooding is refused at the bridge, naming it, while another
//! agent's paid calls all succeed, and the bot never has to refuse one.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::harness_bot::harness_env;
use crate::common::{autopay, call, http_agent, text};
use brmcp::bridge::AgentEntry;
use serde_json::json;

const DEFAULT_TOKEN: &str = "dddddddddddddddddddddddddddddddd";
const FLOOD_TOKEN: &str = "f100df100df100df100df100df100d00";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_agent_flooding_leaves_another_its_paid_calls() {
    let env = harness_env(|bot| {
        let mut s = autopay(bot);
        s.enabled = true;
        s.token = DEFAULT_TOKEN.into();
        s.agents = vec![AgentEntry::new(
            "flood",
            FLOOD_TOKEN,
            1_000_000,
            1_000_000,
            Vec::new(),
        )];
        s
    })
    .await;
    // The bot's limit as served: the harness's default, not the tests' burst rate.
    env.bot.harness.rate_limiter().set_calls_per_minute(30);
    env.bridge.start().await.expect("start");
    let addr = env.bridge.listen_addr().expect("listening");
    let bot = env.bot_id.to_string();

    let flooder = http_agent(addr, &bot, FLOOD_TOKEN).await;
    let started = std::time::Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let flooding = tokio::spawn({
        let stop = stop.clone();
        async move {
            let (mut served, mut refused) = (0usize, Vec::new());
            while !stop.load(Ordering::SeqCst) {
                let r = flooder
                    .call_tool(call("echo", json!({"text": "flood"})))
                    .await
                    .expect("echo");
                if r.is_error == Some(true) {
                    refused.push(text(&r));
                } else {
                    served += 1;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let _ = flooder.cancel().await;
            (served, refused)
        }
    });
    // The flood spends well past the bot's 30 before the other agent starts.
    tokio::time::sleep(Duration::from_secs(2)).await;

    let quiet = http_agent(addr, &bot, DEFAULT_TOKEN).await;
    for n in 0..5 {
        let r = quiet
            .call_tool(call("fortune", json!({})))
            .await
            .expect("fortune");
        assert_ne!(r.is_error, Some(true), "paid call {n}: {}", text(&r));
    }
    stop.store(true, Ordering::SeqCst);
    let (served, refused) = flooding.await.unwrap();
    let _ = quiet.cancel().await;

    assert_eq!(env.payments.load(Ordering::SeqCst), 5, "each fortune paid");
    assert!(
        refused.len() > 30,
        "the flood ran: {served} served, {} refused",
        refused.len()
    );
    // Half of the 27 calls a minute the bridge uses of the bot's 30, as a burst at
    // first and refilled at that rate after.
    let refilled = started.elapsed().as_secs_f64() * 13.5 / 60.0;
    assert!(
        served as f64 <= 13.5 + refilled,
        "{served} served in {:?}",
        started.elapsed()
    );
    let why = &refused[0];
    assert!(why.contains("agent \"flood\" is over its share"), "{why}");
    assert!(why.contains("retry in"), "{why}");
    // The bot refused nothing: every refusal was the bridge's.
    assert_eq!(env.bot.harness.stats().rate_limited, 0);
    env.bridge.close().await;
}
