//! `brmcp directory` as a process on a devnet, with an in-process provider whose paid
//! test tool waits for the test to release it:
//! - SIGINT with the paid test in flight stops the directory within
//!   [`STOP_WITHIN`]; the test stays `testing`, and after a restart it completes with
//!   one payment in total (the directory's spend, the tips the provider received and
//!   the provider's ledger agree);
//! - `brmcp bridge bots add --from-directory` leaves none of the directory's replies
//!   unacknowledged on its client, whether the provider is listed or not.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use brmcp::adapters::{BoxError, PeerId, Router, RouterConfig};
use brmcp::clientrpc::ReceivedTip;
use brmcp::clientrpc::{BotConfig, ClientRpcConfig, ClientRpcHost, Streams, TipOutcome};
use brmcp::directory::{Outcome, STOP_WITHIN, SpendState, State, Store};
use brmcp::server::{CallState, Harness, NoArgs, Tip, ToolSpec};
use brmcp_devnet::{Devnet, NodeInfo, NodeSpec, StreamKind};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::processes::{Procs, brmcp, spawn, wait_for};

/// The price of the provider's test tool, in atoms.
const PRICE: u64 = 500;
/// The directory's listing fee, in atoms.
const FEE: u64 = 1000;
/// The registration's test budget, in atoms.
const BUDGET: u64 = 2000;
/// How long a step on the devnet may take on a loaded machine.
const STEP: Duration = Duration::from_secs(60);
/// How often the test looks again.
const POLL: Duration = Duration::from_millis(50);

/// Waits until `check` holds, for at most [`STEP`].
async fn until(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(POLL).await;
    }
}

fn host(node: &NodeInfo) -> ClientRpcHost {
    let bot = BotConfig::load(&node.config_path).expect("bot config");
    ClientRpcHost::new(ClientRpcConfig::from_bot_config(&bot)).expect("host")
}

/// The provider: a harness selling `slow`, which waits for the gate; tips credited.
struct Provider {
    harness: Harness,
    host: ClientRpcHost,
    router: Router,
    /// Executions of `slow` started.
    runs: Arc<AtomicUsize>,
    gate: watch::Sender<bool>,
}

async fn provider(node: &NodeInfo, data: &Path, open: bool) -> Provider {
    let (gate, gated) = watch::channel(open);
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let harness = Harness::builder()
        .data_dir(data)
        .allow(|_| true)
        .tool(ToolSpec::fixed(
            "slow",
            "answers once released",
            PRICE,
            move |_, _: NoArgs| {
                counter.fetch_add(1, Ordering::SeqCst);
                let mut gated = gated.clone();
                async move {
                    let _ = gated.wait_for(|open| *open).await;
                    Ok(json!({"answer": "released"}))
                }
            },
        ))
        .build()
        .expect("provider harness");
    let host = host(node);
    let router = harness.start(host.clone()).expect("provider router");
    let credit = harness.clone();
    let tips = move |tip: ReceivedTip| {
        let harness = credit.clone();
        async move {
            let matoms = u64::try_from(tip.amount_matoms).unwrap_or(0);
            harness
                .record_tip(Tip {
                    seq: tip.sequence_id,
                    caller: tip.uid,
                    matoms,
                })
                .await
                .map(drop)
                .map_err(|e| BoxError::from(e.to_string()))
        }
    };
    host.connect(Streams::new().pms(router.clone()).tips(tips))
        .await
        .expect("provider connects");
    Provider {
        harness,
        host,
        router,
        runs,
        gate,
    }
}

async fn call(session: &RunningService<RoleClient, ()>, tool: &str, args: Value) -> Value {
    let result = session
        .call_tool(
            CallToolRequestParams::new(tool.to_owned())
                .with_arguments(args.as_object().cloned().unwrap_or_default()),
        )
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    let text = result.content[0].as_text().expect("text").text.clone();
    assert_ne!(result.is_error, Some(true), "{tool}: {text}");
    serde_json::from_str(&text).expect("JSON answer")
}

