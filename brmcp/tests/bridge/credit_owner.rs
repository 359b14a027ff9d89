//! Credit goes to the call that paid for it, against the serving harness (which
//! reserves credit per call, so agents run side by side there) and test bots that
//! keep one balance for the bridge, as the Go harness does: a
//! burst of one agent's paid calls at the bot's rate limit gets a result for every
//! payment and never the bot's raw `payment_required`; an agent whose caps cannot pay
//! gets nothing while another pays; credit an agent paid and never collected (an
//! approved payment whose call was never retried) is not spent by another agent, and
//! its own next call collects it; a bot that asks again and again after being paid is
//! paid once per call and the agent reads what was paid. Money is conserved: what the
//! spend log paid is what the bot ran plus what it still holds, and the spend log
//! says whose that is.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, PeerId, RouterConfig};
use brmcp::bridge::{AgentEntry, Bridge, Mode, Payer, Settings, SpendStatus};
use brmcp::server::{CallContext, Harness, NoArgs, Tip, ToolError, ToolSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ClientConfig,
    ContentBlock, ElicitRequestParams, ElicitResult, ErrorData, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{
    ClientHandler, ClientLifecycleMode, ClientServiceExt, RoleClient, RoleServer, ServerHandler,
};
use serde_json::json;

use crate::common::{
    FORTUNE_PRICE, PayMode, PayerState, TestPayer, autopay, base_config, call, connect, env_with,
    eventually, http_agent, text,
};

/// The price of the harness's `add`, in atoms.
const ADD_PRICE: u64 = 1000;

/// The bot's raw refusal, which no agent may read.
const RAW: &str = r#""error":"payment_required""#;

const DEFAULT_TOKEN: &str = "dddddddddddddddddddddddddddddddd";
const VICTIM_TOKEN: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const RIDER_TOKEN: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";
const OTHER_TOKEN: &str = "c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3c3";

/// Pays by recording a tip at the harness after a delay that varies from tip to tip
/// (as tips land on a live network), confirmed once it is credited.
struct LaggingTips {
    harness: Harness,
    from: PeerId,
    seq: AtomicU64,
    payments: Arc<AtomicUsize>,
}

impl Payer for LaggingTips {
    async fn pay(&self, _bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.payments.fetch_add(1, Ordering::SeqCst);
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis((seq % 4) * 20)).await;
        let tip = Tip {
            seq,
            caller: self.from,
            matoms: atoms * 1000,
        };
        self.harness.record_tip(tip).await?;
        Ok(())
    }
}

/// The harness selling `add` at [`ADD_PRICE`] with `per_minute` calls a minute, and a
/// bridge paying it with [`LaggingTips`].
struct Net {
    _fabric: Fabric,
    _router: brmcp::adapters::Router,
    harness: Harness,
    runs: Arc<AtomicUsize>,
    bot: PeerId,
    me: PeerId,
    bridge: Bridge,
    payments: Arc<AtomicUsize>,
    _dir: tempfile::TempDir,
    _bot_dir: tempfile::TempDir,
}

async fn harness_net(per_minute: u32, settings: impl FnOnce(PeerId) -> Settings) -> Net {
    let fabric = Fabric::new(29);
    let (bot, me) = (uid(1), uid(2));
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let bot_dir = tempfile::tempdir().unwrap();
    let harness = Harness::builder()
        .data_dir(bot_dir.path())
        .allowed_uids([me])
        .calls_per_minute(per_minute)
        .tool(ToolSpec::fixed(
            "add",
            "Adds, for a price",
            ADD_PRICE,
            move |_call: CallContext, _: NoArgs| {
                let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
                async move { Ok::<_, ToolError>(format!("sum #{n}")) }
            },
        ))
        .build()
        .unwrap();
    let router = harness.start(fabric.sender(bot)).unwrap();
    fabric.attach(bot, &router);
    let payments = Arc::new(AtomicUsize::new(0));
    let dir = tempfile::tempdir().unwrap();
    let mut config = base_config(dir.path());
    // Room for a slow machine: a call whose credit another call took learns it from
    // that call's answer, which may come late.
    config.poll_attempts = 40;
    // The agents' fair shares divide the limit this harness really has.
    config.bot_calls_per_minute = per_minute;
    let bridge = Bridge::new(
        config,
        fabric.router(me, RouterConfig::client()),
        LaggingTips {
            harness: harness.clone(),
            from: me,
            seq: AtomicU64::new(1),
            payments: payments.clone(),
        },
    )
    .unwrap();
    bridge.apply_settings(settings(bot)).await.unwrap();
    Net {
        _fabric: fabric,
        _router: router,
        harness,
        runs,
        bot,
        me,
        bridge,
        payments,
        _dir: dir,
        _bot_dir: bot_dir,
    }
}

