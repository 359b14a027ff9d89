//! The directory served to the agent by the bridge: a real `brmcp::directory`
//! directory that listed a provider harness (registered, funded, crawled, tested and
//! approved through its own tools), a bridge with the directory in its settings, and
//! agents on the directory tools over an in-memory pipe.

mod add;
mod announced;
mod bounds;
mod hostile;
mod python;
mod reload;
mod search;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, PeerId, Router, RouterConfig};
use brmcp::bridge::{Bridge, DirectoryEntry, Mode, Payer, Settings};
use brmcp::directory::{Directory, PayError, PayFuture, Policy, State};
use brmcp::server::{Harness, Tip, ToolSpec};
use brmcp_test_support::form_message;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Value, json};

use crate::common::harness_bot::EchoArgs;

pub(crate) const DIR: u32 = 20;
pub(crate) const PROVIDER: u32 = 21;
pub(crate) const BRIDGE: u32 = 22;
pub(crate) const ADMIN: u32 = 23;

/// The price of the provider's `paid_echo`.
pub(crate) const PAID_ECHO: u64 = 500;

/// The directory's policy: fee 1000, `search` priced at `search_price`.
fn policy(search_price: i64) -> Policy {
    Policy {
        admin_uids: vec![uid(ADMIN).to_string()],
        listing_fee_atoms: 1000,
        search_price_atoms: search_price,
        calls_per_minute: 1000,
        test_budget_max_atoms: 10_000,
        name: "dir-test".into(),
        ..Policy::default()
    }
}

/// The directory's test payments: the test calls the provider's free `echo`, so
/// the directory never pays.
#[derive(Clone)]
struct NoPayments;

impl brmcp::directory::Payer for NoPayments {
    fn pay(&self, _payee: PeerId, _atoms: u64) -> PayFuture<'_> {
        Box::pin(async { Err(PayError::Failed(BoxError::from("no payment expected"))) })
    }
}

/// The bridge's payments: a tip recorded at the payee's harness, from the bridge.
#[derive(Clone)]
pub(crate) struct TipPayments {
    harnesses: Arc<Vec<(PeerId, Harness)>>,
    seq: Arc<AtomicU64>,
    /// Every payment made: (payee, atoms).
    pub(crate) made: Arc<Mutex<Vec<(PeerId, u64)>>>,
}

impl Payer for TipPayments {
    async fn pay(&self, bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.made.lock().unwrap().push((bot, atoms));
        let harness = self
            .harnesses
            .iter()
            .find(|(uid, _)| *uid == bot)
            .map(|(_, h)| h.clone())
            .ok_or("no such payee")?;
        let tip = Tip {
            seq: self.seq.fetch_add(1, Ordering::SeqCst),
            caller: uid(BRIDGE),
            matoms: atoms * 1000,
        };
        harness.record_tip(tip).await?;
        Ok(())
    }
}

/// The whole setup.
pub(crate) struct World {
    pub(crate) fabric: Fabric,
    _directory: Directory,
    _provider: Harness,
    pub(crate) bridge: Bridge,
    pub(crate) payments: TipPayments,
    /// The bridge's data directory.
    pub(crate) data_dir: std::path::PathBuf,
    _routers: Vec<Router>,
    _dirs: Vec<tempfile::TempDir>,
}

fn provider_harness(fabric: &Fabric, extra: Vec<ToolSpec>) -> (Harness, Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut builder = Harness::builder();
    for tool in extra {
        builder = builder.tool(tool);
    }
    let harness = builder
        .data_dir(dir.path())
        .allow(|_| true)
        .calls_per_minute(10_000)
        .tool(ToolSpec::free(
            "echo",
            "Echo the text back",
            |_, a: EchoArgs| async move { Ok(json!({ "echo": a.text })) },
        ))
        .tool(ToolSpec::fixed(
            "paid_echo",
            "Echo the text back, paid",
            PAID_ECHO,
            |_, a: EchoArgs| async move { Ok(json!({ "echo": a.text })) },
        ))
        .build()
        .unwrap();
    let router = harness.start(fabric.sender(uid(PROVIDER))).unwrap();
    fabric.attach(uid(PROVIDER), &router);
    (harness, router, dir)
}

/// The tool's JSON answer (its text content), failing on an error result.
pub(crate) async fn ok(
    session: &RunningService<RoleClient, ()>,
    tool: &'static str,
    args: Value,
) -> Value {
    let result = session
        .call_tool(crate::common::call(tool, args))
        .await
        .unwrap();
    assert_ne!(result.is_error, Some(true), "{tool}: {result:?}");
    serde_json::from_str(&crate::common::text(&result)).unwrap()
}