/// A devnet of the directory, the provider, the operator and an agent, the
/// directory's data directory with its policy, and the provider registered and paid
/// up (its test starts as soon as the directory runs).
struct World {
    tmp: tempfile::TempDir,
    devnet: Devnet,
    dir: NodeInfo,
    op: NodeInfo,
    agent: NodeInfo,
    provider: Provider,
    prov_uid: PeerId,
    data: PathBuf,
}

async fn world(open: bool) -> World {
    let tmp = tempfile::tempdir().expect("temp dir");
    let specs = ["dir", "prov", "op", "agent"].map(NodeSpec::new).to_vec();
    let devnet = Devnet::start_with(tmp.path().join("devnet"), specs, Default::default())
        .await
        .expect("devnet");
    let [dir, prov, op, agent] = <[NodeInfo; 4]>::try_from(devnet.nodes()).expect("4 nodes");
    let data = tmp.path().join("directory");
    std::fs::create_dir_all(&data).expect("directory data");
    let policy = json!({
        "admin_uids": [op.uid_hex()],
        "listing_fee_atoms": FEE,
        "test_budget_max_atoms": 100_000,
        "calls_per_minute": 1000,
    });
    std::fs::write(data.join("brmcpdir.json"), policy.to_string()).expect("policy");
    let provider = provider(&prov, &tmp.path().join("provider"), open).await;
    World {
        prov_uid: PeerId::from_bytes(prov.uid),
        tmp,
        devnet,
        dir,
        op,
        agent,
        provider,
        data,
    }
}

impl World {
    fn dir_uid(&self) -> PeerId {
        PeerId::from_bytes(self.dir.uid)
    }

    /// Starts `brmcp directory` under umask 000 (its files must be private all the
    /// same), waiting until it serves.
    fn start_directory(&self, procs: &mut Procs) {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"umask 000; exec "$0" "$@""#)
            .arg(env!("CARGO_BIN_EXE_brmcp"))
            .args(["directory", "--datadir"])
            .arg(&self.data)
            .arg("--rpc-config")
            .arg(&self.dir.config_path);
        let lines = spawn(procs, cmd);
        wait_for(&lines, "Ctrl-C stops");
    }

    /// The provider registers and tips the fee and the test budget.
    async fn register_and_fund(&self) {
        let session = ().serve(self.provider.router.dial(self.dir_uid()).expect("dial"));
        let session = session.await.expect("session to the directory");
        let status = call(
            &session,
            "register",
            json!({
                "description": "waits, then answers",
                "test": {"tool": "slow", "maxAtoms": BUDGET},
            }),
        )
        .await;
        assert_eq!(status["state"], "awaiting_funding", "{status}");
        let _ = session.cancel().await;
        let tipped = self
            .provider
            .host
            .tip(self.dir_uid(), FEE + BUDGET)
            .await
            .expect("tip");
        assert!(matches!(tipped, TipOutcome::Paid { .. }), "{tipped:?}");
    }

    /// The provider's registration as the directory stored it.
    fn reg(&self) -> Option<brmcp::directory::Registration> {
        let store = Store::open(&self.data).expect("store");
        store
            .get(&self.prov_uid.to_string())
            .expect("entry")
            .entry
            .reg
    }

    fn reg_state(&self) -> Option<State> {
        self.reg().map(|r| r.state)
    }

    /// The tips the provider received, in milliatoms.
    fn tips_received(&self) -> Vec<i64> {
        let prov = self.devnet.node_by_nick("prov").expect("prov");
        self.devnet
            .log(prov.id, StreamKind::TipReceived)
            .expect("tip log")
            .iter()
            .map(|e| {
                let tip: ReceivedTip = serde_json::from_value(e.params.clone()).expect("tip");
                assert_eq!(
                    tip.uid,
                    self.dir_uid(),
                    "only the directory tips the provider"
                );
                tip.amount_matoms
            })
            .collect()
    }
}

