//! A paid call cut by the bridge's stop is resumed by the next run under its key and
//! never paid again: when the bot still asks payment for it (the credit never reached
//! it), the agent's retry gets a tool error saying what was paid and that nothing was
//! paid again, and the payer paid once; when the bot has the credit, the retry gets the
//! result, run once, and the resumed call collected its credit (none is left to hold
//! other agents back). A call cut while it waits for its payment's late outcome (the
//! payer lost sight of the tip) is settled by that outcome in the next run, and the
//! retry gets the result on the credit it bought, paid once. A call stopped while its
//! payment waited for the user's approval was never paid: the next run does not take
//! an earlier payment of the same agent, tool and price for it, and pays for it once.
//! A resumed call answered something that is no outcome (a refusal that says to ask
//! again) is asked again, and the retry gets the call's own result.

use std::time::Duration;

use crate::common::{
    FORTUNE_PRICE, PayMode, PayerState, Stage, TestPayer, autopay, base_config, call, connect,
    eventually, last_text, serve_test_bot,
};
use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::protocol::DUPLICATE_IN_PROGRESS;
use brmcp::bridge::{Bridge, Mode, Resolution, SpendStatus, TipOutcomeEvent};
use rmcp::ServiceError;
use serde_json::json;

/// Runs the first bridge until it paid for a `fortune` call and waits on the credit,
/// then stops it; starts the second on the same data directory and returns the
/// agent's retry of the same call.
async fn paid_then_stopped(
    credit_after_stop: bool,
) -> (
    Result<rmcp::model::CallToolResult, ServiceError>,
    std::sync::Arc<PayerState>,
    std::sync::Arc<crate::common::BotState>,
    Bridge,
) {
    // The tip "succeeds" but its credit never reaches the bot: the call waits on it.
    let stage = Stage::new(11, PayMode::NeverCredit);
    let (bot_id, bridge_id) = (stage.bot_id, stage.bridge_id);
    let (bot, payer) = (&stage.bot, &stage.payer);
    let first = stage.waiting_on_credit(autopay(bot_id)).await;
    let agent = connect(&first, bot_id, ()).await;
    let peer = agent.peer().clone();
    let cut = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    assert!(
        eventually(Duration::from_secs(10), || payer.count() == 1).await,
        "paid"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!cut.is_finished(), "still waiting on the credit");
    first.close().await;
    cut.abort();
    drop(agent);
    drop(first);
    if credit_after_stop {
        // The tip's credit reaches the bot after the bridge stopped.
        bot.credit(bridge_id, FORTUNE_PRICE);
    }

    let second = stage.restarted().await;
    let agent = connect(&second, bot_id, ()).await;
    let retry = tokio::time::timeout(
        Duration::from_secs(30),
        agent.call_tool(call("fortune", json!({}))),
    )
    .await
    .expect("an answer");
    (retry, payer.clone(), bot.clone(), second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_the_bot_asks_payment_for_again_is_not_paid_again_after_a_restart() {
    let (retry, payer, bot, _bridge) = paid_then_stopped(false).await;
    let result = retry.expect("a tool error saying what was paid");
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let message = last_text(&result);
    assert!(
        message.contains("not paid again")
            && message.contains(&format!("paid {FORTUNE_PRICE} atoms"))
            && message.contains("spend log row")
            && message.contains("credit stays with the bot"),
        "{message}"
    );
    assert_eq!(payer.count(), 1, "paid once");
    assert_eq!(bot.executions("fortune"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_whose_credit_arrives_after_the_stop_runs_once_for_the_retry() {
    let (retry, payer, bot, bridge) = paid_then_stopped(true).await;
    let result = retry.expect("the result");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(payer.count(), 1, "paid once");
    assert_eq!(bot.executions("fortune"), 1, "run once");
    let (uncollected, uses) = bridge.credit_log().unwrap();
    assert!(uncollected.is_empty(), "collected: {uncollected:?}");
    assert!(uses.is_empty(), "{uses:?}");
    // Under the key the first run gave it: the call resumed, not a new one.
    let keys = bot.calls_of("fortune");
    assert!(keys.len() >= 3, "paid, waited, resumed: {keys:?}");
    assert!(
        keys[0].is_some() && keys.iter().all(|k| *k == keys[0]),
        "{keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_racing_under_one_own_key_make_one_call_paid_once() {
    let fabric = Fabric::new(13);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let (_bot_router, bot) = serve_test_bot(&fabric, bot_id);
    let dir = tempfile::tempdir().expect("tempdir");
    // A slow tip: the first request is still paying when the others arrive.
    let payer = PayerState::new(
        bot.clone(),
        bridge_id,
        PayMode::Slow(Duration::from_millis(300)),
    );
    let bridge = Bridge::new(
        base_config(dir.path()),
        fabric.router(bridge_id, RouterConfig::client()),
        TestPayer(payer.clone()),
    )
    .expect("bridge");
    bridge
        .apply_settings(autopay(bot_id))
        .await
        .expect("settings");
    let agent = connect(&bridge, bot_id, ()).await;
    let keyed = || {
        let mut params = call("fortune", json!({}));
        let mut meta = rmcp::model::RequestMetaObject::new();
        meta.insert("brmcp/callKey".into(), json!("invoice-7-attempt"));
        params.meta = Some(meta);
        params
    };
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let peer = agent.peer().clone();
            let params = keyed();
            tokio::spawn(async move { peer.call_tool(params).await })
        })
        .collect();
    let mut results = Vec::new();
    for call in calls {
        let result = call.await.expect("joined").expect("the call's result");
        assert_ne!(result.is_error, Some(true), "{result:?}");
        results.push(serde_json::to_value(&result).expect("json"));
    }
    assert!(results.iter().all(|r| *r == results[0]), "{results:?}");
    assert_eq!(payer.count(), 1, "paid once");
    assert_eq!(bot.executions("fortune"), 1, "run once");
}

/// Runs the first bridge until an agent's `fortune` call paid and waits for its tip's
/// late outcome, then stops it.
async fn cut_while_waiting(stage: &Stage) {
    let first = stage.waiting_on_credit(autopay(stage.bot_id)).await;
    let agent = connect(&first, stage.bot_id, ()).await;
    let peer = agent.peer().clone();
    let cut = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    assert!(
        eventually(Duration::from_secs(10), || stage.payer.count() == 1).await,
        "paid"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!cut.is_finished(), "still waiting on the late outcome");
    first.close().await;
    cut.abort();
}

/// The bridge stops while a call waits for its tip's late outcome; the outcome reaches
/// the next run before the agent's retry, or after it (the retry runs on the credit the
/// bot already has, and the outcome then settles the row).
async fn late_outcome_after_stop(outcome_before_retry: bool) {
    // The tip reaches the bot as the payer loses sight of it.
    let stage = Stage::new(17, PayMode::CreditUnconfirmed);
    let (bot_id, bot, payer) = (stage.bot_id, &stage.bot, &stage.payer);
    cut_while_waiting(&stage).await;
    assert_eq!(bot.executions("fortune"), 0);

    let second = stage.restarted().await;
    let (entries, _) = second.spend_log().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].status, SpendStatus::Pending, "not yet known");
    let settle = |second: &Bridge| {
        // The host redelivers the outcome once the bridge is back.
        second
            .resolve_spend(&TipOutcomeEvent {
                id: 1,
                bot: bot_id,
                atoms: FORTUNE_PRICE,
                outcome: Ok(()),
            })
            .unwrap()
    };
    if outcome_before_retry {
        assert!(matches!(settle(&second), Resolution::Settled(_)));
    }
    let agent = connect(&second, bot_id, ()).await;
    let retry = async {
        tokio::time::timeout(
            Duration::from_secs(30),
            agent.call_tool(call("fortune", json!({}))),
        )
        .await
        .expect("an answer")
    };
    let later = async {
        if !outcome_before_retry {
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(matches!(settle(&second), Resolution::Settled(_)));
        }
    };
    let (retry, ()) = tokio::join!(retry, later);
    let result = retry.expect("the result");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(payer.count(), 1, "paid once");
    assert_eq!(bot.executions("fortune"), 1, "run once");
    let (entries, _) = second.spend_log().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].status, SpendStatus::Paid);
    let (uncollected, _) = second.credit_log().unwrap();
    assert!(uncollected.is_empty(), "collected: {uncollected:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_while_its_tip_outcome_was_unknown_runs_once_on_the_late_outcome() {
    late_outcome_after_stop(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_before_the_late_outcome_runs_on_the_bots_credit_and_is_not_paid_again() {
    late_outcome_after_stop(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_call_whose_tip_failed_late_is_paid_anew_only_once_the_failure_is_known() {
    // The payer loses sight of a tip that never lands.
    let stage = Stage::new(19, PayMode::Unconfirmed);
    let (bot_id, bot, payer) = (stage.bot_id, &stage.bot, &stage.payer);
    cut_while_waiting(&stage).await;

    let second = stage.restarted().await;
    *payer.mode.lock().unwrap() = PayMode::Credit;
    let agent = connect(&second, bot_id, ()).await;
    // While the tip may still land, the retry pays nothing more.
    let retry = agent.call_tool(call("fortune", json!({}))).await;
    let result = retry.expect("a tool error saying what was paid");
    assert_eq!(result.is_error, Some(true), "{result:?}");
    let message = last_text(&result);
    assert!(
        message.contains("not paid again")
            && message.contains("its tip's outcome is not known yet"),
        "{message}"
    );
    assert_eq!(
        payer.count(),
        1,
        "not paid again while the outcome is unknown"
    );
    // The host learns the tip failed: the budget is free, and the next retry pays.
    let failed = second
        .resolve_spend(&TipOutcomeEvent {
            id: 1,
            bot: bot_id,
            atoms: FORTUNE_PRICE,
            outcome: Err("route expired"),
        })
        .unwrap();
    assert!(matches!(failed, Resolution::Settled(_)));
    let result = agent
        .call_tool(call("fortune", json!({})))
        .await
        .expect("the result");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert_eq!(payer.count(), 2, "paid anew once the first tip failed");
    assert_eq!(bot.executions("fortune"), 1, "run once");
    let (entries, _) = second.spend_log().unwrap();
    let statuses: Vec<_> = entries.iter().map(|e| e.status).collect();
    assert!(
        statuses.contains(&SpendStatus::Failed) && statuses.contains(&SpendStatus::Paid),
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_stopped_before_its_payment_was_made_is_paid_once_after_a_restart() {
    let stage = Stage::new(17, PayMode::Credit);
    let mut settings = autopay(stage.bot_id);
    settings.mode = Mode::Approval;
    settings.approval_timeout_secs = 600;
    let first = stage.waiting_on_credit(settings).await;
    let mut parked = first.subscribe_payments();
    let agent = connect(&first, stage.bot_id, ()).await;

    // A call of the agent, paid and answered: a payment of the same agent, bot, tool
    // and atoms as the next one's.
    let peer = agent.peer().clone();
    let earlier =
        tokio::spawn(async move { peer.call_tool(call("fortune", json!({"n": 1}))).await });
    let approval = parked.recv().await.unwrap();
    assert!(first.resolve_payment(&approval.id, true));
    let earlier = earlier.await.unwrap().unwrap();
    assert_ne!(earlier.is_error, Some(true), "{earlier:?}");

    // The next call's payment waits for the user's approval, and the bridge stops:
    // its journal says it was about to pay; no payment was made.
    let peer = agent.peer().clone();
    let cut = tokio::spawn(async move { peer.call_tool(call("fortune", json!({"n": 2}))).await });
    let _waiting = parked.recv().await.unwrap();
    first.close().await;
    cut.abort();
    drop(agent);
    drop(first);
    assert_eq!(stage.payer.count(), 1);

    // The next run resumes it as a call never paid for; the agent's retry pays for it
    // once the user approves, and gets its result.
    let second = stage.restarted().await;
    let mut parked = second.subscribe_payments();
    let agent = connect(&second, stage.bot_id, ()).await;
    let peer = agent.peer().clone();
    let retry = tokio::spawn(async move { peer.call_tool(call("fortune", json!({"n": 2}))).await });
    let approval = tokio::time::timeout(Duration::from_secs(30), parked.recv())
        .await
        .expect("the retry asks its payment's approval")
        .unwrap();
    assert!(second.resolve_payment(&approval.id, true));
    let retry = tokio::time::timeout(Duration::from_secs(30), retry)
        .await
        .expect("an answer")
        .unwrap()
        .expect("the result");
    assert_ne!(retry.is_error, Some(true), "{retry:?}");
    assert_eq!(stage.payer.count(), 2, "each call paid once");
    assert_eq!(stage.bot.executions("fortune"), 2, "each call run once");
    let (uncollected, uses) = second.credit_log().unwrap();
    assert!(uncollected.is_empty(), "{uncollected:?}");
    assert!(uses.is_empty(), "{uses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_call_answered_no_outcome_is_asked_again_and_its_retry_gets_the_result() {
    let stage = Stage::new(19, PayMode::Credit);
    // A fortune that is still being told when the bridge stops and starts again.
    stage
        .bot
        .fortune_ms
        .store(3_000, std::sync::atomic::Ordering::SeqCst);
    let first = stage.waiting_on_credit(autopay(stage.bot_id)).await;
    let agent = connect(&first, stage.bot_id, ()).await;
    let peer = agent.peer().clone();
    let cut = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    assert!(
        eventually(Duration::from_secs(10), || stage.bot.executions("fortune")
            == 1)
        .await,
        "running"
    );
    first.close().await;
    cut.abort();
    // The bot answers a duplicate of the running call at once with a refusal that
    // says to ask again, as a harness that cannot wait for the original does.
    *stage.bot.duplicate_answer.lock().unwrap() = Some(rmcp::model::CallToolResult::error(vec![
        rmcp::model::ContentBlock::text(DUPLICATE_IN_PROGRESS),
    ]));
    let second = stage.restarted().await;
    let agent = connect(&second, stage.bot_id, ()).await;
    let retry = tokio::time::timeout(
        Duration::from_secs(30),
        agent.call_tool(call("fortune", json!({}))),
    )
    .await
    .expect("an answer")
    .expect("the result");
    assert_eq!(crate::common::text(&retry), "fortune #1", "{retry:?}");
    assert_eq!(stage.payer.count(), 1, "paid once");
    assert_eq!(stage.bot.executions("fortune"), 1, "run once");
}
