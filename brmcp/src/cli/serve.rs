//! `brmcp serve`: the serving harness on a running Bison Relay client, with the tools of
//! the upstream MCP servers `brmcp.json` names or else the example tools `echo` (free)
//! and `fortune` (10,000 atoms); and the operator's ledger and status commands. With a
//! `directory` block, it is also a registrant: it serves `listing_invite` and registers
//! with the block's directories at every start.

pub(crate) mod announce;
mod host;
mod operator;
mod ui;
pub(crate) use host::{connect, host_from, start_serving};
use operator::{ServeAction, operate};

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{Router, RouterConfig};
use brmcp_clientrpc::ClientRpcHost;
use clap::Args;
use serde_json::json;
use tokio::sync::Notify;

use super::CliError;
use crate::server::upstream::{STATUS_FILE, UpstreamStatus, Upstreams};
use crate::server::{
    CallContext, Clock, DynamicTools, Harness, HarnessBuilder, ServeConfig, SystemClock, ToolError,
    ToolSpec, follow_config,
};
use crate::status::{ConnectionWatch, Publisher, ServeSummary, Snapshot};

/// The clientrpc connection file of a data directory (bisonbotkit format).
pub(crate) const RPC_CONFIG: &str = "brmcp-serve.conf";

/// The operator's settings file of a data directory.
pub(crate) use crate::server::CONFIG_FILE as SERVE_CONFIG;

/// Price of the example `fortune` tool: 10,000 atoms (0.0001 DCR), as the Go example.
pub(crate) const FORTUNE_ATOMS: u64 = 10_000;

/// How long a graceful stop waits for the answers to the calls it stops to be sent:
/// 5 seconds, a few PM round trips to the client; a caller not told by then is told by
/// the next start.
const STOP_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The example fortunes, as the Go example service has five.
const FORTUNES: [&str; 5] = [
    "A relay in time saves nine.",
    "Your next tip will be returned tenfold.",
    "Private messages make good neighbours.",
    "The best tool is the one that answers.",
    "Patience: store and forward always delivers.",
];

#[derive(Debug, Args)]
pub(super) struct ServeArgs {
    /// Data directory: brmcp-serve.conf, brmcp.json, the ledger and the PM journal.
    #[arg(long, value_name = "DIR")]
    datadir: PathBuf,
    /// The clientrpc connection file (default: <datadir>/brmcp-serve.conf).
    #[arg(long, value_name = "FILE")]
    rpc_config: Option<PathBuf>,
    /// Serve the operator's page (calls, revenue, callers, upstreams) on this address,
    /// loopback unless --ui-allow-remote; `brmcp serve --datadir DIR ui` prints its
    /// login URL. Off without it.
    #[arg(long, value_name = "ADDR")]
    ui_listen: Option<std::net::SocketAddr>,
    /// Allow a non-loopback --ui-listen address (the page still takes the operator
    /// secret).
    #[arg(long, requires = "ui_listen")]
    ui_allow_remote: bool,
    #[command(subcommand)]
    action: Option<ServeAction>,
}

pub(super) fn run(args: ServeArgs) -> Result<ExitCode, CliError> {
    match args.action {
        None => super::runtime()?.block_on(serve(&args.datadir, args.rpc_config.clone(), &args)),
        Some(ServeAction::Announce {
            name,
            description,
            out,
        }) => super::runtime()?.block_on(announce::announce(
            &args.datadir,
            args.rpc_config.clone(),
            announce::AnnounceArgs {
                name,
                description,
                out,
            },
        )),
        Some(action) => operate(&args.datadir, action),
    }
}

fn now() -> UnixTime {
    SystemClock.now()
}

/// The example tools: `echo` (free) and `fortune` (paid).
pub(crate) fn example_tools() -> Vec<ToolSpec> {
    #[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
    #[schemars(crate = "rmcp::schemars")]
    struct EchoArgs {
        /// The text to echo back.
        text: String,
    }
    let echo = ToolSpec::free(
        "echo",
        "Echo the text back (free)",
        |_: CallContext, args: EchoArgs| async move { Ok(json!({ "echo": args.text })) },
    );
    let fortune = ToolSpec::fixed(
        "fortune",
        "A fortune (10000 atoms)",
        FORTUNE_ATOMS,
        |call: CallContext, _: crate::server::NoArgs| async move {
            let pick = call
                .caller()
                .as_bytes()
                .iter()
                .map(|&b| usize::from(b))
                .sum::<usize>()
                + usize::try_from(now().secs()).unwrap_or(0);
            Ok::<_, ToolError>(json!({ "fortune": FORTUNES[pick % FORTUNES.len()] }))
        },
    );
    vec![echo, fortune]
}