/// SIGINT to the last process of `procs`; how long it took to exit, and its status.
fn interrupt(procs: &mut Procs) -> (Duration, std::process::ExitStatus) {
    let child = procs.0.last_mut().expect("a process");
    let sent = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(sent.success());
    let start = Instant::now();
    // Past the bound (and a margin for the test's own polling) the test fails.
    while start.elapsed() < STOP_WITHIN + Duration::from_secs(5) {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return (start.elapsed(), status);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("brmcp directory still running {STOP_WITHIN:?} after SIGINT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_the_directory_mid_test_and_a_restart_completes_it_paying_once() {
    let w = world(false).await;
    let mut procs = Procs(Vec::new());
    w.start_directory(&mut procs);
    w.register_and_fund().await;

    // The test is paid for and running at the provider, which holds it.
    until("the paid test running at the provider", || {
        w.provider.runs.load(Ordering::SeqCst) == 1
    })
    .await;
    let (took, status) = interrupt(&mut procs);
    assert!(status.success(), "{status:?}");
    assert!(took <= STOP_WITHIN, "stopped in {took:?}");
    let reg = w.reg().expect("a registration");
    assert_eq!(reg.state, State::Testing, "a shutdown is not a failure");
    assert!(!reg.call_key.is_empty());
    let key = reg.call_key.clone();
    let spends = Store::open(&w.data)
        .expect("store")
        .spends()
        .expect("spends");
    assert_eq!(spends.len(), 1, "{spends:?}");
    assert_eq!(spends[0].state, SpendState::Paid);

    // Restarted, the directory asks again under the same key; the provider finishes
    // the one execution it started and answers both askings with it.
    w.start_directory(&mut procs);
    w.provider.gate.send_replace(true);
    until("the test completed", || {
        w.reg_state() == Some(State::PendingReview)
    })
    .await;
    let reg = w.reg().expect("a registration");
    assert_eq!(reg.test_outcome, Some(Outcome::Ok), "{}", reg.test_err);
    assert_eq!(reg.call_key, key, "the same key after the restart");
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 1, "one execution");

    // One payment: the directory's spend, the tip the provider received and the
    // charge in the provider's ledger.
    let spends = Store::open(&w.data)
        .expect("store")
        .spends()
        .expect("spends");
    assert_eq!(spends.len(), 1, "{spends:?}");
    assert_eq!(
        (spends[0].state, spends[0].atoms),
        (SpendState::Paid, PRICE as i64)
    );
    assert_eq!(reg.paid_atoms, PRICE as i64);
    assert_eq!(w.tips_received(), vec![PRICE as i64 * 1000]);
    let ledger = w.provider.harness.ledger().expect("provider ledger");
    let charged: Vec<_> = ledger
        .journal(Some(&w.dir_uid()), 100)
        .expect("journal")
        .into_iter()
        .filter(|e| e.state == CallState::Completed)
        .collect();
    assert_eq!(charged.len(), 1, "{charged:?}");
    assert_eq!(charged[0].price_atoms, PRICE);
    assert_eq!(charged[0].call_key.as_deref(), Some(key.as_str()));
    let left = ledger
        .balances()
        .expect("balances")
        .into_iter()
        .find(|b| b.caller == w.dir_uid())
        .map_or(0, |b| b.matoms);
    assert_eq!(left, 0, "the tip paid for the one call");

    let (took, status) = interrupt(&mut procs);
    assert!(
        status.success() && took <= STOP_WITHIN,
        "{status:?} {took:?}"
    );
    w.provider.host.close();
    w.devnet.shutdown().await;
}

/// Runs `brmcp bridge ... bots add --from-directory uid` on the agent's client.
fn bots_add(w: &World, bridge: &Path, uid: &str) -> std::process::Output {
    brmcp(&[
        "bridge",
        "--datadir",
        bridge.to_str().expect("utf-8"),
        "--rpc-config",
        w.agent.config_path.to_str().expect("utf-8"),
        "bots",
        "add",
        "--from-directory",
        uid,
        "--directory",
        "dir",
    ])
    .output()
    .expect("bots add")
}

/// The agent client's PMs: how many, and whether every one is acknowledged.
fn agent_pms(w: &World) -> (usize, bool) {
    let log = w.devnet.log(w.agent.id, StreamKind::Pm).expect("PM log");
    (log.len(), log.iter().all(|e| e.acked))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bots_add_from_directory_acknowledges_the_replies_it_handled() {
    let w = world(true).await;
    let mut procs = Procs(Vec::new());
    w.start_directory(&mut procs);
    w.register_and_fund().await;
    until("the test passed", || {
        w.reg_state() == Some(State::PendingReview)
    })
    .await;
    // The operator approves: the provider is listed.
    let op_host = host(&w.op);
    let op_router = Router::new(op_host.clone(), RouterConfig::client());
    op_host
        .connect(Streams::new().pms(op_router.clone()))
        .await
        .expect("operator connects");
    let admin = ().serve(op_router.dial(w.dir_uid()).expect("dial"));
    let admin = admin.await.expect("admin session");
    let approved = call(&admin, "approve", json!({"uid": w.prov_uid.to_string()})).await;
    assert_eq!(approved["state"], "listed", "{approved}");
    let _ = admin.cancel().await;

    let bridge = w.tmp.path().join("bridge");
    std::fs::create_dir_all(&bridge).expect("bridge dir");
    let settings = json!({"directories": [{"uid": w.dir_uid().to_string(), "name": "dir"}]});
    std::fs::write(bridge.join("mcpclient.json"), settings.to_string()).expect("settings");

    // Listed: shown and added; every reply it read is acknowledged when it exits.
    let out = bots_add(&w, &bridge, &w.prov_uid.to_string());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("added bot"), "{said}");
    let (pms, acked) = agent_pms(&w);
    assert!(pms > 0, "the directory answered over PMs");
    assert!(acked, "{pms} PMs, not all acknowledged: {said}");

    // Not listed: refused, and its replies acknowledged all the same.
    let unlisted = PeerId::from_bytes(w.op.uid).to_string();
    let out = bots_add(&w, &bridge, &unlisted);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success());
    assert!(said.contains("no listing"), "{said}");
    let (more, acked) = agent_pms(&w);
    assert!(more > pms, "the directory answered again");
    assert!(acked, "{more} PMs, not all acknowledged: {said}");

    op_router.close();
    op_host.close();
    let (_, status) = interrupt(&mut procs);
    assert!(status.success(), "{status:?}");

    // Everything the directory wrote (store, ledger, PM journal, snapshot key, audit
    // log, their sidecars) is its owner's only.
    let mut loose = Vec::new();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&w.data).expect("read dir") {
        let path = entry.expect("entry").path();
        let mode = std::fs::symlink_metadata(&path)
            .expect("lstat")
            .permissions()
            .mode()
            & 0o777;
        files.push(
            path.file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned(),
        );
        if mode != 0o600 && path.file_name() != Some("brmcpdir.json".as_ref()) {
            loose.push(format!("{} {mode:o}", path.display()));
        }
    }
    for file in [
        "directory.sqlite",
        "brmcp.sqlite",
        "snapshotkey.json",
        "adminlog.json",
    ] {
        assert!(files.iter().any(|f| f == file), "{file} in {files:?}");
    }
    let dir_mode = std::fs::metadata(&w.data)
        .expect("data")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700, "the data directory is tightened");
    assert!(loose.is_empty(), "not private: {loose:?}");
    w.provider.host.close();
    w.devnet.shutdown().await;
}
