//! A call an earlier run of the bridge sent and never paid for may still wait at a bot
//! that reserves credit (our harness), and the bot reserves the next tip of its price
//! for it, oldest first, whichever agent paid that tip. Its agent's retry takes the call
//! up alone: while another agent's paid call is under way there it is not sent, so it
//! never runs on that agent's tip; once that call is done, the retry pays for itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, PeerId, RouterConfig};
use brmcp::bridge::{AgentEntry, Bridge, Payer, Settings};
use brmcp::server::{CallContext, NoArgs, ToolError, ToolSpec};
use serde_json::json;
use tokio::sync::Notify;

use crate::common::harness_bot::{TipPayer, harness_selling};
use crate::common::{autopay, base_config, call, http_agent, served_as_from, text};

/// The price of `add`, in atoms.
const PRICE: u64 = 1000;
const A_TOKEN: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const B_TOKEN: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

/// Generous on a loaded machine; each step takes milliseconds.
const WITHIN: Duration = Duration::from_secs(30);

fn settings(bot: PeerId) -> Settings {
    let mut s = autopay(bot);
    s.enabled = true;
    s.token = "dddddddddddddddddddddddddddddddd".into();
    s.agents = vec![
        AgentEntry::new("a", A_TOKEN, PRICE, 20 * PRICE, Vec::new()),
        AgentEntry::new("b", B_TOKEN, PRICE, 20 * PRICE, Vec::new()),
    ];
    s
}

/// Tips recorded at the harness; the first payment, once its tip is credited, is not
/// confirmed until released.
struct FirstHeld {
    tips: TipPayer,
    held: AtomicBool,
    credited: Arc<Notify>,
    release: Arc<Notify>,
}

impl Payer for FirstHeld {
    async fn pay(&self, bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.tips.pay(bot, atoms).await?;
        if !self.held.swap(true, Ordering::SeqCst) {
            self.credited.notify_one();
            self.release.notified().await;
        }
        Ok(())
    }
}

/// `bridge`'s HTTP endpoints served on loopback without starting it (so nothing an
/// earlier run left is resumed: the agent's retry takes it up); the address to dial.
async fn served(bridge: &Bridge) -> SocketAddr {
    served_as_from(bridge, "127.0.0.1:1".parse().unwrap()).await
}

fn config(dir: &std::path::Path) -> brmcp::bridge::Config {
    let mut config = base_config(dir);
    config.credit_wait = Duration::from_millis(300);
    config.bot_calls_per_minute = 6000;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_call_sent_unpaid_before_a_restart_never_runs_on_another_agents_tip() {
    let fabric = Fabric::new(59);
    let (bot, me) = (uid(1), uid(2));
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let tool = ToolSpec::fixed(
        "add",
        "Adds, for a price",
        PRICE,
        move |_call: CallContext, _: NoArgs| {
            let n = counted.fetch_add(1, Ordering::SeqCst) + 1;
            async move { Ok::<_, ToolError>(format!("sum #{n}")) }
        },
    );
    let (harness, _bot_router, _bot_dir) = harness_selling(&fabric, bot, me, tool);
    let dir = tempfile::tempdir().unwrap();
    let tips = |seq| TipPayer {
        harness: harness.clone(),
        from: me,
        seq: AtomicU64::new(seq),
        payments: Arc::default(),
    };

    // Run 1: A's call reaches the bot, which refuses it for payment and keeps it
    // waiting; the bridge never hears the refusal (it is offline), and stops.
    let first = Bridge::new(
        config(dir.path()),
        fabric.router(me, RouterConfig::client()),
        tips(1),
    )
    .unwrap();
    first.apply_settings(settings(bot)).await.unwrap();
    let a = http_agent(served(&first).await, bot, A_TOKEN).await;
    // The session is up before the bridge goes offline.
    a.list_tools(None).await.unwrap();
    fabric.set_online(&me, false);
    let cut = {
        let peer = a.peer().clone();
        tokio::spawn(async move { peer.call_tool(call("add", json!({"who": "a"}))).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::time::timeout(WITHIN, first.close()).await.unwrap();
    cut.abort();
    drop(a);
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // Run 2: B's paid call; its tip is credited at the bot, which reserves it for A's
    // older waiting call, and B's payment is not confirmed yet.
    let (credited, release) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let second = Bridge::new(
        config(dir.path()),
        fabric.router(me, RouterConfig::client()),
        FirstHeld {
            tips: tips(100),
            held: AtomicBool::new(false),
            credited: credited.clone(),
            release: release.clone(),
        },
    )
    .unwrap();
    fabric.set_online(&me, true);
    second.apply_settings(settings(bot)).await.unwrap();
    let addr = served(&second).await;
    let (a, b) = (
        http_agent(addr, bot, A_TOKEN).await,
        http_agent(addr, bot, B_TOKEN).await,
    );
    let b_call = {
        let peer = b.peer().clone();
        tokio::spawn(async move { peer.call_tool(call("add", json!({"who": "b"}))).await })
    };
    tokio::time::timeout(WITHIN, credited.notified())
        .await
        .expect("B's tip credited");

    // A retries its call: taken up where it stood, it waits for B's call, in vain
    // within the credit wait, and is not sent.
    let retry = tokio::time::timeout(WITHIN, a.call_tool(call("add", json!({"who": "a"}))))
        .await
        .expect("an answer")
        .unwrap();
    let said = text(&retry);
    assert_eq!(retry.is_error, Some(true), "{said}");
    assert!(
        said.contains("agent \"b\" has paid calls under way"),
        "{said}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran on B's tip");

    // B's payment is confirmed: its call runs, on its own tip.
    release.notify_one();
    let b_result = tokio::time::timeout(WITHIN, b_call)
        .await
        .expect("B answered")
        .unwrap()
        .unwrap();
    assert_eq!(b_result.is_error, Some(false), "{}", text(&b_result));

    // A's next call pays for itself.
    let again = tokio::time::timeout(WITHIN, a.call_tool(call("add", json!({"who": "a"}))))
        .await
        .expect("an answer")
        .unwrap();
    assert_eq!(again.is_error, Some(false), "{}", text(&again));
    assert_eq!(runs.load(Ordering::SeqCst), 2);

    let (entries, spent) = second.spend_log().unwrap();
    let paid_by = |agent: &str| entries.iter().filter(|e| e.agent == agent).count();
    assert_eq!((paid_by("a"), paid_by("b")), (1, 1), "{entries:?}");
    assert_eq!(spent, 2 * PRICE);
    let (uncollected, uses) = second.credit_log().unwrap();
    assert!(uncollected.is_empty(), "{uncollected:?}");
    assert!(
        uses.is_empty(),
        "no call used credit not its agent's: {uses:?}"
    );
    assert_eq!(harness.balance_matoms(me).await.unwrap(), 0);
    second.close().await;
}
