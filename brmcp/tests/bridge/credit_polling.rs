//! After a payment the call is reissued with the same key; while the credit is still in
//! flight the bridge polls a bounded number of times, then ends the call with an error
//! that says what was paid and that the credit stays with the bot (never the bot's
//! raw payment_required body).

use std::time::Duration;

use crate::common::{PayMode, agent, autopay, call, env_with};
use serde_json::json;

#[tokio::test]
async fn late_credit_is_polled_for() {
    let env = env_with(autopay, |mut c| {
        c.poll_interval = Duration::from_millis(100);
        c.poll_attempts = 5;
        c
    })
    .await;
    *env.payer.mode.lock().unwrap() = PayMode::CreditLate(Duration::from_millis(150));
    let agent = agent(&env).await;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(false));
    assert_eq!(env.bot.executions("fortune"), 1);
    assert_eq!(env.payer.count(), 1);
    let keys = env.bot.calls_of("fortune");
    assert!(keys.len() >= 3, "{keys:?}");
    assert!(keys.iter().all(|k| *k == keys[0]), "one key throughout");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn polling_is_bounded() {
    let env = env_with(autopay, |mut c| {
        c.poll_interval = Duration::from_millis(20);
        c.poll_attempts = 3;
        c
    })
    .await;
    *env.payer.mode.lock().unwrap() = PayMode::NeverCredit;
    let agent = agent(&env).await;
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.content.len(), 1, "the bridge's words only");
    let note = &r.content[0].as_text().unwrap().text;
    assert!(!note.contains(r#""error":"payment_required""#), "{note}");
    assert!(
        note.starts_with(&format!(
            "brmcp-bridge: paid {} atoms to bot ",
            crate::common::FORTUNE_PRICE
        )),
        "{note}"
    );
    assert!(
        note.contains("the credit stays with the bot as agent \"default\"'s"),
        "{note}"
    );
    let (left, _) = env.bridge.credit_log().unwrap();
    assert_eq!(
        left.len(),
        1,
        "the payment's credit is recorded uncollected"
    );
    assert_eq!(
        (left[0].agent.as_str(), left[0].atoms),
        ("default", crate::common::FORTUNE_PRICE)
    );
    assert_eq!(env.bot.calls_of("fortune").len(), 1 + 1 + 3);
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 0);
    agent.cancel().await.unwrap();
}

/// A paid call whose credit had not reached the bot when polling ended is kept, paid:
/// once the credit lands, the agent's call of the same tool and arguments takes it up
/// under its key and is answered, paying nothing more; other arguments are a call of
/// their own. The same with the agent's own key.
#[tokio::test]
async fn a_call_left_unanswered_after_paying_is_taken_up_by_its_retry() {
    let env = env_with(autopay, |mut c| {
        c.poll_interval = Duration::from_millis(20);
        c.poll_attempts = 3;
        c
    })
    .await;
    *env.payer.mode.lock().unwrap() = PayMode::NeverCredit;
    let agent = agent(&env).await;
    let own = |key: &str| {
        let mut params = call("fortune", json!({"n": 2}));
        let mut meta = rmcp::model::RequestMetaObject::default();
        meta.insert("brmcp/callKey".into(), key.into());
        params.meta = Some(meta);
        params
    };
    for (first, again) in [
        (
            call("fortune", json!({"n": 1})),
            call("fortune", json!({"n": 1})),
        ),
        (own("own-key-left-0001"), own("own-key-left-0001")),
    ] {
        let paid_before = env.payer.count();
        let r = agent.call_tool(first).await.unwrap();
        let note = &r.content[0].as_text().unwrap().text;
        assert_eq!(r.is_error, Some(true), "{note}");
        assert!(note.contains("the call is kept, paid"), "{note}");
        assert_eq!(env.payer.count(), paid_before + 1);
        let keys = env.bot.calls_of("fortune");
        // The credit lands after the bridge stopped waiting.
        env.bot.credit(env.bridge_id, crate::common::FORTUNE_PRICE);
        let r = agent.call_tool(again).await.unwrap();
        assert_eq!(r.is_error, Some(false), "{:?}", r.content);
        assert_eq!(env.payer.count(), paid_before + 1, "paid nothing more");
        let now = env.bot.calls_of("fortune");
        assert_eq!(now.last(), keys.last(), "under the first call's key");
    }
    assert_eq!(env.bot.executions("fortune"), 2);
    let (left, uses) = env.bridge.credit_log().unwrap();
    assert!(left.is_empty(), "{left:?}");
    assert!(uses.is_empty(), "{uses:?}");
    // Another call, other arguments: paid for itself (and left in its turn).
    let r = agent
        .call_tool(call("fortune", json!({"n": 3})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true));
    assert_eq!(env.payer.count(), 3);
    agent.cancel().await.unwrap();
}
