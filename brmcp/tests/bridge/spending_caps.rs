//! Caps bind in both modes: a per-call cap (0 never pays) and a rolling 24 h daily cap
//! over the spend log. A call the caps refuse is not sent at all when the tool is
//! listed with its price, and is answered `<name>: ... payment not made: <reason>`
//! alone, never with the bot's raw payment_required body; the payer is never called.

use std::time::Duration;

use crate::common::{FORTUNE_PRICE, agent, autopay, call, env_with};
use brmcp::adapters::ManualClock;
use brmcp::bridge::{DAY_SECS, Mode};
use serde_json::json;

#[tokio::test]
async fn per_call_cap_refuses_without_paying() {
    for (mode, cap) in [
        (Mode::Autopay, 0),
        (Mode::Autopay, FORTUNE_PRICE - 1),
        (Mode::Approval, 0),
    ] {
        let env = env_with(
            move |bot| {
                let mut s = autopay(bot);
                s.mode = mode;
                s.per_call_cap_atoms = cap;
                s
            },
            |c| c,
        )
        .await;
        let agent = agent(&env).await;
        let result = agent.call_tool(call("fortune", json!({}))).await.unwrap();
        assert_eq!(result.is_error, Some(true));
        let texts: Vec<_> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        assert_eq!(texts.len(), 1, "{texts:?}");
        assert!(
            texts[0].starts_with("brmcp-bridge: agent \"default\"'s call of bot "),
            "{texts:?}"
        );
        assert!(
            texts[0].ends_with(&format!(
                "tool \"fortune\" not sent, payment not made: {FORTUNE_PRICE} atoms exceeds the per-call cap ({cap})"
            )),
            "{texts:?}"
        );
        assert_eq!(env.payer.count(), 0);
        assert!(env.bot.calls_of("fortune").is_empty(), "never sent");
        assert!(env.bridge.spend_log().unwrap().0.is_empty());
        assert!(
            env.bridge.pending_payments().is_empty(),
            "caps come before approval"
        );
        agent.cancel().await.unwrap();
    }
}

#[tokio::test]
async fn daily_cap_is_a_rolling_window() {
    let clock = ManualClock::at_unix(1_800_000_000);
    let c = clock.clone();
    let env = env_with(
        |bot| {
            let mut s = autopay(bot);
            s.per_day_cap_atoms = 2 * FORTUNE_PRICE;
            s
        },
        move |config| config.with_clock(c),
    )
    .await;
    let agent = agent(&env).await;
    for n in 1..=2 {
        let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
        assert_eq!(r.is_error, Some(false), "call {n}");
    }
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    let last = r
        .content
        .last()
        .and_then(|c| c.as_text())
        .unwrap()
        .text
        .clone();
    assert!(
        last.ends_with(&format!(
            "not sent, payment not made: {FORTUNE_PRICE} atoms would exceed the daily cap ({} spent of {})",
            2 * FORTUNE_PRICE,
            2 * FORTUNE_PRICE
        )),
        "{last}"
    );
    assert_eq!(r.content.len(), 1, "the bridge's words only");
    assert_eq!(env.payer.count(), 2);
    // 24 h after the first payments, the window has room again.
    clock.advance(Duration::from_secs(u64::try_from(DAY_SECS + 1).unwrap()));
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(today, FORTUNE_PRICE);
    assert_eq!(env.bot.executions("fortune"), 3);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_daily_cap_of_zero_never_pays() {
    let env = env_with(
        |bot| {
            let mut s = autopay(bot);
            s.per_day_cap_atoms = 0;
            s
        },
        |c| c,
    )
    .await;
    let agent = agent(&env).await;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(
        r.content
            .last()
            .and_then(|c| c.as_text())
            .unwrap()
            .text
            .ends_with("would exceed the daily cap (0 spent of 0)")
    );
    assert_eq!(env.payer.count(), 0);
    agent.cancel().await.unwrap();
}
