//! The interop bot on the real serving harness (`brmcp::server`): the tools the Python
//! client's scenario calls, and a payer that tips the harness as the host would.
#![allow(deprecated)] // logging is SEP-2577-deprecated; still relayed

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, PeerId, Router, RouterConfig};
use brmcp::bridge::{Bridge, Config, Payer, Settings};
use brmcp::server::{CallContext, Harness, NoArgs, Price, Tip, ToolError, ToolSpec};
use rmcp::model::{
    CallToolResult, ContentBlock, LoggingLevel, LoggingMessageNotificationParam,
    ProgressNotificationParam,
};
use serde_json::json;

/// Price of `fortune`, in atoms.
pub const FORTUNE_PRICE: u64 = super::FORTUNE_PRICE;

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct EchoArgs {
    /// the text to echo back
    pub text: String,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct QuoteArgs {
    /// the price of the quote, in atoms
    pub n: Option<u64>,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct StepsArgs {
    /// how many progress steps to report
    pub steps: Option<u64>,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct LineArgs {
    /// the line to log
    pub line: String,
}

/// What the harness's tools saw.
#[derive(Debug, Default)]
pub struct Probe {
    pub fortunes: AtomicUsize,
    /// How long each fortune takes to tell, in milliseconds.
    pub fortune_ms: AtomicU64,
    pub cancelled: AtomicUsize,
}

/// The harness serving the interop tools, its router on the fabric and its data.
pub struct HarnessBot {
    pub harness: Harness,
    pub router: Router,
    pub probe: Arc<Probe>,
    _dir: tempfile::TempDir,
}

fn tools(probe: &Arc<Probe>) -> Vec<ToolSpec> {
    let fortunes = probe.clone();
    let waits = probe.clone();
    vec![
        ToolSpec::free(
            "echo",
            "Echo the text back",
            |_call: CallContext, args: EchoArgs| async move {
                let mut r = CallToolResult::success(vec![ContentBlock::text(args.text.clone())]);
                r.structured_content = Some(json!({"echo": args.text}));
                Ok::<_, ToolError>(r)
            },
        ),
        ToolSpec::fixed(
            "fortune",
            "A fortune, for a price",
            FORTUNE_PRICE,
            move |_call: CallContext, _: NoArgs| {
                let n = fortunes.fortunes.fetch_add(1, Ordering::SeqCst) + 1;
                let ms = fortunes.fortune_ms.load(Ordering::SeqCst);
                async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok::<_, ToolError>(format!("fortune #{n}"))
                }
            },
        ),
        ToolSpec::new(
            "quote",
            "A dynamically priced quote",
            Price::dynamic(|_: &PeerId, args: &QuoteArgs| Ok(args.n.unwrap_or(1))),
            |_call: CallContext, _: QuoteArgs| async move { Ok::<_, ToolError>("a quote") },
        ),
        ToolSpec::free(
            "progress",
            "Reports progress, then finishes",
            |call: CallContext, args: StepsArgs| async move {
                let steps = args.steps.unwrap_or(3);
                if let Some(token) = call.request().meta.get_progress_token() {
                    for i in 1..=steps {
                        let _ = call
                            .peer()
                            .notify_progress(
                                ProgressNotificationParam::new(token.clone(), i as f64)
                                    .with_total(steps as f64)
                                    .with_message(format!("step {i}")),
                            )
                            .await;
                    }
                }
                Ok::<_, ToolError>(format!("done {steps}"))
            },
        ),
        ToolSpec::free(
            "wait",
            "Waits until cancelled",
            move |call: CallContext, _: NoArgs| {
                let probe = waits.clone();
                async move {
                    tokio::select! {
                        () = call.request().ct.cancelled() => {
                            probe.cancelled.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, ToolError>("cancelled")
                        }
                        () = tokio::time::sleep(Duration::from_secs(3600)) => Ok("done"),
                    }
                }
            },
        ),
        ToolSpec::free(
            "log",
            "Logs a line to the client",
            |call: CallContext, args: LineArgs| async move {
                let _ = call
                    .peer()
                    .notify_logging_message(
                        LoggingMessageNotificationParam::new(
                            LoggingLevel::Warning,
                            json!(args.line),
                        )
                        .with_logger("testbot"),
                    )
                    .await;
                Ok::<_, ToolError>("logged")
            },
        ),
    ]
}

/// The harness bot `bot_id` on `fabric`, allowing `caller`.
pub fn harness_bot(fabric: &Fabric, bot_id: PeerId, caller: PeerId) -> HarnessBot {
    let probe = Arc::new(Probe::default());
    let dir = tempfile::tempdir().expect("tempdir");
    let mut builder = Harness::builder()
        .data_dir(dir.path())
        .allowed_uids([caller])
        // Tests make bursts of calls; the default 30 a minute is for real callers.
        .calls_per_minute(6000)
        .instructions("a test bot");
    for tool in tools(&probe) {
        builder = builder.tool(tool);
    }
    let harness = builder.build().expect("harness");
    let router = harness.start(fabric.sender(bot_id)).expect("start");
    fabric.attach(bot_id, &router);
    HarnessBot {
        harness,
        router,
        probe,
        _dir: dir,
    }
}

/// Our harness as bot `bot_id` on `fabric`, selling `tool` to `caller` (at a test's
/// rate: bursts of calls); its router and data directory, which must outlive it.
pub fn harness_selling(
    fabric: &Fabric,
    bot_id: PeerId,
    caller: PeerId,
    tool: ToolSpec,
) -> (Harness, Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let harness = Harness::builder()
        .data_dir(dir.path())
        .allowed_uids([caller])
        .calls_per_minute(6000)
        .tool(tool)
        .build()
        .expect("harness");
    let router = harness.start(fabric.sender(bot_id)).expect("start");
    fabric.attach(bot_id, &router);
    (harness, router, dir)
}

/// Pays by recording a tip at the harness, as the host does on a tip event.
pub struct TipPayer {
    pub harness: Harness,
    pub from: PeerId,
    pub seq: AtomicU64,
    pub payments: Arc<AtomicUsize>,
}

impl Payer for TipPayer {
    async fn pay(&self, _bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.payments.fetch_add(1, Ordering::SeqCst);
        let tip = Tip {
            seq: self.seq.fetch_add(1, Ordering::SeqCst),
            caller: self.from,
            matoms: atoms * 1000,
        };
        self.harness.record_tip(tip).await?;
        Ok(())
    }
}

/// A fabric with the harness bot and a bridge paying it with tips.
pub struct HarnessEnv {
    pub fabric: Fabric,
    pub bot: HarnessBot,
    pub bot_id: PeerId,
    pub bridge_id: PeerId,
    pub bridge: Bridge,
    pub payments: Arc<AtomicUsize>,
    pub dir: tempfile::TempDir,
}

/// The harness bot, and a bridge to it with `settings` (made from the bot's uid).
pub async fn harness_env(settings: impl FnOnce(PeerId) -> Settings) -> HarnessEnv {
    harness_env_with(settings, |c| c, RouterConfig::client()).await
}

/// As [`harness_env`], with the bridge's config changed by `config` and its router's
/// config `router`.
pub async fn harness_env_with(
    settings: impl FnOnce(PeerId) -> Settings,
    config: impl FnOnce(Config) -> Config,
    router: RouterConfig,
) -> HarnessEnv {
    let fabric = Fabric::new(23);
    let (bot_id, bridge_id) = (uid(1), uid(2));
    let bot = harness_bot(&fabric, bot_id, bridge_id);
    let payments = Arc::new(AtomicUsize::new(0));
    let dir = tempfile::tempdir().expect("tempdir");
    let bridge = Bridge::new(
        config(super::base_config(dir.path())),
        fabric.router(bridge_id, router),
        TipPayer {
            harness: bot.harness.clone(),
            from: bridge_id,
            seq: AtomicU64::new(1),
            payments: payments.clone(),
        },
    )
    .expect("bridge");
    bridge
        .apply_settings(settings(bot_id))
        .await
        .expect("settings");
    HarnessEnv {
        fabric,
        bot,
        bot_id,
        bridge_id,
        bridge,
        payments,
        dir,
    }
}
