//! Through the bridge an agent sees the bot's tools verbatim, calls a free tool, and
//! calls a paid tool end to end in autopay mode: payment_required, payer, credit,
//! reissue with the same call key, result; the bot runs it once and is paid once.

use crate::common::{FORTUNE_PRICE, agent, autopay, call, env, fixed_tools, text};
use brmcp::bridge::SpendStatus;
use serde_json::json;

#[tokio::test]
async fn tools_are_listed_verbatim() {
    let env = env(autopay).await;
    env.bridge
        .connect(&env.bot_id)
        .await
        .expect("the bot answers");
    assert!(matches!(
        env.bridge.connect(&brmcp::adapters::mem::uid(9)).await,
        Err(brmcp::bridge::BridgeError::NotAllowed(_))
    ));
    let agent = agent(&env).await;
    let tools = agent.list_all_tools().await.expect("list");
    assert_eq!(
        serde_json::to_value(&tools).unwrap(),
        serde_json::to_value(fixed_tools()).unwrap()
    );
    let info = agent.peer_info().expect("server info");
    assert_eq!(info.instructions.as_deref(), Some("a test bot"));
    assert!(info.capabilities.tools.is_some());
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn free_tool_result_is_exact_and_each_call_gets_a_fresh_key() {
    let env = env(autopay).await;
    let agent = agent(&env).await;
    for word in ["one", "two"] {
        let result = agent
            .call_tool(call("echo", json!({"text": word})))
            .await
            .expect("call");
        assert_eq!(text(&result), word);
        assert_eq!(result.structured_content, Some(json!({"echo": word})));
        assert_eq!(result.is_error, Some(false));
    }
    let failed = agent
        .call_tool(call("fail", json!({})))
        .await
        .expect("call");
    assert_eq!(failed.is_error, Some(true));
    assert_eq!(text(&failed), "boom");
    let keys = env.bot.calls_of("echo");
    assert_eq!(keys.len(), 2);
    let (a, b) = (keys[0].clone().unwrap(), keys[1].clone().unwrap());
    assert_ne!(a, b, "a fresh key per call");
    for key in [a, b] {
        assert_eq!(key.len(), 32);
        assert!(key.bytes().all(|c| c.is_ascii_hexdigit()));
    }
    assert_eq!(env.payer.count(), 0, "free tools never reach the payer");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn paid_call_pays_once_and_runs_once() {
    let env = env(autopay).await;
    let agent = agent(&env).await;
    let result = agent
        .call_tool(call("fortune", json!({})))
        .await
        .expect("call");
    assert_eq!(text(&result), "fortune #1");
    assert_eq!(result.is_error, Some(false));
    // payment_required, then the reissue with the same key.
    let keys = env.bot.calls_of("fortune");
    assert_eq!(keys.len(), 2);
    assert!(keys[0].is_some());
    assert_eq!(keys[0], keys[1]);
    assert_eq!(env.bot.executions("fortune"), 1);
    assert_eq!(
        *env.payer.payments.lock().unwrap(),
        vec![(env.bot_id, FORTUNE_PRICE)]
    );
    assert_eq!(env.bot.balance(&env.bridge_id), 0);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(today, FORTUNE_PRICE);
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry.bot, env.bot_id.to_string());
    assert_eq!(entry.tool, "fortune");
    assert_eq!(entry.rail, "tip");
    assert_eq!(entry.atoms, FORTUNE_PRICE);
    assert_eq!(entry.status, SpendStatus::Paid);
    assert_eq!(entry.err, None);
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn agent_meta_reaches_the_bot_without_protocol_fields() {
    let env = env(autopay).await;
    let agent = agent(&env).await;
    let mut params = call("echo", json!({"text": "m"}));
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.insert("x-demo".into(), json!("from the agent"));
    meta.insert("brmcp/callKey".into(), json!("agent-chosen-key"));
    params.meta = Some(meta);
    agent.call_tool(params).await.expect("call");
    let metas = env.bot.metas.lock().unwrap().clone();
    let meta = metas.last().expect("a call");
    assert_eq!(meta.get("x-demo"), Some(&json!("from the agent")));
    let key = meta["brmcp/callKey"].as_str().unwrap();
    assert_ne!(key, "agent-chosen-key", "the bridge picks the key");
    assert!(
        meta.keys()
            .all(|k| !k.starts_with("io.modelcontextprotocol/"))
    );
    agent.cancel().await.unwrap();
}
