//! A budget per agent: each agent of `agents` is known by its own token, held to its
//! own caps and bots as well as the global caps, and named in the spend log and the
//! held approvals; the default agent (`token`) keeps working as before.

use std::time::Duration;

use crate::common::{
    Agent, FORTUNE_PRICE, autopay, call, env, eventually, http, http_agent, initialize, text,
};
use brmcp::adapters::mem::uid;
use brmcp::bridge::{AgentEntry, Mode, SETTINGS_FILE};
use serde_json::json;

const DEFAULT_TOKEN: &str = "dddddddddddddddddddddddddddddddd";
const CI_TOKEN: &str = "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";
const CHAT_TOKEN: &str = "c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4c4";
const NARROW_TOKEN: &str = "e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5";

/// A bridge listening with the default token and agents `ci` (one fortune a day),
/// `chat` (three a day) and `narrow` (another bot only), under a global cap of
/// `global_fortunes` fortunes a day, in `mode`.
async fn started(global_fortunes: u64, mode: Mode) -> (crate::common::Env, std::net::SocketAddr) {
    let env = env(move |bot| {
        let mut s = autopay(bot);
        s.mode = mode;
        s.enabled = true;
        s.token = DEFAULT_TOKEN.into();
        s.per_day_cap_atoms = global_fortunes * FORTUNE_PRICE;
        s.agents = vec![
            AgentEntry::new("ci", CI_TOKEN, FORTUNE_PRICE, FORTUNE_PRICE, Vec::new()),
            AgentEntry::new(
                "chat",
                CHAT_TOKEN,
                FORTUNE_PRICE,
                3 * FORTUNE_PRICE,
                vec![bot.to_string()],
            ),
            AgentEntry::new(
                "narrow",
                NARROW_TOKEN,
                FORTUNE_PRICE,
                10 * FORTUNE_PRICE,
                vec![uid(9).to_string()],
            ),
        ];
        s
    })
    .await;
    env.bridge.start().await.expect("start");
    let addr = env.bridge.listen_addr().expect("listening");
    (env, addr)
}

/// Calls `fortune`: `Ok` when it ran, else the bridge's refusal line.
async fn fortune(agent: &Agent) -> Result<(), String> {
    let r = agent.call_tool(call("fortune", json!({}))).await.unwrap();
    if r.is_error == Some(false) {
        Ok(())
    } else {
        Err(text(&r))
    }
}

#[tokio::test]
async fn an_agent_at_its_cap_is_refused_while_another_still_pays() {
    let (env, addr) = started(100, Mode::Autopay).await;
    let bot = env.bot_id.to_string();
    let (ci, chat) = (
        http_agent(addr, &bot, CI_TOKEN).await,
        http_agent(addr, &bot, CHAT_TOKEN).await,
    );
    fortune(&ci).await.expect("ci's first fortune");
    let refused = fortune(&ci).await.unwrap_err();
    assert!(
        refused.ends_with(&format!(
            "payment not made: {FORTUNE_PRICE} atoms would exceed agent \"ci\"'s daily cap \
             ({FORTUNE_PRICE} spent of {FORTUNE_PRICE})"
        )),
        "{refused}"
    );
    for n in 0..3 {
        fortune(&chat)
            .await
            .unwrap_or_else(|e| panic!("chat {n}: {e}"));
    }
    assert!(
        fortune(&chat)
            .await
            .unwrap_err()
            .contains("agent \"chat\"'s daily cap")
    );
    let (entries, _) = env.bridge.spend_log().unwrap();
    let agents: Vec<&str> = entries.iter().map(|e| e.agent.as_str()).collect();
    assert_eq!(agents, ["ci", "chat", "chat", "chat"]);
    assert_eq!(env.payer.count(), 4);
    // The default agent has only the global caps.
    let default = http_agent(addr, &bot, DEFAULT_TOKEN).await;
    fortune(&default).await.expect("default agent pays");
    let last = env.bridge.spend_log().unwrap().0.pop().unwrap();
    assert_eq!(last.agent, "default");
    env.bridge.close().await;
}

#[tokio::test]
async fn the_global_cap_binds_the_sum_of_the_agents() {
    let (env, addr) = started(2, Mode::Autopay).await;
    let bot = env.bot_id.to_string();
    let (ci, chat) = (
        http_agent(addr, &bot, CI_TOKEN).await,
        http_agent(addr, &bot, CHAT_TOKEN).await,
    );
    fortune(&ci).await.expect("ci");
    fortune(&chat).await.expect("chat");
    // chat has room of its own (3 a day), the bridge has none (2 a day).
    let refused = fortune(&chat).await.unwrap_err();
    assert!(
        refused.ends_with(&format!(
            "{FORTUNE_PRICE} atoms would exceed the daily cap ({} spent of {})",
            2 * FORTUNE_PRICE,
            2 * FORTUNE_PRICE
        )),
        "{refused}"
    );
    assert_eq!(env.payer.count(), 2);
    env.bridge.close().await;
}

