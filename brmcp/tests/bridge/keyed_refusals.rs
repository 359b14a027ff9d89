//! An agent's own `brmcp/callKey` stands for what ran: a call the bridge refused without
//! running it or paying for it (a cap, a tip that failed), or a priced call its bot never
//! answered, keeps no outcome under the key, so the agent's retry with the same key is
//! tried afresh once the cause is gone, and pays and runs once. A refusal of a call whose
//! tip may have gone out (its outcome not known) is kept: its retry gets it again and
//! pays nothing more. A paid call its bot could not be reached for is kept, paid, for the
//! retry under its key, which pays nothing more; a free tool's error is kept, as its bot
//! may be a plain MCP server that would run the call again.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{
    Env, FORTUNE_PRICE, PayMode, PayerState, TestPayer, agent, autopay, base_config, call, connect,
    env, env_with, eventually, last_text,
};
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::protocol::REQUEST_TIMEOUT;
use brmcp::adapters::{PeerId, RouterConfig};
use brmcp::bridge::{Bridge, SETTINGS_FILE, SpendStatus};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;

/// A `fortune` call under the agent's own `key`.
fn keyed(key: &str) -> CallToolRequestParams {
    let mut params = call("fortune", json!({}));
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.insert("brmcp/callKey".into(), key.into());
    params.meta = Some(meta);
    params
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_of_a_call_a_cap_refused_runs_once_the_cap_is_raised() {
    let env = env_with(
        |bot| {
            let mut s = autopay(bot);
            s.per_call_cap_atoms = 0;
            s
        },
        |mut c| {
            c.settings_poll = Duration::from_millis(20);
            c
        },
    )
    .await;
    env.bridge.watch_settings();
    let agent = agent(&env).await;
    let key = "raise-the-cap-0001";
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert_eq!(r.is_error, Some(true));
    assert!(
        last_text(&r).contains("exceeds the per-call cap (0)"),
        "{r:?}"
    );
    // The same key again, the cap unchanged: refused again, for the same reason.
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert!(
        last_text(&r).contains("exceeds the per-call cap (0)"),
        "{r:?}"
    );
    assert_eq!(env.payer.count(), 0);
    assert!(env.bot.calls_of("fortune").is_empty(), "never sent");

    // The user raises the cap, by the settings file.
    let mut raised = env.bridge.settings();
    raised.per_call_cap_atoms = FORTUNE_PRICE * 10;
    std::fs::write(
        env.dir.path().join(SETTINGS_FILE),
        serde_json::to_vec_pretty(&raised).unwrap(),
    )
    .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || env
            .bridge
            .settings()
            .per_call_cap_atoms
            > 0)
        .await,
        "the raised cap was not picked up"
    );
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{:?}", r.content);
    let answer = last_text(&r);
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);

    // What ran is kept under the key: the exact outcome again, nothing run or paid.
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert_eq!(last_text(&r), answer);
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);
    agent.cancel().await.unwrap();
}

/// Calls `fortune` under `key` with the payer in `mode`: refused, nothing run.
async fn refused_by_the_payer(env: &Env, key: &str, mode: PayMode) -> String {
    *env.payer.mode.lock().unwrap() = mode;
    let agent = agent(env).await;
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert_eq!(env.bot.executions("fortune"), 0);
    agent.cancel().await.unwrap();
    last_text(&r)
}

#[tokio::test]
async fn a_keyed_retry_after_a_failed_tip_pays_and_runs_once() {
    let env = env(autopay).await;
    let key = "failed-tip-retry-0001";
    let refusal = refused_by_the_payer(&env, key, PayMode::Fail).await;
    assert!(refusal.contains("payment not made"), "{refusal}");
    let (entries, _) = env.bridge.spend_log().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].status, SpendStatus::Failed);

    // The wallet works again: the retry under the key pays and runs.
    *env.payer.mode.lock().unwrap() = PayMode::Credit;
    let agent = agent(&env).await;
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{:?}", r.content);
    assert_eq!(
        env.payer.count(),
        2,
        "the failed tip, then the one that paid"
    );
    assert_eq!(env.bot.executions("fortune"), 1);
    let (entries, _) = env.bridge.spend_log().unwrap();
    let paid: Vec<_> = entries
        .iter()
        .filter(|e| e.status == SpendStatus::Paid)
        .collect();
    assert_eq!(paid.len(), 1, "{entries:?}");
    agent.cancel().await.unwrap();
}