/// Writes a clientrpc connection file for brclient's defaults if `path` has none;
/// `true` when it did.
pub(crate) fn write_rpc_template(path: &Path) -> Result<bool, CliError> {
    if path.exists() {
        return Ok(false);
    }
    // Absolute paths: the Go kit reading the same file does not expand `~`.
    let brclient = std::env::var_os("HOME")
        .map(|home| Path::new(&home).join(".brclient"))
        .unwrap_or_else(|| "/path/to/.brclient".into());
    let brclient = brclient.display();
    let template = format!(
        "brrpcurl=wss://127.0.0.1:7676/ws\n\
         servercertpath={brclient}/rpc.cert\n\
         clientcertpath={brclient}/rpc-client.cert\n\
         clientkeypath={brclient}/rpc-client.key\n\
         rpcuser=\n\
         rpcpass=\n"
    );
    // It will hold `rpcpass`: the owner's only, and never through a planted link.
    crate::secure_fs::write_new(path, template.as_bytes())
        .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    eprintln!(
        "wrote {}: point it at your brclient's clientrpc (URL and certificate files)",
        path.display()
    );
    Ok(true)
}

/// Writes what a first run needs; `true` when something was written.
fn first_run(datadir: &Path, rpc_config: &Path) -> Result<(ServeConfig, bool), CliError> {
    crate::secure_fs::create_dir(datadir)
        .map_err(|e| CliError(format!("{}: {e}", datadir.display())))?;
    let mut wrote = write_rpc_template(rpc_config)?;
    let path = datadir.join(SERVE_CONFIG);
    let (config, created) = ServeConfig::load_or_create(&path)?;
    if created {
        eprintln!(
            "wrote {}: add the user ids allowed to call your tools to allowed_uids",
            path.display()
        );
        wrote = true;
    }
    Ok((config, wrote))
}