/// The provider registers with the directory, funds the fee and is approved.
async fn list_provider(fabric: &Fabric, provider: &Router, directory: &Directory) {
    let session = ().serve(provider.dial(uid(DIR)).unwrap()).await.unwrap();
    let registration = json!({
        "description": "An echo service",
        "tags": ["echo", "test"],
        "test": {"tool": "echo", "args": {"text": "hi"}, "maxAtoms": 1}
    });
    let status = ok(&session, "register", registration).await;
    assert_eq!(status["state"], "awaiting_funding", "{status}");
    directory
        .harness()
        .record_tip(Tip {
            seq: 1,
            caller: uid(PROVIDER),
            matoms: 1001 * 1000,
        })
        .await
        .unwrap();
    let mut reviewed = false;
    for _ in 0..1000 {
        let entry = directory.entry(&uid(PROVIDER)).unwrap();
        if entry.reg.as_ref().map(|r| r.state) == Some(State::PendingReview) {
            reviewed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(reviewed, "{:?}", directory.entry(&uid(PROVIDER)));
    directory.settle().await;
    let admin_router = fabric.router(uid(ADMIN), RouterConfig::client());
    let admin = ().serve(admin_router.dial(uid(DIR)).unwrap()).await.unwrap();
    let status = ok(&admin, "approve", json!({"uid": uid(PROVIDER).to_string()})).await;
    assert_eq!(status["state"], "listed", "{status}");
}

/// Autopay with caps `per_call`/`per_day`, the directory `dir` configured, no bots.
pub(crate) fn settings(per_call: u64, per_day: u64) -> Settings {
    let mut s = Settings::default();
    s.mode = Mode::Autopay;
    s.per_call_cap_atoms = per_call;
    s.per_day_cap_atoms = per_day;
    s.directories = vec![DirectoryEntry::new(uid(DIR), Some("dir".into()))];
    s
}

/// A directory whose `search` costs `search_price`, with the provider listed, and a
/// bridge with `settings`.
pub(crate) async fn world(search_price: i64, settings: Settings) -> World {
    world_with(search_price, settings, Vec::new()).await
}

/// [`world`] with the provider serving `extra` tools beside its two.
pub(crate) async fn world_with(
    search_price: i64,
    settings: Settings,
    extra: Vec<ToolSpec>,
) -> World {
    let fabric = Fabric::new(31);
    let (provider, provider_router, provider_dir) = provider_harness(&fabric, extra);
    let data = tempfile::tempdir().unwrap();
    let directory = Directory::builder()
        .data_dir(data.path())
        .policy(policy(search_price))
        .payer(NoPayments)
        .self_uid(uid(DIR))
        .build()
        .unwrap();
    let dir_router = directory.start(fabric.sender(uid(DIR))).unwrap();
    fabric.attach(uid(DIR), &dir_router);
    directory.resume().await.unwrap();
    list_provider(&fabric, &provider_router, &directory).await;
    let payments = TipPayments {
        harnesses: Arc::new(vec![
            (uid(DIR), directory.harness().clone()),
            (uid(PROVIDER), provider.clone()),
        ]),
        seq: Arc::new(AtomicU64::new(1)),
        made: Arc::default(),
    };
    let bridge_dir = tempfile::tempdir().unwrap();
    let bridge = Bridge::new(
        crate::common::base_config(bridge_dir.path()),
        fabric.router(uid(BRIDGE), RouterConfig::client()),
        payments.clone(),
    )
    .unwrap();
    bridge.apply_settings(settings).await.unwrap();
    World {
        fabric,
        _directory: directory,
        _provider: provider,
        bridge,
        payments,
        data_dir: bridge_dir.path().to_owned(),
        _routers: vec![provider_router, dir_router],
        _dirs: vec![provider_dir, data, bridge_dir],
    }
}

/// An agent's client: declares elicitation when `answer` is set, and answers every
/// question with it, recording the questions.
#[derive(Clone, Default)]
pub(crate) struct User {
    pub(crate) answer: Option<ElicitationAction>,
    pub(crate) asked: Arc<Mutex<Vec<String>>>,
}

impl User {
    pub(crate) fn answering(action: ElicitationAction) -> Self {
        Self {
            answer: Some(action),
            asked: Arc::default(),
        }
    }
}

impl ClientHandler for User {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities = if self.answer.is_some() {
            serde_json::from_value(json!({"elicitation": {}})).unwrap()
        } else {
            ClientCapabilities::default()
        };
        ClientConfig::new(capabilities, Implementation::new("user", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.lock().unwrap().push(form_message(request)?);
        let action = self.answer.clone().unwrap_or(ElicitationAction::Decline);
        Ok(ElicitResult::new(action))
    }
}

/// An agent on the directory tools of `directory` (by name; `None`: the first).
pub(crate) async fn directory_agent<H: ClientHandler>(
    bridge: &Bridge,
    directory: Option<&str>,
    handler: H,
) -> RunningService<RoleClient, H> {
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let bridge = bridge.clone();
    let directory = directory.map(str::to_owned);
    tokio::spawn(async move {
        if let Err(e) = bridge
            .serve_directory(directory.as_deref(), server_end)
            .await
        {
            eprintln!("directory serve ended: {e}");
        }
    });
    handler.serve(client_end).await.expect("agent initialize")
}

/// Calls a directory tool.
pub(crate) async fn tool<H: ClientHandler>(
    agent: &RunningService<RoleClient, H>,
    name: &'static str,
    args: Value,
) -> CallToolResult {
    agent
        .call_tool(crate::common::call(name, args))
        .await
        .expect("tools/call")
}

/// `tools/call` params.
pub(crate) fn params(name: &'static str, args: Value) -> CallToolRequestParams {
    crate::common::call(name, args)
}
