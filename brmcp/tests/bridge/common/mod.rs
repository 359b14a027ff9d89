//! Shared pieces of the bridge tests: a small paid MCP bot (until the serving harness
//! lands), a payer that "tips" it, and the fabric + bot + bridge set-up.
//!
//! The bot follows WIRE.md §10: tools list `_meta["brmcp/priceAtoms"]`; an unfunded
//! paid call gets exactly the `payment_required` result; a funded one is debited; a
//! call key (`brmcp/callKey`, 8 to 128 bytes) runs and charges a call at most once per
//! caller and replays its outcome; a refused call does not consume its key.
#![allow(dead_code, unreachable_pub, missing_docs, deprecated)]
mod bot;
pub mod conformance;
pub mod harness_bot;
mod http;
pub mod interop;
mod payer;

use std::sync::Arc;
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{PeerId, RouterConfig};
use brmcp::bridge::{Bridge, Config, Mode, Settings};
use rmcp::model::{CompleteRequestParams, CompleteResult, CompletionInfo};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, RoleClient, ServiceExt};

// The bridge test binary and the stdio fixture example include this module; each
// uses a part of it.
#[allow(unused_imports)]
pub use bot::{BotState, FORTUNE_PRICE, fixed_tools, serve_test_bot};
#[allow(unused_imports)]
pub use brmcp::adapters::protocol::result_text as text;
#[allow(unused_imports)]
pub use brmcp_test_support::call;

/// The text of a tool result's last content block: where the bridge puts its own words.
pub fn last_text(r: &rmcp::model::CallToolResult) -> String {
    r.content
        .last()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}
#[allow(unused_imports)]
pub use http::{INITIALIZE, http, http_on, initialize, post_on_session};
#[allow(unused_imports)]
pub use payer::{PayMode, PayerState, TestPayer};

/// A fabric with the test bot and a bridge, set up for one test: the [`Stage`]'s
/// fields read through the env (`env.bot_id`).
pub struct Env {
    pub stage: Stage,
    pub bridge: Bridge,
}

impl std::ops::Deref for Env {
    type Target = Stage;

    fn deref(&self) -> &Stage {
        &self.stage
    }
}

/// Settings with the bot allowed, autopay, generous caps.
pub fn autopay(bot: PeerId) -> Settings {
    let mut s = Settings::default();
    s.mode = Mode::Autopay;
    s.per_call_cap_atoms = 10_000;
    s.per_day_cap_atoms = 100_000;
    s.allowed_bots = vec![bot.to_string()];
    s
}

pub fn base_config(dir: &std::path::Path) -> Config {
    let mut config = Config::new(dir).with_listen("127.0.0.1:0".parse().unwrap());
    config.connect_timeout = Duration::from_secs(5);
    config.retry_after = Duration::from_millis(200);
    config.poll_interval = Duration::from_millis(50);
    config
}

/// What bridges run on, one after another when a test restarts one: a fabric with the
/// test bot serving on it, a payer of the bot and a data directory.
pub struct Stage {
    pub fabric: Fabric,
    /// The bot's router (the fabric holds routers weakly).
    pub bot_router: brmcp::adapters::Router,
    pub bot_id: PeerId,
    pub bridge_id: PeerId,
    pub bot: Arc<BotState>,
    pub payer: Arc<PayerState>,
    pub dir: tempfile::TempDir,
}

impl Stage {
    /// The test bot on a fabric of `seed` and a payer of it in `mode`.
    pub fn new(seed: u64, mode: PayMode) -> Self {
        let fabric = Fabric::new(seed);
        let (bot_id, bridge_id) = (uid(1), uid(2));
        let (bot_router, bot) = serve_test_bot(&fabric, bot_id);
        let payer = PayerState::new(bot.clone(), bridge_id, mode);
        let dir = tempfile::tempdir().expect("tempdir");
        Self {
            fabric,
            bot_router,
            bot_id,
            bridge_id,
            bot,
            payer,
            dir,
        }
    }

    /// A bridge on the stage with `config` and a router of `router_config`.
    pub fn bridge_with(&self, config: Config, router_config: RouterConfig) -> Bridge {
        Bridge::new(
            config,
            self.fabric.router(self.bridge_id, router_config),
            TestPayer(self.payer.clone()),
        )
        .expect("bridge")
    }

    /// The first run of a bridge whose paid calls wait on their credit (polled 10 000
    /// times, so a test can stop it mid-call): with `settings`, started.
    pub async fn waiting_on_credit(&self, settings: Settings) -> Bridge {
        let mut config = base_config(self.dir.path());
        config.poll_attempts = 10_000;
        let bridge = self.bridge_with(config, RouterConfig::client());
        bridge.apply_settings(settings).await.expect("settings");
        bridge.start().await.expect("start");
        bridge
    }

    /// The next run of the bridge, on what the earlier one left in the data
    /// directory: started.
    pub async fn restarted(&self) -> Bridge {
        let bridge = self.bridge_with(base_config(self.dir.path()), RouterConfig::client());
        bridge.start().await.expect("start");
        bridge
    }
}