async fn serve(
    datadir: &Path,
    rpc_config: Option<PathBuf>,
    args: &ServeArgs,
) -> Result<ExitCode, CliError> {
    let rpc_config = rpc_config.unwrap_or_else(|| datadir.join(RPC_CONFIG));
    let (config, wrote) = first_run(datadir, &rpc_config)?;
    if wrote {
        eprintln!(
            "edit the file(s) above, then run `brmcp serve --datadir {}` again",
            datadir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let host = host_from(&rpc_config)?;
    let (harness, upstreams) = start_serving(datadir, &config, &host).await?;
    let upstreams = Arc::new(upstreams);
    let page = match args.ui_listen {
        Some(listen) => {
            Some(ui::start(datadir, listen, args.ui_allow_remote, &harness, &upstreams).await?)
        }
        None => None,
    };
    let page_addr = page.as_ref().map(|p| p.addr);
    let publisher = publish_status(datadir, &harness, &host, &upstreams, page_addr);
    let hangup = Arc::new(Notify::new());
    let _watch = follow_config(
        &harness,
        datadir.join(SERVE_CONFIG),
        config.clone(),
        Some(hangup.clone()),
        Some(publisher.wake()),
    );
    tokio::spawn(on_hangup(hangup));
    let me = host.public_identity().await?;
    let uid = me.peer_id().map_or_else(|| "?".into(), |p| p.to_string());
    let what = if config.upstreams.is_empty() {
        "echo and fortune".to_owned()
    } else {
        let names: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
        format!("upstream(s) {}", names.join(", "))
    };
    eprintln!(
        "serving {what} as {uid} ({}) for {} allowed caller(s); Ctrl-C stops",
        me.nick,
        config.allowed_uids.len()
    );
    eprintln!(
        "edits to allowed_uids and calls_per_minute in {} apply while serving (at once on SIGHUP); \
         `brmcp serve --datadir {} status` shows the running server",
        datadir.join(SERVE_CONFIG).display(),
        datadir.display()
    );
    if let Some(addr) = page_addr {
        eprintln!(
            "operator page on http://{addr}/ui: `brmcp serve --datadir {} ui` prints its login URL",
            datadir.display()
        );
    }
    super::wait_for_interrupt().await;
    eprintln!("stopping");
    if let Some(page) = &page {
        page.stop();
    }
    // Calls in flight are refunded and answered before the sessions close (or told
    // by the next start); only then do the upstreams stop.
    let stopped = harness.stop(STOP_ANSWER_WAIT).await;
    if stopped.calls > 0 {
        eprintln!(
            "stopped {} call(s) in flight: refunded; {} caller(s) told, the rest are told at the next start",
            stopped.calls, stopped.told
        );
    }
    if stopped.free_told > 0 {
        eprintln!(
            "stopped {} free call(s) in flight; their callers told",
            stopped.free_told
        );
    }
    publisher.stop().await;
    // The publisher held the other handle; a snapshot still being written may too, and
    // dropping the last handle stops the upstreams as well.
    if let Ok(upstreams) = Arc::try_unwrap(upstreams) {
        upstreams.shutdown().await;
    }
    // What was recorded is cleared on the client, not left for the next consumer.
    host.flush_acks(brmcp_clientrpc::ACK_FLUSH_WAIT).await;
    host.close();
    Ok(ExitCode::SUCCESS)
}

/// Publishes the running server's status to its data directory (see
/// [`crate::status`]).
fn publish_status(
    datadir: &Path,
    harness: &Harness,
    host: &ClientRpcHost,
    upstreams: &Arc<Upstreams>,
    page: Option<std::net::SocketAddr>,
) -> Publisher {
    let (harness, host, upstreams) = (harness.clone(), host.clone(), upstreams.clone());
    let started_at = now().secs();
    let connection = ConnectionWatch::default();
    let max_per_peer = RouterConfig::server().max_sessions_per_peer;
    Publisher::start(datadir, move || {
        let now = now();
        let stats = harness.router().map(Router::stats).unwrap_or_default();
        let connection = connection.observe(&host.status(), now.secs());
        let mut snapshot = Snapshot::new(
            "serve",
            started_at,
            now.secs(),
            &stats,
            max_per_peer,
            connection,
        );
        snapshot.config = Some(ServeSummary {
            allowed_callers: harness.gate().uids().map_or(0, |uids| uids.len()),
            calls_per_minute: harness.rate_limiter().calls_per_minute(),
        });
        snapshot.ledger = harness.ledger().and_then(|ledger| {
            ledger
                .totals(now)
                .map_err(|e| tracing::warn!(error = %e, "ledger totals not read"))
                .ok()
        });
        snapshot.upstreams = upstreams.status();
        snapshot.ui = page.map(|a| a.to_string());
        snapshot
    })
}

/// Wakes the config follower on every SIGHUP, the operator's "reload now".
async fn on_hangup(wake: Arc<Notify>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                while hup.recv().await.is_some() {
                    tracing::info!("SIGHUP: reading brmcp.json again");
                    wake.notify_one();
                }
            }
            Err(e) => tracing::warn!(error = %e, "SIGHUP not handled"),
        }
    }
    #[cfg(not(unix))]
    let _ = wake;
}

/// The tools `config` sells: its upstreams' (supervised from now on, their state in
/// the data directory's status file and on stderr), or else the example tools.
fn with_tools(
    builder: HarnessBuilder,
    datadir: &Path,
    config: &ServeConfig,
) -> (HarnessBuilder, Upstreams) {
    if config.upstreams.is_empty() {
        let builder = example_tools()
            .into_iter()
            .fold(builder, HarnessBuilder::tool)
            .server_info("brmcp-example", env!("CARGO_PKG_VERSION"));
        return (builder, Upstreams::none());
    }
    let tools = DynamicTools::new();
    let log = Arc::new(|s: &UpstreamStatus| eprintln!("upstream {s}"));
    let upstreams = Upstreams::start(
        &config.upstreams,
        &tools,
        Some(datadir.join(STATUS_FILE)),
        Some(log),
    );
    let mut builder = builder.dynamic_tools(tools);
    if let Some(catalog) = upstreams.catalog() {
        builder = builder.catalog(catalog);
    }
    (builder, upstreams)
}

#[cfg(test)]
mod tests {

    use std::time::Duration;

    use rmcp::model::CallToolRequestParams;

    use brmcp_adapters::PeerId;

    use super::*;

    use crate::cli::testing::until;
    use crate::host::journal::PmJournal;
    use crate::host::{HostPayer, harness_streams};
    use crate::server::CallState;
    use crate::server::{Ledger, MATOMS_PER_ATOM};
    use brmcp_devnet::{Devnet, NodeInfo};

