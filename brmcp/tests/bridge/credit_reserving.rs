//! Agents run side by side at a bot that reserves credit per call (our harness
//! advertises `brmcp/reservesCredit`): one agent's priced call is not held back while
//! another agent's paid call is under way, and each pays for what it gets. A bot that
//! advertises the flag and keeps one balance (it lies) gains nothing: the call it
//! answers from another agent's credit is recorded as that use, against its own
//! agent's daily cap, which then refuses that agent's next call; the paying agent's
//! call pays again and is answered.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::protocol::RESERVES_CREDIT_META;
use brmcp::adapters::{BoxError, PeerId, RouterConfig};
use brmcp::bridge::{AgentEntry, Bridge, Payer, Settings};
use brmcp::server::{CallContext, Harness, NoArgs, ToolError, ToolSpec};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, MetaObject, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;
use tokio::sync::Notify;

use crate::common::harness_bot::{TipPayer, harness_selling};
use crate::common::{Agent, autopay, base_config, call, eventually, http_agent, text};

/// The price of `add`, in atoms.
const PRICE: u64 = 1000;

const DEFAULT_TOKEN: &str = "dddddddddddddddddddddddddddddddd";
const A_TOKEN: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const B_TOKEN: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

/// The bot's raw refusal, which no agent may read.
const RAW: &str = r#""error":"payment_required""#;

/// Settings with agents `a` and `b`, `b` capped at `b_day` atoms a day.
fn two_agents(bot: PeerId, b_day: u64) -> Settings {
    let mut s = autopay(bot);
    s.enabled = true;
    s.token = DEFAULT_TOKEN.into();
    s.agents = vec![
        AgentEntry::new("a", A_TOKEN, PRICE, 20 * PRICE, Vec::new()),
        AgentEntry::new("b", B_TOKEN, PRICE, b_day, Vec::new()),
    ];
    s
}