/// Settings with the endpoints on, under the default agent's token, for agent
/// `victim` (a call's price per call, twenty a day) and `other`.
fn victim_and(bot: PeerId, other: AgentEntry) -> Settings {
    let mut s = autopay(bot);
    s.enabled = true;
    s.token = DEFAULT_TOKEN.into();
    let victim = AgentEntry::new(
        "victim",
        VICTIM_TOKEN,
        ADD_PRICE,
        20 * ADD_PRICE,
        Vec::new(),
    );
    s.agents = vec![victim, other];
    s
}

/// Money is conserved: the spend log paid what the bot ran plus what it holds, and
/// what it holds is what the spend log says is uncollected.
async fn conserved(net: &Net) {
    let (entries, _) = net.bridge.spend_log().unwrap();
    assert!(
        entries.iter().all(|e| e.status == SpendStatus::Paid),
        "{entries:?}"
    );
    let paid: u64 = entries.iter().map(|e| e.atoms).sum();
    let held = net.harness.balance_matoms(net.me).await.unwrap() / 1000;
    let runs = net.runs.load(Ordering::SeqCst) as u64;
    assert_eq!(paid, runs * ADD_PRICE + held, "paid = ran + held");
    let (uncollected, uses) = net.bridge.credit_log().unwrap();
    assert_eq!(
        uncollected.iter().map(|u| u.atoms).sum::<u64>(),
        held,
        "{uncollected:?}"
    );
    assert!(uses.is_empty(), "no call used credit not its own: {uses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_twelve_paid_calls_at_the_rate_limit_gets_twelve_results() {
    let net = harness_net(12, autopay).await;
    let agent = connect(&net.bridge, net.bot, ()).await;
    let calls: Vec<_> = (0..12u64)
        .map(|i| {
            let peer = agent.peer().clone();
            tokio::spawn(async move {
                // Staggered, so later calls reach the bot while earlier tips land.
                tokio::time::sleep(Duration::from_millis(i * 7)).await;
                peer.call_tool(call("add", json!({"i": i}))).await
            })
        })
        .collect();
    let mut results = 0;
    for handle in calls {
        let r = handle.await.unwrap().expect("call");
        let said = text(&r);
        assert!(!said.contains(RAW), "{said}");
        assert_eq!(r.is_error, Some(false), "{said}");
        results += 1;
    }
    assert_eq!(results, 12);
    assert_eq!(
        net.payments.load(Ordering::SeqCst),
        12,
        "one payment a result"
    );
    assert_eq!(net.runs.load(Ordering::SeqCst), 12);
    conserved(&net).await;
    assert_eq!(net.harness.balance_matoms(net.me).await.unwrap(), 0);
    agent.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_agent_capped_at_one_atom_gets_nothing_while_another_pays_twenty_calls() {
    let rider = AgentEntry::new("rider", RIDER_TOKEN, 1, 1, Vec::new());
    let net = harness_net(6000, |bot| victim_and(bot, rider)).await;
    net.bridge.start().await.unwrap();
    let addr = net.bridge.listen_addr().unwrap();
    let victim = http_agent(addr, net.bot, VICTIM_TOKEN).await;
    let rider = http_agent(addr, net.bot, RIDER_TOKEN).await;
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let riding = {
        let done = done.clone();
        let peer = rider.peer().clone();
        tokio::spawn(async move {
            let mut tries = 0;
            while !done.load(Ordering::SeqCst) {
                let r = peer.call_tool(call("add", json!({}))).await.unwrap();
                let said = text(&r);
                assert_eq!(r.is_error, Some(true), "rider got {said}");
                assert!(
                    said.contains("agent \"rider\"") && said.contains("per-call cap (1)"),
                    "{said}"
                );
                tries += 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tries
        })
    };
    for wave in 0..4 {
        let calls: Vec<_> = (0..5)
            .map(|i| {
                let peer = victim.peer().clone();
                tokio::spawn(async move {
                    peer.call_tool(call("add", json!({"n": wave * 5 + i})))
                        .await
                })
            })
            .collect();
        for handle in calls {
            let r = handle.await.unwrap().unwrap();
            let said = text(&r);
            assert_eq!(r.is_error, Some(false), "victim: {said}");
        }
    }
    done.store(true, Ordering::SeqCst);
    let tries = riding.await.unwrap();
    assert!(tries > 0);
    assert_eq!(net.payments.load(Ordering::SeqCst), 20);
    assert_eq!(
        net.runs.load(Ordering::SeqCst),
        20,
        "a run for every payment"
    );
    let (entries, _) = net.bridge.spend_log().unwrap();
    assert!(entries.iter().all(|e| e.agent == "victim"), "{entries:?}");
    conserved(&net).await;
    net.bridge.close().await;
}

/// An agent on protocol 2026-07-28 that can be asked by a form, on the bridge's
/// proxy over an in-memory pipe (the default agent).
#[derive(Clone)]
struct Approver;

impl ClientHandler for Approver {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap();
        ClientConfig::new(capabilities, Implementation::new("approver", "1"))
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        Err(ErrorData::invalid_request(
            "asked by input_required only",
            None,
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approved_payment_never_retried_is_not_spent_by_another_agent() {
    let env = env_with(
        |bot| {
            let mut s = autopay(bot);
            s.mode = Mode::Approval;
            s.approval_timeout_secs = 1;
            s.tip_wait_secs = 1;
            s.enabled = true;
            s.token = DEFAULT_TOKEN.into();
            s.agents = vec![AgentEntry::new(
                "other",
                OTHER_TOKEN,
                FORTUNE_PRICE,
                10 * FORTUNE_PRICE,
                Vec::new(),
            )];
            s
        },
        |mut c| {
            c.credit_wait = Duration::from_millis(500);
            c.input_hold = Duration::from_millis(100);
            c
        },
    )
    .await;
    env.bridge.start().await.unwrap();
    let addr = env.bridge.listen_addr().unwrap();
    let mut parked = env.bridge.subscribe_payments();

    // The default agent is asked; the user approves in the approvals queue; the agent
    // never retries. The payment is made and its credit sits at the bot.
    let (client_end, server_end) = tokio::io::duplex(1 << 20);
    let (bridge, bot) = (env.bridge.clone(), env.bot_id);
    tokio::spawn(async move { bridge.serve(&bot, server_end).await });
    let asker = Approver
        .serve_with_lifecycle(
            client_end,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap();
    let asked = asker
        .call_tool_once(call("fortune", json!({})))
        .await
        .unwrap();
    assert!(
        matches!(asked, CallToolResponse::InputRequired(_)),
        "{asked:?}"
    );
    let pending = parked.recv().await.unwrap();
    assert_eq!(pending.agent, "default");
    assert!(env.bridge.resolve_payment(&pending.id, true));
    assert!(eventually(Duration::from_secs(10), || env.payer.count() == 1).await);
    assert!(
        eventually(Duration::from_secs(10), || {
            env.bridge
                .spend_log()
                .unwrap()
                .0
                .first()
                .is_some_and(|e| e.status == SpendStatus::Paid)
        })
        .await
    );
    assert_eq!(env.bot.balance(&env.bridge_id), FORTUNE_PRICE);
    // Past the held call's life (approval, tip wait and hold), only the credit is left.
    tokio::time::sleep(Duration::from_millis(2500)).await;

    // Another agent, which may pay, is not charged from it: held back, then refused.
    let other = http_agent(addr, env.bot_id, OTHER_TOKEN).await;
    let r = other.call_tool(call("fortune", json!({}))).await.unwrap();
    let said = text(&r);
    assert_eq!(r.is_error, Some(true), "{said}");
    assert!(
        said.contains(&format!(
            "the bot holds {FORTUNE_PRICE} atoms agent \"default\" paid and has not collected yet"
        )),
        "{said}"
    );
    assert!(!said.contains(RAW), "{said}");
    assert_eq!(
        env.bot.executions("fortune"),
        0,
        "nothing ran on its credit"
    );
    assert_eq!(env.bot.balance(&env.bridge_id), FORTUNE_PRICE);
    let (uncollected, _) = env.bridge.credit_log().unwrap();
    assert_eq!(uncollected.len(), 1);
    assert_eq!(
        (uncollected[0].agent.as_str(), uncollected[0].atoms),
        ("default", FORTUNE_PRICE)
    );

    // The paying agent's next call collects it, paying nothing more.
    let again = asker
        .call_tool_once(call("fortune", json!({})))
        .await
        .unwrap();
    let CallToolResponse::Complete(done) = again else {
        panic!("not answered from its credit: {again:?}");
    };
    assert_eq!(text(&done), "fortune #1");
    assert_eq!(env.payer.count(), 1);
    assert_eq!(env.bot.balance(&env.bridge_id), 0);
    let (uncollected, uses) = env.bridge.credit_log().unwrap();
    assert!(uncollected.is_empty(), "{uncollected:?}");
    assert!(uses.is_empty(), "{uses:?}");
    asker.cancel().await.unwrap();
    env.bridge.close().await;
}

/// A bot that lists `fortune` at 10 atoms and answers every call `payment_required`,
/// paid or not.
#[derive(Clone, Default)]
struct AlwaysAsks(Arc<AtomicUsize>);

impl ServerHandler for AlwaysAsks {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(json!({
            "name": "fortune",
            "inputSchema": {"type": "object"},
            "_meta": {"brmcp/priceAtoms": 10},
        }))
        .unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.0.fetch_add(1, Ordering::SeqCst);
        let body = json!({"error": "payment_required", "tool": "fortune", "priceAtoms": 10,
                          "balanceAtoms": 0, "shortfallAtoms": 10, "acceptedRails": ["tip"]});
        Ok(CallToolResult::error(vec![ContentBlock::text(body.to_string())]).into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bot_that_asks_again_after_being_paid_is_paid_once_a_call_and_the_agent_reads_what() {
    let fabric = Fabric::new(31);
    let (bot, me) = (uid(1), uid(2));
    let router = fabric.router(bot, RouterConfig::server());
    let handler = AlwaysAsks::default();
    let calls = handler.0.clone();
    router.serve(move |_: &PeerId| handler.clone());
    let payer = PayerState::new(Arc::default(), me, PayMode::NeverCredit);
    let dir = tempfile::tempdir().unwrap();
    let mut config = base_config(dir.path());
    config.poll_attempts = 3;
    let bridge = Bridge::new(
        config,
        fabric.router(me, RouterConfig::client()),
        TestPayer(payer.clone()),
    )
    .unwrap();
    bridge.apply_settings(autopay(bot)).await.unwrap();
    let agent = connect(&bridge, bot, ()).await;
    let asked: Vec<_> = (0..4)
        .map(|_| {
            let peer = agent.peer().clone();
            tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await })
        })
        .collect();
    for handle in asked {
        let r = handle.await.unwrap().unwrap();
        let said = text(&r);
        assert_eq!(r.is_error, Some(true));
        assert!(!said.contains(RAW), "{said}");
        assert!(
            said.starts_with(&format!(
                "brmcp-bridge: paid 10 atoms to bot {bot} for tool \"fortune\""
            )) && said.contains("the credit stays with the bot as agent \"default\"'s"),
            "{said}"
        );
    }
    assert_eq!(payer.count(), 4, "one payment a call, never more");
    let (entries, spent) = bridge.spend_log().unwrap();
    assert_eq!(spent, 40);
    assert_eq!(entries.len(), 4);
    let (uncollected, _) = bridge.credit_log().unwrap();
    assert_eq!(uncollected.iter().map(|u| u.atoms).sum::<u64>(), 40);
    // Each call: the first answer, the reissue after paying, and the polls.
    assert_eq!(calls.load(Ordering::SeqCst), 4 * (1 + 1 + 3));
    agent.cancel().await.unwrap();
    bridge.close().await;
    drop(router);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_paying_agents_at_one_bot_each_get_what_they_paid_for() {
    let other = AgentEntry::new("other", OTHER_TOKEN, ADD_PRICE, 20 * ADD_PRICE, Vec::new());
    let net = harness_net(6000, |bot| victim_and(bot, other)).await;
    net.bridge.start().await.unwrap();
    let addr = net.bridge.listen_addr().unwrap();
    let agents = [
        http_agent(addr, net.bot, VICTIM_TOKEN).await,
        http_agent(addr, net.bot, OTHER_TOKEN).await,
    ];
    let calls: Vec<_> = (0..16u64)
        .map(|i| {
            let peer = agents[usize::try_from(i % 2).unwrap()].peer().clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(i * 5)).await;
                (
                    i % 2,
                    peer.call_tool(call("add", json!({"i": i}))).await.unwrap(),
                )
            })
        })
        .collect();
    let mut results = [0u64; 2];
    for handle in calls {
        let (who, r) = handle.await.unwrap();
        let said = text(&r);
        assert!(!said.contains(RAW), "{said}");
        assert_eq!(r.is_error, Some(false), "{said}");
        results[usize::try_from(who).unwrap()] += 1;
    }
    assert_eq!(results, [8, 8]);
    let (entries, _) = net.bridge.spend_log().unwrap();
    for (n, name) in ["victim", "other"].iter().enumerate() {
        let paid = entries.iter().filter(|e| e.agent == *name).count() as u64;
        assert_eq!(paid, results[n], "{name} paid for what it got: {entries:?}");
    }
    assert_eq!(net.payments.load(Ordering::SeqCst), 16);
    conserved(&net).await;
    net.bridge.close().await;
}
