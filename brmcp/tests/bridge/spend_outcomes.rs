//! The spend log's outcomes: a payer error is recorded `failed` and not counted; a
//! payment not confirmed within the tip wait, or that the payer reports unconfirmed,
//! stays `pending` and counts; a late tip event resolves it (`resolve_spend`), freeing
//! the budget when it failed. A call whose payer reported its payment unconfirmed
//! waits for that late outcome: paid, the call runs on it; failed, it ends.

use crate::common::{Env, FORTUNE_PRICE, PayMode, agent, autopay, call, env, last_text};
use brmcp::adapters::PeerId;
use brmcp::bridge::{Resolution, SpendStatus, TipOutcomeEvent};
use serde_json::json;

/// A late tip outcome with stream id `id`.
fn late(env: &Env, id: u64, bot: PeerId, atoms: u64, outcome: Result<(), &str>) -> Resolution {
    env.bridge
        .resolve_spend(&TipOutcomeEvent {
            id,
            bot,
            atoms,
            outcome,
        })
        .unwrap()
}

#[tokio::test]
async fn payer_failure_is_not_counted() {
    let env = env(autopay).await;
    *env.payer.mode.lock().unwrap() = PayMode::Fail;
    let agent = agent(&env).await;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        last_text(&r),
        "brmcp-bridge: payment not made: no route to bot"
    );
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(today, 0);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].status, SpendStatus::Failed);
    assert_eq!(entries[0].err.as_deref(), Some("no route to bot"));
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn unconfirmed_payment_stays_pending_until_resolved() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.tip_wait_secs = 1;
        s.per_day_cap_atoms = FORTUNE_PRICE;
        s
    })
    .await;
    *env.payer.mode.lock().unwrap() = PayMode::Hang;
    let agent = agent(&env).await;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(
        last_text(&r),
        "brmcp-bridge: payment not made: tip not confirmed within 1s"
    );
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(entries[0].status, SpendStatus::Pending);
    assert_eq!(today, FORTUNE_PRICE, "a pending payment counts");
    // The budget is taken: the next call is refused by the daily cap.
    *env.payer.mode.lock().unwrap() = PayMode::Credit;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert!(
        last_text(&r).contains("would exceed the daily cap"),
        "{}",
        last_text(&r)
    );
    // The host learns the tip failed: wrong payee and amount do not match.
    let late_fail = |id, bot, atoms| late(&env, id, bot, atoms, Err("route expired"));
    assert_eq!(
        late_fail(1, env.bridge_id, FORTUNE_PRICE),
        Resolution::NotOurs
    );
    assert_eq!(late_fail(2, env.bot_id, 1), Resolution::NotOurs);
    assert!(matches!(
        late_fail(3, env.bot_id, FORTUNE_PRICE),
        Resolution::Settled(_)
    ));
    assert_eq!(
        late(&env, 3, env.bot_id, FORTUNE_PRICE, Ok(())),
        Resolution::Replay,
        "resolved once"
    );
    assert_eq!(
        late(&env, 4, env.bot_id, FORTUNE_PRICE, Ok(())),
        Resolution::NotOurs
    );
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(entries[0].status, SpendStatus::Failed);
    assert_eq!(entries[0].err.as_deref(), Some("route expired"));
    assert_eq!(today, 0);
    // Budget freed: the next call pays.
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    assert_eq!(env.bot.executions("fortune"), 1);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn payer_reported_unconfirmed_stays_pending() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.per_day_cap_atoms = FORTUNE_PRICE;
        // The call waits this long for a late outcome; none comes before it ends.
        s.tip_wait_secs = 1;
        s
    })
    .await;
    *env.payer.mode.lock().unwrap() = PayMode::Unconfirmed;
    let agent = agent(&env).await;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(
        last_text(&r),
        "brmcp-bridge: payment not made: payment not confirmed in time; it may still complete"
    );
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].status, SpendStatus::Pending);
    assert_eq!(today, FORTUNE_PRICE, "it may yet be paid, so it counts");
    // The tip went through after all.
    assert!(matches!(
        late(&env, 1, env.bot_id, FORTUNE_PRICE, Ok(())),
        Resolution::Settled(_)
    ));
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(entries[0].status, SpendStatus::Paid);
    assert_eq!(today, FORTUNE_PRICE);
    assert_eq!(env.bot.executions("fortune"), 0);
    agent.cancel().await.unwrap();
}

/// Sends `outcome` as the late outcome with stream id `id` of a `FORTUNE_PRICE` tip to
/// the bot once the agent's call is waiting on it, after wrong ones that must not
/// settle it.
async fn late_while_waiting(env: &Env, id: u64, outcome: Result<(), &str>) {
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(late(env, id, env.bot_id, 1, outcome), Resolution::NotOurs);
    assert_eq!(
        late(env, id + 1, env.bridge_id, FORTUNE_PRICE, outcome),
        Resolution::NotOurs
    );
    assert!(matches!(
        late(env, id + 2, env.bot_id, FORTUNE_PRICE, outcome),
        Resolution::Settled(_)
    ));
}

#[tokio::test]
async fn unconfirmed_payment_paid_late_runs_its_call_once() {
    let env = env(autopay).await;
    // The tip reaches the bot as the payer loses sight of it.
    *env.payer.mode.lock().unwrap() = PayMode::CreditUnconfirmed;
    let agent = agent(&env).await;
    let (r, ()) = tokio::join!(
        agent.call_tool(call("fortune", json!({}))),
        late_while_waiting(&env, 10, Ok(()))
    );
    let r = r.unwrap();
    assert_eq!(r.is_error, Some(false), "{}", last_text(&r));
    assert_eq!(env.bot.executions("fortune"), 1);
    assert_eq!(env.payer.count(), 1, "paid once");
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].status, SpendStatus::Paid);
    assert_eq!(today, FORTUNE_PRICE);
    // Nothing of it is left at the bot for another call.
    *env.payer.mode.lock().unwrap() = PayMode::Fail;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(
        last_text(&r),
        "brmcp-bridge: payment not made: no route to bot"
    );
    assert_eq!(env.bot.executions("fortune"), 1);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn unconfirmed_payment_failed_late_ends_its_call() {
    let env = env(autopay).await;
    *env.payer.mode.lock().unwrap() = PayMode::Unconfirmed;
    let agent = agent(&env).await;
    let (r, ()) = tokio::join!(
        agent.call_tool(call("fortune", json!({}))),
        late_while_waiting(&env, 10, Err("route expired"))
    );
    let r = r.unwrap();
    assert_eq!(
        last_text(&r),
        "brmcp-bridge: payment not made: tip failed: route expired"
    );
    assert_eq!(env.bot.executions("fortune"), 0);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(entries[0].status, SpendStatus::Failed);
    assert_eq!(today, 0, "a failed tip frees its budget");
    agent.cancel().await.unwrap();
}
