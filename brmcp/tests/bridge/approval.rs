//! Approval mode parks each payment for the user's decision (library API) with a
//! timeout: approve completes the call, deny and timeout refuse it with a note; the
//! queue drains; an unknown id is refused; the bot runs and is paid once overall.

use std::time::Duration;

use crate::common::{FORTUNE_PRICE, agent, autopay, call, env, last_text};
use brmcp::bridge::Mode;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_deny_and_timeout() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.mode = Mode::Approval;
        s.approval_timeout_secs = 1;
        s
    })
    .await;
    let agent = agent(&env).await;
    let mut parked = env.bridge.subscribe_payments();

    // Approve.
    let peer = agent.peer().clone();
    let call1 = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    let pending = parked.recv().await.unwrap();
    assert_eq!(pending.bot, env.bot_id);
    assert_eq!(pending.tool, "fortune");
    assert_eq!(pending.atoms, FORTUNE_PRICE);
    assert_eq!(env.bridge.pending_payments(), vec![pending.clone()]);
    assert_eq!(env.payer.count(), 0, "nothing is paid before the decision");
    assert!(env.bridge.resolve_payment(&pending.id, true));
    assert!(
        !env.bridge.resolve_payment(&pending.id, true),
        "decided once"
    );
    let r = call1.await.unwrap().unwrap();
    assert_eq!(r.is_error, Some(false));
    assert!(env.bridge.pending_payments().is_empty());

    // Deny.
    let peer = agent.peer().clone();
    let call2 = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
    let pending = parked.recv().await.unwrap();
    assert!(env.bridge.resolve_payment(&pending.id, false));
    let r = call2.await.unwrap().unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        last_text(&r),
        "brmcp-bridge: payment not made: payment denied by the user"
    );

    // Time out.
    let started = tokio::time::Instant::now();
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(
        last_text(&r),
        "brmcp-bridge: payment not made: approval timed out after 1s"
    );
    assert!(env.bridge.pending_payments().is_empty(), "the queue drains");
    assert!(!env.bridge.resolve_payment("0123456789abcdef", true));

    assert_eq!(env.bot.executions("fortune"), 1);
    assert_eq!(env.payer.count(), 1);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!((entries.len(), today), (1, FORTUNE_PRICE), "{entries:?}");
    agent.cancel().await.unwrap();
}