/// Serves `bridge`'s HTTP router on loopback as if every connection came from `peer`;
/// returns the address to dial.
pub async fn served_as_from(bridge: &Bridge, peer: std::net::SocketAddr) -> std::net::SocketAddr {
    let router = bridge.http_router().layer(axum::middleware::map_request(
        move |mut request: axum::extract::Request| async move {
            request
                .extensions_mut()
                .insert(axum::extract::ConnectInfo(peer));
            request
        },
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// One run of a bridge on `router` and the data directory `dir`, autopaying `bot`
/// through a payer of its own in `mode` (whose tips reach no test bot's ledger).
pub async fn autopay_bridge(
    router: brmcp::adapters::Router,
    dir: &std::path::Path,
    bridge_id: PeerId,
    bot: PeerId,
    mode: PayMode,
) -> Bridge {
    let payer = PayerState::new(Arc::new(BotState::default()), bridge_id, mode);
    let bridge = Bridge::new(base_config(dir), router, TestPayer(payer)).expect("bridge");
    bridge.apply_settings(autopay(bot)).await.expect("settings");
    bridge
}

/// A fabric, the test bot serving on it, and a bridge with `settings` (made from the
/// bot's uid) and `config`.
pub async fn env_with(
    settings: impl FnOnce(PeerId) -> Settings,
    config: impl FnOnce(Config) -> Config,
) -> Env {
    env_full(settings, config, RouterConfig::client()).await
}

/// As [`env_with`], with the bridge's router config too.
pub async fn env_full(
    settings: impl FnOnce(PeerId) -> Settings,
    config: impl FnOnce(Config) -> Config,
    router_config: RouterConfig,
) -> Env {
    let stage = Stage::new(7, PayMode::Credit);
    let bridge = stage.bridge_with(config(base_config(stage.dir.path())), router_config);
    bridge
        .apply_settings(settings(stage.bot_id))
        .await
        .expect("settings");
    Env { stage, bridge }
}

pub async fn env(settings: impl FnOnce(PeerId) -> Settings) -> Env {
    env_with(settings, |c| c).await
}

pub type Agent<H = ()> = RunningService<RoleClient, H>;

/// An MCP client (legacy lifecycle) talking to the bridge's proxy of the test bot over
/// an in-memory pipe, as an agent on stdio would.
pub async fn agent_with<H: ClientHandler>(env: &Env, handler: H) -> Agent<H> {
    connect(&env.bridge, env.bot_id, handler).await
}

/// An MCP client talking to `bridge`'s proxy of `bot` over an in-memory pipe.
pub async fn connect<H: ClientHandler>(bridge: &Bridge, bot: PeerId, handler: H) -> Agent<H> {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let bridge = bridge.clone();
    tokio::spawn(async move {
        if let Err(e) = bridge.serve(&bot, server_end).await {
            eprintln!("bridge serve ended: {e}");
        }
    });
    handler.serve(client_end).await.expect("agent initialize")
}

/// An MCP client of the agent holding `token`, talking to `bot` (its name or uid)
/// through the bridge listening at `addr` over streamable HTTP.
pub async fn http_agent(
    addr: std::net::SocketAddr,
    bot: impl std::fmt::Display,
    token: &str,
) -> Agent {
    ().serve(StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp/{bot}"))
            .auth_header(token),
    ))
    .await
    .expect("HTTP agent")
}

pub async fn agent(env: &Env) -> Agent {
    agent_with(env, ()).await
}

/// Waits until `cond` holds, polling every 10 ms, up to `limit`.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cond()
}

/// The payment `env`'s bridge held for a call of `tool` its agent cancelled is dropped
/// well within the approval's timeout (30 s in these tests: the cancel dropped it, not
/// the timeout), and nothing was paid nor ran.
pub async fn held_payment_dropped(env: &Env, tool: &str) {
    let bridge = env.bridge.clone();
    assert!(
        eventually(Duration::from_secs(10), || bridge
            .pending_payments()
            .is_empty())
        .await,
        "the held payment is dropped"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(env.payer.count(), 0, "nothing paid");
    assert_eq!(env.bot.executions(tool), 0);
}

/// The candidates that start with the argument's value, as a completion result.
pub fn complete_from(candidates: &[&str], request: &CompleteRequestParams) -> CompleteResult {
    let prefix = &request.argument.value;
    let values: Vec<String> = candidates
        .iter()
        .filter(|v| v.starts_with(prefix.as_str()))
        .map(|v| (*v).to_owned())
        .collect();
    CompleteResult::new(CompletionInfo::new(values).expect("completion"))
}

/// A bot's listing of one tool `name` at a fixed price of `atoms`.
pub fn priced_listing(name: &str, atoms: u64) -> rmcp::model::ListToolsResult {
    let tool: rmcp::model::Tool = serde_json::from_value(serde_json::json!({
        "name": name,
        "inputSchema": {"type": "object"},
        "_meta": {"brmcp/priceAtoms": atoms},
    }))
    .unwrap();
    rmcp::model::ListToolsResult::with_all_items(vec![tool])
}