#[tokio::test]
async fn a_bot_outside_an_agents_list_is_refused_for_that_agent_only() {
    let (env, addr) = started(100, Mode::Autopay).await;
    let bot = env.bot_id.to_string();
    let (status, session) = initialize(addr, &bot, NARROW_TOKEN).await;
    assert_eq!(status, 403);
    assert!(session.is_none());
    let (_, _, body) = http(
        addr,
        "POST",
        &format!("/mcp/{bot}"),
        &[
            ("Authorization", &format!("Bearer {NARROW_TOKEN}")),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        crate::common::INITIALIZE,
    )
    .await;
    assert!(
        body.contains("is not one of agent \\\"narrow\\\"'s bots"),
        "{body}"
    );
    let (status, _) = initialize(addr, &bot, CI_TOKEN).await;
    assert_eq!(status, 200, "another agent still reaches it");
    assert_eq!(env.payer.count(), 0);
    env.bridge.close().await;
}

#[tokio::test]
async fn held_approvals_name_the_agent_and_a_removed_agent_is_refused_live() {
    let (env, addr) = started(100, Mode::Approval).await;
    let bot = env.bot_id.to_string();
    let chat = http_agent(addr, &bot, CHAT_TOKEN).await;
    let call = tokio::spawn(async move { fortune(&chat).await });
    assert!(
        eventually(Duration::from_secs(20), || !env
            .bridge
            .pending_payments()
            .is_empty())
        .await,
        "the payment waits for approval"
    );
    let held = env.bridge.pending_payments();
    assert_eq!(held[0].agent, "chat");
    assert!(env.bridge.resolve_payment(&held[0].id, true));
    call.await.unwrap().expect("approved fortune");
    assert_eq!(env.bridge.spend_log().unwrap().0[0].agent, "chat");
    // Removing the agent from the file refuses its token at once.
    let mut settings = env.bridge.settings();
    settings.agents.retain(|a| a.name != "chat");
    env.bridge.apply_settings(settings).await.unwrap();
    let (status, _) = initialize(addr, &bot, CHAT_TOKEN).await;
    assert_eq!(status, 401);
    env.bridge.close().await;
}

#[tokio::test]
async fn the_file_keeps_only_the_hash_of_an_agents_token() {
    let (env, _addr) = started(100, Mode::Autopay).await;
    let path = env.dir.path().join(SETTINGS_FILE);
    let mut settings = env.bridge.settings();
    settings.per_call_cap_atoms += 1;
    env.bridge.apply_settings(settings).await.unwrap();
    let written = std::fs::read_to_string(&path).expect("settings written");
    for token in [CI_TOKEN, CHAT_TOKEN, NARROW_TOKEN] {
        assert!(!written.contains(token), "{written}");
    }
    assert!(
        written.contains(&brmcp::bridge::token_hash(CI_TOKEN)),
        "{written}"
    );
    env.bridge.close().await;
}

#[tokio::test]
async fn concurrent_calls_of_one_agent_pay_its_cap_once() {
    let (env, addr) = started(100, Mode::Autopay).await;
    let bot = env.bot_id.to_string();
    let mut agents = Vec::new();
    for _ in 0..5 {
        agents.push(http_agent(addr, &bot, CI_TOKEN).await);
    }
    let calls = agents.iter().map(fortune);
    let outcomes = futures_util::future::join_all(calls).await;
    let paid = outcomes.iter().filter(|o| o.is_ok()).count();
    assert_eq!(paid, 1, "{outcomes:?}");
    assert_eq!(env.payer.count(), 1);
    for refused in outcomes.iter().filter_map(|o| o.as_ref().err()) {
        assert!(refused.contains("agent \"ci\"'s daily cap"), "{refused}");
    }
    env.bridge.close().await;
}

#[tokio::test]
async fn a_running_bridge_follows_agents_added_and_removed_in_the_file() {
    let env = crate::common::env_with(
        |bot| {
            let mut s = autopay(bot);
            s.enabled = true;
            s.token = DEFAULT_TOKEN.into();
            s
        },
        |mut c| {
            c.settings_poll = Duration::from_millis(20);
            c
        },
    )
    .await;
    env.bridge.start().await.unwrap();
    env.bridge.watch_settings();
    let addr = env.bridge.listen_addr().expect("listening");
    let bot = env.bot_id.to_string();
    let path = env.dir.path().join(SETTINGS_FILE);
    let write = |settings: &brmcp::bridge::Settings| {
        std::fs::write(&path, serde_json::to_vec_pretty(settings).unwrap()).unwrap();
    };
    assert_eq!(initialize(addr, &bot, CI_TOKEN).await.0, 401);
    let mut settings = env.bridge.settings();
    settings.agents = vec![AgentEntry::new("ci", CI_TOKEN, 1, 1, Vec::new())];
    write(&settings);
    let limit = Duration::from_secs(20);
    assert!(eventually(limit, || env.bridge.settings().agent("ci").is_some()).await);
    let (status, session) = initialize(addr, &bot, CI_TOKEN).await;
    assert_eq!(status, 200);
    settings.agents.clear();
    write(&settings);
    assert!(eventually(limit, || env.bridge.settings().agents.is_empty()).await);
    assert_eq!(initialize(addr, &bot, CI_TOKEN).await.0, 401);
    let (status, _, _) = crate::common::post_on_session(
        addr,
        &bot,
        CI_TOKEN,
        &session.expect("a session"),
        r#"{"jsonrpc":"2.0","id":2,"method":"ping"}"#,
    )
    .await;
    assert_eq!(status, 401, "a removed agent's open session is refused too");
    assert_eq!(initialize(addr, &bot, DEFAULT_TOKEN).await.0, 200);
    env.bridge.close().await;
}