    /// A directory (fee 1000 atoms, test budgets up to 100,000) on devnet node `d`.
    async fn devnet_directory(d: &NodeInfo) -> (crate::directory::Directory, ClientRpcHost) {
        use crate::directory::{Directory, Policy};
        let host = host_from(&d.config_path).unwrap();
        let directory = Directory::builder()
            .data_dir(&d.dir)
            .policy(Policy {
                listing_fee_atoms: 1000,
                test_budget_max_atoms: 100_000,
                ..Policy::default()
            })
            .payer(HostPayer(host.clone()))
            .build()
            .unwrap();
        directory.start(host.clone()).unwrap();
        let streams = harness_streams(&d.dir, directory.harness()).unwrap();
        connect(&host, streams).await.unwrap();
        directory.set_self_uid(PeerId::from_bytes(d.uid));
        directory.resume().await.unwrap();
        (directory, host)
    }

    /// `brmcp.json` for devnet node `p`: directory `d` allowed, and a `directory` block
    /// registering with it, funding up to `cap` atoms a request.
    fn registrant_config(d: &NodeInfo, p: &NodeInfo, cap: u64) -> ServeConfig {
        ServeConfig::parse(
            &json!({
                "allowed_uids": [d.uid_hex()],
                "directory": {
                    "description": "fortunes",
                    "tags": ["fun"],
                    "test": {"tool": "fortune", "maxAtoms": FORTUNE_ATOMS},
                    "auto_fund": {"enabled": true, "max_atoms_per_request": cap},
                    "register_at_uids": [d.uid_hex()],
                }
            })
            .to_string(),
            &p.dir.join("brmcp.json"),
        )
        .unwrap()
    }

    /// The fund history's rows: (directory uid, atoms).
    fn fund_history(p: &NodeInfo) -> Vec<(String, i64)> {
        let path = p.dir.join(crate::directory::FUND_HISTORY_FILE);
        let history = rusqlite::Connection::open(path).unwrap();
        let mut rows = history
            .prepare("SELECT directory_uid, atoms FROM fund_history")
            .unwrap();
        rows.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// Waits until `directory` holds `uid`'s registration in `state`.
    async fn until_state(
        directory: &crate::directory::Directory,
        uid: PeerId,
        state: crate::directory::State,
    ) {
        until("the registration's state", || {
            directory
                .entry(&uid)
                .unwrap()
                .reg
                .is_some_and(|r| r.state == state)
        })
        .await;
    }

    /// A devnet with a directory on node `d` and, on node `p`, `brmcp serve` started
    /// with a `directory` block registering there, funding up to `cap` atoms a request.
    struct Registering {
        _dir: tempfile::TempDir,
        devnet: Devnet,
        d: NodeInfo,
        p: NodeInfo,
        prov_id: PeerId,
        directory: crate::directory::Directory,
        dir_host: ClientRpcHost,
        prov_host: ClientRpcHost,
        harness: Harness,
        /// The provider's devnet balance before it started.
        before: i64,
    }

    impl Registering {
        async fn start(cap: u64) -> Self {
            let dir = tempfile::tempdir().unwrap();
            let devnet = Devnet::start(dir.path().join("devnet"), &["dir", "prov"])
                .await
                .unwrap();
            let [d, p] = <[NodeInfo; 2]>::try_from(devnet.nodes()).unwrap();
            let prov_id = PeerId::from_bytes(p.uid);
            let (directory, dir_host) = devnet_directory(&d).await;
            let before = devnet.balance(&p.uid);
            let prov_host = host_from(&p.config_path).unwrap();
            let config = registrant_config(&d, &p, cap);
            let (harness, _upstreams) = start_serving(&p.dir, &config, &prov_host).await.unwrap();
            Self {
                _dir: dir,
                devnet,
                d,
                p,
                prov_id,
                directory,
                dir_host,
                prov_host,
                harness,
                before,
            }
        }

        async fn stop(self) {
            self.harness.close();
            self.prov_host.close();
            self.directory.close().await;
            self.dir_host.close();
            self.devnet.shutdown().await;
        }
    }

    /// With a `directory` block, `brmcp serve` registers at startup with the directory
    /// it names, records the fund history, tips the invoice within its auto-fund
    /// policy, and the directory crawls and test-calls it through to pending_review.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_registers_with_its_directories_at_startup_and_reaches_review() {
        use crate::directory::State;
        let r = Registering::start(20_000).await;
        let (d, p, directory) = (&r.d, &r.p, &r.directory);
        until_state(directory, r.prov_id, State::PendingReview).await;
        let reg = directory.entry(&r.prov_id).unwrap().reg.unwrap();
        assert_eq!(reg.description, "fortunes");
        // Fee plus test budget, recorded once in the fund history and tipped once.
        let price = i64::try_from(FORTUNE_ATOMS).unwrap();
        assert_eq!(fund_history(p), [(d.uid_hex(), 1000 + price)]);
        // It paid the invoice and was paid the test's price back.
        assert_eq!(r.before - r.devnet.balance(&p.uid), 1000 * 1000);
        r.stop().await;
    }