#[tokio::test]
async fn a_keyed_retry_after_a_tip_of_unknown_outcome_gets_the_refusal_and_pays_nothing() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        // The call waits this long for a late outcome; none comes.
        s.tip_wait_secs = 1;
        s
    })
    .await;
    let key = "unknown-tip-retry-0001";
    let refusal = refused_by_the_payer(&env, key, PayMode::Unconfirmed).await;
    assert!(refusal.contains("it may still complete"), "{refusal}");
    let (entries, _) = env.bridge.spend_log().unwrap();
    assert_eq!(entries[0].status, SpendStatus::Pending);

    // The tip may have reached the bot: the key keeps the refusal, nothing is paid
    // again, even with a payer that would pay.
    *env.payer.mode.lock().unwrap() = PayMode::Credit;
    let agent = agent(&env).await;
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert_eq!(last_text(&r), refusal);
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 0);
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_retry_of_a_priced_call_its_offline_bot_never_answered_runs_once_it_is_back() {
    let env = env_with(autopay, |mut c| {
        c.answer_bound = Duration::from_millis(800);
        c
    })
    .await;
    let agent = agent(&env).await;
    let key = "offline-bot-retry-0001";
    env.fabric.set_online(&env.bot_id, false);
    let e = agent.call_tool(keyed(key)).await.unwrap_err();
    assert!(format!("{e}").contains("never answered"), "{e}");
    assert_eq!(env.payer.count(), 0);

    // Back online: the stored call reaches the bot, which asks for payment (nobody
    // waits for that answer); the retry under the key asks again, pays and runs once.
    env.fabric.set_online(&env.bot_id, true);
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{:?}", r.content);
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.executions("fortune"), 1);
    let keys = env.bot.calls_of("fortune");
    assert!(
        keys.windows(2).all(|w| w[0] == w[1]),
        "every send under the one key: {keys:?}"
    );
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_tool_its_bot_never_answered_keeps_the_error_under_the_key() {
    // A free tool's bot may be a plain MCP server, which would run a call sent again.
    let env = env_with(autopay, |mut c| {
        c.answer_bound = Duration::from_millis(800);
        c
    })
    .await;
    let agent = agent(&env).await;
    let mut params = call("echo", json!({"text": "once"}));
    let mut meta = rmcp::model::RequestMetaObject::default();
    meta.insert("brmcp/callKey".into(), "offline-echo-key-0001".into());
    params.meta = Some(meta);
    env.fabric.set_online(&env.bot_id, false);
    let first = agent.call_tool(params.clone()).await.unwrap_err();
    env.fabric.set_online(&env.bot_id, true);
    assert!(
        eventually(Duration::from_secs(5), || env.bot.executions("echo") == 1).await,
        "the stored call reaches the bot"
    );
    let again = agent.call_tool(params).await.unwrap_err();
    assert_eq!(format!("{again}"), format!("{first}"));
    assert_eq!(env.bot.executions("echo"), 1, "not sent again");
    agent.cancel().await.unwrap();
}

/// A bot that asks for payment, then answers the paid reissues with `REQUEST_TIMEOUT`
/// (the session to it lost, as far as the bridge can tell) `timeouts` times, then runs
/// the call; it keeps no key's outcome, so every run counts.
#[derive(Clone)]
struct UnreachableAfterPaying {
    calls: Arc<Mutex<Vec<Option<String>>>>,
    timeouts: Arc<Mutex<u32>>,
    runs: Arc<Mutex<u32>>,
}

/// The price of [`UnreachableAfterPaying`]'s tool.
const PRICE: u64 = 10;

impl ServerHandler for UnreachableAfterPaying {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(crate::common::priced_listing("fortune", PRICE))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let key = request
            .meta
            .as_ref()
            .and_then(|m| m.get("brmcp/callKey"))
            .and_then(|k| k.as_str())
            .map(str::to_owned);
        let first = {
            let mut calls = self.calls.lock().unwrap();
            calls.push(key);
            calls.len() == 1
        };
        if first {
            let quote = json!({"error": "payment_required", "tool": "fortune",
                "priceAtoms": PRICE, "balanceAtoms": 0, "shortfallAtoms": PRICE,
                "acceptedRails": ["tip"]});
            return Ok(CallToolResult::error(vec![ContentBlock::text(quote.to_string())]).into());
        }
        {
            let mut timeouts = self.timeouts.lock().unwrap();
            if *timeouts > 0 {
                *timeouts -= 1;
                return Err(ErrorData::new(
                    REQUEST_TIMEOUT,
                    "session to the bot lost",
                    None,
                ));
            }
        }
        *self.runs.lock().unwrap() += 1;
        Ok(CallToolResult::success(vec![ContentBlock::text("ran")]).into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paid_call_its_bot_could_not_be_reached_for_is_kept_for_the_retry_under_its_key() {
    let fabric = Fabric::new(29);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let bot = UnreachableAfterPaying {
        calls: Arc::default(),
        timeouts: Arc::new(Mutex::new(2)),
        runs: Arc::default(),
    };
    let bot_router = fabric.router(bot_id, RouterConfig::server());
    let handler = bot.clone();
    bot_router.serve(move |_: &PeerId| handler.clone());
    let payer = PayerState::new(Arc::default(), bridge_id, PayMode::NeverCredit);
    let dir = tempfile::tempdir().unwrap();
    let bridge = Bridge::new(
        base_config(dir.path()),
        fabric.router(bridge_id, RouterConfig::client()),
        TestPayer(payer.clone()),
    )
    .unwrap();
    bridge.apply_settings(autopay(bot_id)).await.unwrap();
    let agent = connect(&bridge, bot_id, ()).await;
    let key = "paid-unreachable-0001";

    let e = agent.call_tool(keyed(key)).await.unwrap_err();
    let said = format!("{e}");
    assert!(said.contains("bot unavailable"), "{said}");
    assert!(
        said.contains(&format!("the call paid {PRICE} atoms and is kept, paid")),
        "{said}"
    );
    assert_eq!(payer.count(), 1);
    assert_eq!(*bot.runs.lock().unwrap(), 0);

    // The retry under the key goes on where the call stands: sent again, not paid again.
    let r = agent.call_tool(keyed(key)).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{:?}", r.content);
    assert_eq!(last_text(&r), "ran");
    assert_eq!(payer.count(), 1, "paid once");
    assert_eq!(*bot.runs.lock().unwrap(), 1);
    let calls = bot.calls.lock().unwrap().clone();
    assert!(
        calls.windows(2).all(|w| w[0] == w[1]),
        "every send under the one key: {calls:?}"
    );
    agent.cancel().await.unwrap();
    drop(bot_router);
}