/// Our harness selling `tool` to bridge `me`, paid by tips recorded at it, with
/// agents `a` and `b` connected over HTTP; credit waits are far shorter than any held
/// call, so a call held back for one is refused.
struct HarnessNet {
    harness: Harness,
    bridge: Bridge,
    me: PeerId,
    a: Agent,
    b: Agent,
    fabric: Fabric,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

impl HarnessNet {
    /// Another bridge on the first one's data directory and identity (its restart).
    async fn restarted(&self) -> Bridge {
        let bridge = tipping_bridge(
            &self.fabric,
            &self.harness,
            self.me,
            self._dirs.1.path(),
            1000,
        );
        bridge.start().await.unwrap();
        bridge
    }
}

/// The bridges' configuration: credit waits far shorter than any held call, so a call
/// held back for one is refused.
fn net_config(dir: &std::path::Path) -> brmcp::bridge::Config {
    let mut config = base_config(dir);
    config.credit_wait = Duration::from_millis(300);
    config.bot_calls_per_minute = 6000;
    config
}

/// Bridge `me` on `fabric`, its data in `dir`, paying `harness` by recording tips at
/// it numbered from `first_seq`, each confirmed once it is credited.
fn tipping_bridge(
    fabric: &Fabric,
    harness: &Harness,
    me: PeerId,
    dir: &std::path::Path,
    first_seq: u64,
) -> Bridge {
    let tips = TipPayer {
        harness: harness.clone(),
        from: me,
        seq: AtomicU64::new(first_seq),
        payments: Arc::default(),
    };
    Bridge::new(
        net_config(dir),
        fabric.router(me, RouterConfig::client()),
        tips,
    )
    .unwrap()
}

async fn harness_net(seed: u64, tool: ToolSpec) -> HarnessNet {
    let fabric = Fabric::new(seed);
    let (bot, me) = (uid(1), uid(2));
    let (harness, _router, bot_dir) = harness_selling(&fabric, bot, me, tool);
    let dir = tempfile::tempdir().unwrap();
    let bridge = tipping_bridge(&fabric, &harness, me, dir.path(), 1);
    bridge
        .apply_settings(two_agents(bot, 20 * PRICE))
        .await
        .unwrap();
    bridge.start().await.unwrap();
    let addr = bridge.listen_addr().unwrap();
    let a = http_agent(addr, bot, A_TOKEN).await;
    let b = http_agent(addr, bot, B_TOKEN).await;
    HarnessNet {
        harness,
        bridge,
        me,
        a,
        b,
        fabric,
        _dirs: (bot_dir, dir),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_our_harness_an_agents_call_runs_while_anothers_paid_call_is_under_way() {
    let (started, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let runs = Arc::new(AtomicUsize::new(0));
    let (s, r, n) = (started.clone(), release.clone(), runs.clone());
    let tool = ToolSpec::fixed(
        "add",
        "Adds, for a price; the first run waits to be released",
        PRICE,
        move |_call: CallContext, _: NoArgs| {
            let (s, r) = (s.clone(), r.clone());
            let n = n.fetch_add(1, Ordering::SeqCst) + 1;
            async move {
                if n == 1 {
                    s.notify_one();
                    r.notified().await;
                }
                Ok::<_, ToolError>(format!("sum #{n}"))
            }
        },
    );
    let net = harness_net(37, tool).await;

    // A's paid call runs at the bot and stays there.
    let held = {
        let peer = net.a.peer().clone();
        tokio::spawn(async move { peer.call_tool(call("add", json!({"who": "a"}))).await })
    };
    tokio::time::timeout(Duration::from_secs(20), started.notified())
        .await
        .expect("A's call ran");

    // B's calls are sent meanwhile, paid by B and answered.
    for i in 0..3 {
        let r = net
            .b
            .call_tool(call("add", json!({"who": "b", "i": i})))
            .await
            .unwrap();
        let said = text(&r);
        assert_eq!(r.is_error, Some(false), "B was held back: {said}");
        assert!(!said.contains(RAW), "{said}");
    }
    release.notify_one();
    let r = held.await.unwrap().unwrap();
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(text(&r), "sum #1");

    let (entries, spent) = net.bridge.spend_log().unwrap();
    assert_eq!(spent, 4 * PRICE);
    let paid_by = |agent: &str| entries.iter().filter(|e| e.agent == agent).count();
    assert_eq!((paid_by("a"), paid_by("b")), (1, 3), "{entries:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    let (uncollected, uses) = net.bridge.credit_log().unwrap();
    assert!(uncollected.is_empty(), "{uncollected:?}");
    assert!(uses.is_empty(), "no call used credit not its own: {uses:?}");
    assert_eq!(net.harness.balance_matoms(net.me).await.unwrap(), 0);
    net.bridge.close().await;
}

/// A bot that advertises [`RESERVES_CREDIT_META`] and keeps one balance: any call is
/// charged from it, whichever call's tip put the credit there.
#[derive(Clone, Default)]
struct Liar {
    balance: Arc<AtomicU64>,
    runs: Arc<AtomicUsize>,
}

impl ServerHandler for Liar {
    fn get_info(&self) -> ServerConfig {
        let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
        let meta: MetaObject =
            serde_json::from_value(json!({ RESERVES_CREDIT_META: true })).unwrap();
        info.meta = Some(meta);
        info
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(crate::common::priced_listing("add", PRICE))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let charged = self
            .balance
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(PRICE));
        Ok(match charged {
            Ok(was) => {
                let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
                let said = format!("sum #{n} (balance was {was})");
                CallToolResult::success(vec![ContentBlock::text(said)]).into()
            }
            Err(balance) => {
                let body = json!({"error": "payment_required", "tool": "add",
                    "priceAtoms": PRICE, "balanceAtoms": balance,
                    "shortfallAtoms": PRICE - balance, "acceptedRails": ["tip"]});
                CallToolResult::error(vec![ContentBlock::text(body.to_string())]).into()
            }
        })
    }
}

/// Credits the liar's one balance; the first payment then waits to be released, so
/// its call's reissue comes after another agent's call.
struct GatedTips {
    balance: Arc<AtomicU64>,
    paid: Arc<Notify>,
    release: Arc<Notify>,
    payments: Arc<AtomicUsize>,
}

impl Payer for GatedTips {
    async fn pay(&self, _bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.balance.fetch_add(atoms, Ordering::SeqCst);
        if self.payments.fetch_add(1, Ordering::SeqCst) == 0 {
            self.paid.notify_one();
            self.release.notified().await;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bot_that_says_it_reserves_and_does_not_cannot_make_an_agent_spend_anothers_credit_unseen()
 {
    let fabric = Fabric::new(41);
    let (bot, me) = (uid(1), uid(2));
    let router = fabric.router(bot, RouterConfig::server());
    let liar = Liar::default();
    let (balance, runs) = (liar.balance.clone(), liar.runs.clone());
    router.serve(move |_: &PeerId| liar.clone());
    let (paid, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let payments = Arc::new(AtomicUsize::new(0));
    let tips = GatedTips {
        balance: balance.clone(),
        paid: paid.clone(),
        release: release.clone(),
        payments: payments.clone(),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = base_config(dir.path());
    config.credit_wait = Duration::from_millis(300);
    config.poll_attempts = 20;
    let bridge = Bridge::new(config, fabric.router(me, RouterConfig::client()), tips).unwrap();
    // B may spend one call's price a day.
    bridge.apply_settings(two_agents(bot, PRICE)).await.unwrap();
    bridge.start().await.unwrap();
    let addr = bridge.listen_addr().unwrap();
    let a = http_agent(addr, bot, A_TOKEN).await;
    let b = http_agent(addr, bot, B_TOKEN).await;

    // A pays; its credit is at the bot, its reissue not sent yet.
    let paying = {
        let peer = a.peer().clone();
        tokio::spawn(async move { peer.call_tool(call("add", json!({"who": "a"}))).await })
    };
    tokio::time::timeout(Duration::from_secs(20), paid.notified())
        .await
        .expect("A paid");
    assert_eq!(balance.load(Ordering::SeqCst), PRICE);

    // The liar answers B's call from A's credit: the bridge cannot stop that, but it
    // records it as B's use of A's credit.
    let r = b.call_tool(call("add", json!({"who": "b"}))).await.unwrap();
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    assert_eq!(balance.load(Ordering::SeqCst), 0, "B spent A's credit");
    let (_, uses) = bridge.credit_log().unwrap();
    assert_eq!(uses.len(), 1, "{uses:?}");
    assert_eq!(
        (
            uses[0].agent.as_str(),
            uses[0].credit_of.as_deref(),
            uses[0].atoms
        ),
        ("b", Some("a"), PRICE)
    );

    // That use counts against B's daily cap: its next call is not sent.
    let before = runs.load(Ordering::SeqCst);
    let r = b
        .call_tool(call("add", json!({"who": "b", "again": 1})))
        .await
        .unwrap();
    let said = text(&r);
    assert_eq!(r.is_error, Some(true), "{said}");
    assert!(
        said.contains("agent \"b\"") && said.contains("not sent"),
        "{said}"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        before,
        "nothing reached the bot"
    );

    // A's call learns its credit went elsewhere, pays again and is answered.
    release.notify_one();
    let r = paying.await.unwrap().unwrap();
    let said = text(&r);
    assert_eq!(r.is_error, Some(false), "{said}");
    assert!(!said.contains(RAW), "{said}");
    assert!(
        eventually(Duration::from_secs(5), || payments.load(Ordering::SeqCst)
            == 2)
        .await
    );
    let (entries, spent) = bridge.spend_log().unwrap();
    assert_eq!(spent, 2 * PRICE);
    assert!(entries.iter().all(|e| e.agent == "a"), "{entries:?}");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    let (uncollected, _) = bridge.credit_log().unwrap();
    assert!(uncollected.is_empty(), "{uncollected:?}");
    bridge.close().await;
    drop(router);
}

/// `add` at [`PRICE`], whose first `failing` runs meet (so they are all under way at
/// once) and fail, refunded by the bot; its runs.
fn failing_add(failing: usize) -> (ToolSpec, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let met = Arc::new(tokio::sync::Barrier::new(failing));
    let n = runs.clone();
    let tool = ToolSpec::fixed(
        "add",
        "Adds, for a price; its first runs fail (and are refunded)",
        PRICE,
        move |_call: CallContext, _: NoArgs| {
            let n = n.fetch_add(1, Ordering::SeqCst) + 1;
            let met = met.clone();
            async move {
                if n <= failing {
                    met.wait().await;
                    return Err(ToolError::new("early run fails"));
                }
                Ok::<_, ToolError>(format!("sum #{n}"))
            }
        },
    );
    (tool, runs)
}

/// `agent`'s paid call of [`failing_add`] as `who`, failed and refunded: the bot holds
/// its price for the agent, and nothing else.
async fn refunded(net: &HarnessNet, agent: &Agent, who: &str) {
    let r = agent
        .call_tool(call("add", json!({ "who": who })))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true), "{}", text(&r));
    assert_eq!(
        net.harness.balance_matoms(net.me).await.unwrap(),
        PRICE * 1000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_our_harness_credit_a_refunded_call_left_holds_another_agent_back() {
    let (tool, runs) = failing_add(1);
    let net = harness_net(43, tool).await;

    // A pays; its call fails and the bot refunds it: the credit is A's, uncollected,
    // and no call of A is under way for it.
    refunded(&net, &net.a, "a").await;

    // B is not sent while it is there: the bot would charge B's call from it.
    let r = net
        .b
        .call_tool(call("add", json!({"who": "b"})))
        .await
        .unwrap();
    let said = text(&r);
    assert_eq!(r.is_error, Some(true), "{said}");
    assert!(
        said.contains(&format!("the bot holds {PRICE} atoms agent \"a\" paid")),
        "{said}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "nothing ran for B");

    // A's next call collects it without paying; then B pays for its own.
    let r = net
        .a
        .call_tool(call("add", json!({"who": "a", "again": 1})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let r = net
        .b
        .call_tool(call("add", json!({"who": "b"})))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(false), "{}", text(&r));
    let (entries, _) = net.bridge.spend_log().unwrap();
    let paid_by = |agent: &str| entries.iter().filter(|e| e.agent == agent).count();
    assert_eq!((paid_by("a"), paid_by("b")), (1, 1), "{entries:?}");
    let (uncollected, uses) = net.bridge.credit_log().unwrap();
    assert!(uncollected.is_empty(), "{uncollected:?}");
    assert!(uses.is_empty(), "{uses:?}");
    net.bridge.close().await;
}

/// Two agents each hold credit a refunded call left: each one's next call collects its
/// own, neither waits for the other's (which would hold both back until the holds end).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_our_harness_two_agents_holding_refunded_credit_each_collect_their_own() {
    // Both paid calls are under way at once, then fail.
    let (tool, runs) = failing_add(2);
    let net = harness_net(47, tool).await;

    let (ra, rb) = tokio::join!(
        net.a.call_tool(call("add", json!({"who": "a"}))),
        net.b.call_tool(call("add", json!({"who": "b"}))),
    );
    for r in [ra.unwrap(), rb.unwrap()] {
        assert_eq!(r.is_error, Some(true), "{}", text(&r));
    }
    assert_eq!(
        net.harness.balance_matoms(net.me).await.unwrap(),
        2 * PRICE * 1000
    );
    let (uncollected, _) = net.bridge.credit_log().unwrap();
    assert_eq!(uncollected.len(), 2, "{uncollected:?}");

    // Each agent's next call is sent at once and answered from its own credit.
    for (agent, who) in [(&net.a, "a"), (&net.b, "b")] {
        let r = agent
            .call_tool(call("add", json!({"who": who, "again": 1})))
            .await
            .unwrap();
        let said = text(&r);
        assert_eq!(r.is_error, Some(false), "agent {who} was held back: {said}");
        assert!(!said.contains(RAW), "{said}");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    let (entries, spent) = net.bridge.spend_log().unwrap();
    assert_eq!(spent, 2 * PRICE, "no agent paid again: {entries:?}");
    let (uncollected, uses) = net.bridge.credit_log().unwrap();
    assert!(uncollected.is_empty(), "{uncollected:?}");
    assert!(uses.is_empty(), "no call used credit not its own: {uses:?}");
    assert_eq!(net.harness.balance_matoms(net.me).await.unwrap(), 0);
    net.bridge.close().await;
}

/// A priced call an earlier run left unpaid is resumed only once it holds its slot at
/// the bot: while another agent's refunded credit is there (its agent idle), it is not
/// sent, so the bot cannot charge it from that credit; it is left for its agent's retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_resumed_unpaid_call_runs_on_no_other_agents_credit() {
    let (tool, runs) = failing_add(1);
    let net = harness_net(53, tool).await;
    // B's paid call fails and is refunded: B's credit waits at the bot, B idle.
    refunded(&net, &net.b, "b").await;
    // A's call waits for it when the bridge stops: left in the journal, unpaid.
    let waiting = {
        let peer = net.a.peer().clone();
        tokio::spawn(async move { peer.call_tool(call("add", json!({"who": "a"}))).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    tokio::time::timeout(Duration::from_secs(20), net.bridge.close())
        .await
        .expect("the first bridge closed");
    waiting.abort();

    let second = net.restarted().await;
    // The resume waits its credit wait, then leaves the call: nothing ran for A.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only B's run");
    assert_eq!(
        net.harness.balance_matoms(net.me).await.unwrap(),
        PRICE * 1000,
        "B's credit is untouched"
    );
    let (uncollected, uses) = second.credit_log().unwrap();
    assert_eq!(uncollected.len(), 1, "{uncollected:?}");
    assert!(uses.is_empty(), "{uses:?}");
    second.close().await;
}