    /// An invoice above the per-request cap is registered but never paid: nothing
    /// tipped, nothing in the fund history, the registration left awaiting funding.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_leaves_an_invoice_above_its_cap_unpaid() {
        use crate::directory::State;
        // The invoice is 11,000 atoms.
        let r = Registering::start(5_000).await;
        until_state(&r.directory, r.prov_id, State::AwaitingFunding).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let reg = r.directory.entry(&r.prov_id).unwrap().reg.unwrap();
        assert_eq!(reg.state, State::AwaitingFunding);
        assert_eq!(r.devnet.balance(&r.p.uid), r.before, "nothing tipped");
        assert!(fund_history(&r.p).is_empty());
        r.stop().await;
    }

    /// The bot dies after its PM journal recorded (and the client was told to clear) a
    /// paid call, before the call reached the router. Restarted, it replays the call
    /// for a session it no longer has: it answers "session not found", the bridge
    /// re-establishes the session and reissues the call under the same call key, and
    /// the agent's call succeeds, charged once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_journaled_before_a_crash_is_replayed_and_succeeds_charged_once() {
        let dir = tempfile::tempdir().unwrap();
        let devnet = Devnet::start(dir.path().join("devnet"), &["alice", "bob"])
            .await
            .unwrap();
        let [alice, bob] = <[NodeInfo; 2]>::try_from(devnet.nodes()).unwrap();
        let bob_id = PeerId::from_bytes(bob.uid);
        let config = crate::cli::testing::allowing(&alice, &bob);
        let host_a = host_from(&alice.config_path).unwrap();
        let (harness, _upstreams) = start_serving(&alice.dir, &config, &host_a).await.unwrap();
        // Credit for one fortune, so the call is charged without a tip.
        Ledger::attach(&alice.dir)
            .unwrap()
            .manual_credit(&bob_id, FORTUNE_ATOMS * MATOMS_PER_ATOM, "test", now())
            .unwrap();

        let (bridge, host_b, agent) =
            crate::cli::testing::autopay_bridge(&dir.path().join("bridge"), &bob, &alice, None)
                .await;
        // A first call establishes the session with the bot.
        let echo = agent
            .call_tool(
                CallToolRequestParams::new("echo")
                    .with_arguments(json!({"text": "hi"}).as_object().unwrap().clone()),
            )
            .await
            .unwrap();
        assert_ne!(echo.is_error, Some(true), "{echo:?}");

        // The bot's router stops: PMs are still recorded and acknowledged, and stay in
        // the journal, not handed on, as when the process dies in between.
        harness.close();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let call = tokio::spawn(async move {
            let result = agent.call_tool(CallToolRequestParams::new("fortune")).await;
            (agent, result)
        });
        let journal = PmJournal::open(&alice.dir).unwrap();
        until("the call journaled, not handed on", || {
            !journal.unprocessed(10).unwrap().is_empty()
        })
        .await;
        until("acknowledged", || {
            devnet
                .log(alice.id, brmcp_devnet::StreamKind::Pm)
                .unwrap()
                .iter()
                .all(|e| e.acked)
        })
        .await;
        host_a.close();
        drop(harness);
        tokio::time::sleep(Duration::from_millis(500)).await;

        // Restarted on the same directory.
        let host_a = host_from(&alice.config_path).unwrap();
        let (harness, _upstreams) = start_serving(&alice.dir, &config, &host_a).await.unwrap();
        let (agent, result) = call.await.unwrap();
        let result = result.unwrap();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let text = brmcp_adapters::protocol::result_text(&result);
        assert!(text.contains("fortune"), "{text}");
        let calls = Ledger::attach(&alice.dir)
            .unwrap()
            .journal(Some(&bob_id), 10)
            .unwrap();
        let fortunes: Vec<_> = calls.iter().filter(|c| c.tool == "fortune").collect();
        assert_eq!(fortunes.len(), 1, "charged once: {calls:?}");
        assert_eq!(fortunes[0].state, CallState::Completed);
        assert_eq!(harness.balance_matoms(bob_id).await.unwrap(), 0);
        assert!(bridge.spend_log().unwrap().0.is_empty(), "nothing paid");
        drop(agent);
        bridge.close().await;
        host_b.close();
        harness.close();
        host_a.close();
        devnet.shutdown().await;
    }
}
