//! A bridge that stops while a link to a bot is parked, or while a call that revived
//! the link is still at the bot, loses nothing: the next run goes on with the saved
//! session under a later epoch (no second `initialize`, no second session at the bot),
//! the revived service's late answers are never taken for one of the next run's calls,
//! and a paid call that revived the link is resumed under its key, paid once and run
//! once. A stop here is the process's end: nothing reaches the bot, and the next run
//! has only what the data directory holds.

use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use brmcp::bridge::Bridge;
use serde_json::json;

use crate::common::{
    FORTUNE_PRICE, PayMode, Stage, autopay, autopay_bridge, base_config, call, connect, eventually,
};
use crate::link_parking::{Setup, ask, idle, parking, saved, setup};

/// The next run of the bridge on `s`'s data directory, its links parking as the first
/// run's did.
async fn next_run(s: &Setup) -> Bridge {
    let router = s.fabric.router(s.bridge_id, parking());
    autopay_bridge(router, s.dir.path(), s.bridge_id, s.bot_id, PayMode::Fail).await
}

#[tokio::test(start_paused = true)]
async fn a_bridge_stopped_while_its_link_is_parked_goes_on_with_the_session() {
    let s = setup(71).await;
    let agent = connect(&s.bridge, s.bot_id, ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "one"})).await, "one");
    idle().await;
    assert_eq!(s.bridge.router().stats().client_parked, 1);
    let (sid, parked_epoch) = saved(s.dir.path(), s.bot_id);
    let _ = agent.cancel().await;
    s.bridge.close().await;

    let bridge = next_run(&s).await;
    let agent = connect(&bridge, s.bot_id, ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "two"})).await, "two");
    let (again, resumed_epoch) = saved(s.dir.path(), s.bot_id);
    assert_eq!(again, sid, "the same sid");
    assert!(
        resumed_epoch > parked_epoch,
        "the next run's ids are a later epoch's: {resumed_epoch} after {parked_epoch}"
    );

    // The resumed link parks and revives in turn, still on the one session.
    idle().await;
    assert_eq!(bridge.router().stats().client_parked, 1);
    assert_eq!(ask(&agent, "echo", json!({"text": "three"})).await, "three");
    assert_eq!(bridge.router().stats().client_revived, 1);
    let (again, revived_epoch) = saved(s.dir.path(), s.bot_id);
    assert_eq!(again, sid, "the same sid");
    assert!(revived_epoch > resumed_epoch, "{revived_epoch}");

    assert_eq!(s.bot.0.initialized.load(SeqCst), 1, "one initialize");
    let stats = s.bot_router.stats();
    assert_eq!(stats.sessions_accepted, 1, "one session: {stats:?}");
    assert_eq!(stats.sessions_open, 1, "{stats:?}");
    let _ = agent.cancel().await;
    bridge.close().await;
}

/// Calls the first run has at the bot when it stops: more than the next run makes, so
/// that the ids of the next run's calls are among theirs.
const RUN_1_CALLS: usize = 8;

#[tokio::test(start_paused = true)]
async fn answers_to_calls_that_revived_the_link_are_not_taken_by_the_next_run() {
    let s = setup(72).await;
    let agent = connect(&s.bridge, s.bot_id, ()).await;
    assert_eq!(ask(&agent, "echo", json!({"text": "one"})).await, "one");
    idle().await;
    assert_eq!(s.bridge.router().stats().client_parked, 1);

    // Slow calls revive the link, numbered from the start of the revival's range as
    // the next run's will be from the start of its own; the bridge stops while the bot
    // is at them.
    let cut: Vec<_> = (0..RUN_1_CALLS)
        .map(|i| {
            let peer = agent.peer().clone();
            tokio::spawn(async move {
                let said = format!("run 1 call {i}");
                peer.call_tool(call("slow", json!({"secs": 10, "text": said})))
                    .await
            })
        })
        .collect();
    assert!(
        eventually(Duration::from_secs(5), || s
            .bridge
            .router()
            .stats()
            .client_revived
            == 1)
        .await,
        "revived"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.bridge.close().await;
    cut.iter().for_each(tokio::task::JoinHandle::abort);
    drop(agent);

    // The next run has calls outstanding when the revived service's answer lands.
    let bridge = next_run(&s).await;
    let agent = Arc::new(connect(&bridge, s.bot_id, ()).await);
    let calls: Vec<_> = (0..6)
        .map(|i| {
            let agent = agent.clone();
            tokio::spawn(async move {
                let said = format!("run 2 call {i}");
                let got = ask(&agent, "slow", json!({"secs": 20, "text": said})).await;
                (said, got)
            })
        })
        .collect();
    for call in calls {
        let (said, got) = call.await.expect("call task");
        assert_eq!(got, said, "each call gets its own answer");
    }
    assert_eq!(s.bot.0.initialized.load(SeqCst), 1, "one initialize");
    assert_eq!(s.bot_router.stats().sessions_accepted, 1);
    bridge.close().await;
}

#[tokio::test(start_paused = true)]
async fn a_paid_call_that_revived_the_link_and_was_cut_by_the_stop_is_paid_once() {
    // The tip "succeeds" but its credit reaches the bot only after the stop.
    let stage = Stage::new(73, PayMode::NeverCredit);
    let (bot_id, bridge_id) = (stage.bot_id, stage.bridge_id);
    let mut config = base_config(stage.dir.path());
    config.poll_attempts = 10_000;
    let first = stage.bridge_with(config, parking());
    first
        .apply_settings(autopay(bot_id))
        .await
        .expect("settings");
    first.start().await.expect("start");
    let agent = connect(&first, bot_id, ()).await;
    let free = agent
        .call_tool(call("echo", json!({"text": "free"})))
        .await
        .expect("echo");
    assert_ne!(free.is_error, Some(true), "{free:?}");
    idle().await;
    assert_eq!(first.router().stats().client_parked, 1);

    let peer = agent.peer().clone();
    let cut = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    assert!(
        eventually(Duration::from_secs(10), || stage.payer.count() == 1).await,
        "paid"
    );
    assert!(first.router().stats().client_revived >= 1, "revived");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!cut.is_finished(), "still waiting on the credit");
    first.close().await;
    cut.abort();
    drop(agent);
    stage.bot.credit(bridge_id, FORTUNE_PRICE);

    let second = stage.bridge_with(base_config(stage.dir.path()), parking());
    second.start().await.expect("start");
    let agent = connect(&second, bot_id, ()).await;
    let retry = tokio::time::timeout(
        Duration::from_secs(60),
        agent.call_tool(call("fortune", json!({}))),
    )
    .await
    .expect("an answer")
    .expect("the result");
    assert_ne!(retry.is_error, Some(true), "{retry:?}");
    assert_eq!(stage.payer.count(), 1, "paid once");
    assert_eq!(stage.bot.executions("fortune"), 1, "run once");
    assert_eq!(stage.bot.balance(&bridge_id), 0, "its credit spent on it");
    let keys = stage.bot.calls_of("fortune");
    assert!(
        keys.first().is_some_and(Option::is_some) && keys.iter().all(|k| *k == keys[0]),
        "one key throughout: {keys:?}"
    );
    let _ = agent.cancel().await;
    second.close().await;
}
