//! `brmcp serve`: the serving harness on a running Bison Relay client, with the tools of
//! the upstream MCP servers `brmcp.json` names or else the example tools `echo` (free)
//! and `fortune` (10,000 atoms); and the operator's ledger and status commands. With a
//! `directory` block, it is also a registrant: it serves `listing_invite` and registers
//! with the block's directories at every start.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use brmcp_adapters::clientrpc::proto::ReceivedTip;
use brmcp_adapters::clientrpc::{BotConfig, ClientRpcConfig, ClientRpcHost, Streams, TipHandler};
use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{BoxError, PeerId, Router, RouterConfig};
use clap::{Args, Subcommand};
use serde_json::json;
use tokio::sync::Notify;

use super::CliError;
use super::directory::HostPayer;
use super::table::{Table, matoms_as_atoms, print_json, rfc3339};
use crate::directory::{Registrant, RegistrantBlock, RegistrantConfig, StatusOut};
use crate::journal::{self, Inbox, JournalHandler};
use crate::server::upstream::{STATUS_FILE, UpstreamStatus, Upstreams};
use crate::server::{
    AutoReply, Balance, CallContext, CallId, Clock, DynamicTools, Harness, HarnessBuilder,
    JournalEntry, Ledger, MATOMS_PER_ATOM, ServeConfig, SystemClock, Tip, ToolError, ToolSpec,
    atoms_to_matoms, follow_config,
};
use crate::status::{ConnectionWatch, Publisher, ServeSummary, Snapshot};

/// The clientrpc connection file of a data directory (bisonbotkit format).
pub(crate) const RPC_CONFIG: &str = "brmcp-serve.conf";

/// The operator's settings file of a data directory.
pub(crate) use crate::server::CONFIG_FILE as SERVE_CONFIG;

/// Price of the example `fortune` tool: 10,000 atoms (0.0001 DCR), as the Go example.
pub(crate) const FORTUNE_ATOMS: u64 = 10_000;

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
    #[command(subcommand)]
    action: Option<ServeAction>,
}

#[derive(Debug, Subcommand)]
enum ServeAction {
    /// List callers' balances (also while the server runs).
    Balances {
        /// Print one JSON document (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Credit a caller by hand, with a reason kept in the audit table.
    Credit {
        /// The caller's user id (64 hex).
        uid: PeerId,
        /// Atoms to credit.
        atoms: u64,
        /// Why (kept in the audit table).
        #[arg(long)]
        reason: String,
        /// Print one JSON object instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Refund a completed paid call by its journal id.
    Refund {
        /// The call's journal id (see `journal`).
        call: i64,
        /// Why (kept in the audit table).
        #[arg(long)]
        reason: String,
        /// Print one JSON object instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Show the running server's state: its clientrpc connection, sessions, router
    /// counters, allowlist, ledger totals and upstream MCP servers (exit status 3
    /// when it is not running).
    Status {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show the most recent paid calls.
    Journal {
        /// Only this caller's calls.
        #[arg(long)]
        uid: Option<PeerId>,
        /// How many entries.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print one JSON document (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn run(args: ServeArgs) -> Result<ExitCode, CliError> {
    match args.action {
        None => super::runtime()?.block_on(serve(&args.datadir, args.rpc_config)),
        Some(action) => operate(&args.datadir, action),
    }
}

fn now() -> UnixTime {
    SystemClock.unix()
}

fn operate(datadir: &Path, action: ServeAction) -> Result<ExitCode, CliError> {
    if let ServeAction::Status { json } = action {
        return super::status::show(datadir, "serve", json);
    }
    // Stopped, the server's calls left pending are refunded as at its start; running,
    // they are in flight, and the operator works beside it.
    let opened = Ledger::open_for_operator(datadir, now())?;
    if opened.refunded > 0 {
        eprintln!("refunded {} interrupted call(s)", opened.refunded);
    }
    let ledger = opened.ledger;
    match action {
        ServeAction::Balances { json } => print_balances(&ledger.balances()?, json),
        ServeAction::Credit {
            uid,
            atoms,
            reason,
            json,
        } => {
            let matoms =
                atoms_to_matoms(atoms).ok_or_else(|| CliError("amount too large".into()))?;
            let balance = ledger.manual_credit(&uid, matoms, &reason, now())?;
            if json {
                print_json(&json!({
                    "caller": uid.to_string(),
                    "credited_atoms": atoms,
                    "credited_matoms": matoms,
                    "balance_matoms": balance,
                }));
            } else {
                println!(
                    "credited {atoms} atoms to {uid}; new balance {} atoms",
                    matoms_as_atoms(balance)
                );
            }
        }
        ServeAction::Refund { call, reason, json } => {
            let id = CallId::new(call);
            let balance = ledger.manual_refund(id, &reason, now())?;
            let entry = ledger
                .journal_entry(id)?
                .ok_or_else(|| CliError(format!("call {call} vanished after its refund")))?;
            print_refund(&entry, balance, json);
        }
        ServeAction::Journal { uid, limit, json } => {
            print_journal(&ledger.journal(uid.as_ref(), limit)?, json);
        }
        ServeAction::Status { .. } => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn print_balances(balances: &[Balance], json: bool) {
    if json {
        let rows: Vec<_> = balances
            .iter()
            .map(|b| {
                json!({
                    "caller": b.caller.to_string(),
                    "balance_matoms": b.matoms,
                    "balance_atoms": b.matoms / MATOMS_PER_ATOM,
                })
            })
            .collect();
        print_json(&json!(rows));
        return;
    }
    let mut table = Table::new(&["CALLER", "BALANCE (ATOMS)"]);
    for b in balances {
        table.row(vec![b.caller.to_string(), matoms_as_atoms(b.matoms)]);
    }
    print!("{table}");
}

fn print_refund(entry: &JournalEntry, balance_matoms: u64, json: bool) {
    if json {
        print_json(&json!({
            "call": entry.id.get(),
            "caller": entry.caller.to_string(),
            "tool": entry.tool,
            "refunded_atoms": entry.price_atoms,
            "balance_matoms": balance_matoms,
        }));
        return;
    }
    println!(
        "refunded call {} ({}): {} atoms returned to {}; new balance {} atoms",
        entry.id.get(),
        entry.tool,
        entry.price_atoms,
        entry.caller,
        matoms_as_atoms(balance_matoms)
    );
}

fn print_journal(entries: &[JournalEntry], json: bool) {
    if json {
        let rows: Vec<_> = entries
            .iter()
            .map(|e| {
                let finished = e.finished_at.map(UnixTime::secs);
                json!({
                    "id": e.id.get(),
                    "caller": e.caller.to_string(),
                    "tool": e.tool,
                    "price_atoms": e.price_atoms,
                    "state": e.state.as_str(),
                    "started_at": e.started_at.secs(),
                    "started_at_rfc3339": rfc3339(e.started_at.secs()),
                    "finished_at": finished,
                    "finished_at_rfc3339": finished.map(rfc3339),
                    "reason": e.reason,
                    "call_key": e.call_key,
                })
            })
            .collect();
        print_json(&json!(rows));
        return;
    }
    let mut table = Table::new(&[
        "ID", "STARTED", "FINISHED", "CALLER", "TOOL", "ATOMS", "STATE", "REASON",
    ]);
    for e in entries {
        table.row(vec![
            e.id.get().to_string(),
            rfc3339(e.started_at.secs()),
            e.finished_at
                .map_or_else(|| "-".to_owned(), |t| rfc3339(t.secs())),
            e.caller.to_string(),
            e.tool.clone(),
            e.price_atoms.to_string(),
            e.state.to_string(),
            e.reason.clone().unwrap_or_default(),
        ]);
    }
    print!("{table}");
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

/// Connects to the clientrpc endpoint a bisonbotkit config names.
pub(crate) fn host_from(rpc_config: &Path) -> Result<ClientRpcHost, CliError> {
    let bot = BotConfig::load(rpc_config)?;
    super::log::apply_conf(&bot, rpc_config)?;
    let config = ClientRpcConfig::from_bot_config(&bot);
    Ok(ClientRpcHost::new(config)?)
}

/// Starts `host` on `streams`; the error names the client's address.
pub(crate) async fn connect(host: &ClientRpcHost, streams: Streams) -> Result<(), CliError> {
    host.connect(streams).await.map_err(|e| {
        CliError(format!(
            "cannot reach the Bison Relay client at {}: {e}",
            host.config().url
        ))
    })
}

/// Records each tip in the ledger (which credits it once, whatever the redeliveries)
/// before the host acknowledges it.
struct ServeTips {
    harness: Harness,
    ledger: Arc<Ledger>,
}

impl TipHandler for ServeTips {
    async fn handle_tip(&self, tip: ReceivedTip) -> Result<(), BoxError> {
        let Ok(matoms) = u64::try_from(tip.amount_matoms) else {
            // brclient reports settled amounts, never negative ones: nothing to credit.
            tracing::error!(seq = tip.sequence_id, from = %tip.uid, matoms = tip.amount_matoms, "tip with a negative amount not credited");
            return Ok(());
        };
        let outcome = self
            .harness
            .record_tip(Tip {
                seq: tip.sequence_id,
                caller: tip.uid,
                matoms,
            })
            .await?;
        tracing::info!(
            seq = tip.sequence_id,
            caller = %tip.uid,
            atoms = %matoms_as_atoms(matoms),
            outcome = ?outcome,
            "tip received"
        );
        Ok(())
    }

    async fn cleared(&self, up_to: u64) -> Result<(), BoxError> {
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || ledger.clear_tips(up_to)).await??;
        Ok(())
    }
}

/// Starts the harness on `host` and feeds it the host's PMs (through the PM journal)
/// and tips (through the ledger), the data directory bound to the client; with
/// upstreams in `config`, starts supervising them (their tools are served as they come
/// up).
pub(crate) async fn start_serving(
    datadir: &Path,
    config: &ServeConfig,
    host: &ClientRpcHost,
) -> Result<(Harness, Upstreams), CliError> {
    let builder = Harness::builder()
        .data_dir(datadir)
        .config(config)
        .auto_reply(AutoReply::new(
            "This is a brmcp bot: connect an MCP agent with `brmcp bridge` to use its tools.",
        ));
    let (mut builder, upstreams) = with_tools(builder, datadir, config);
    let registrant = match &config.directory {
        None => None,
        Some(block) => Some(registrant(datadir, block, host)?),
    };
    if let Some(registrant) = &registrant {
        builder = builder.tool(registrant.listing_invite());
    }
    let harness = builder.build()?;
    if harness.refunded_at_open() > 0 {
        eprintln!(
            "refunded {} call(s) interrupted by the last stop",
            harness.refunded_at_open()
        );
    }
    let router = harness.start(host.clone())?;
    let streams = harness_streams(datadir, &harness)?;
    connect(host, streams).await?;
    if let (Some(registrant), Some(block)) = (registrant, &config.directory) {
        registrant.attach(router);
        let directories = block.register_at_uids.clone();
        // In the background: a directory that is slow to answer holds up nothing.
        tokio::spawn(async move {
            for directory in directories {
                let _ = registrant.register(directory).await;
            }
        });
    }
    Ok((harness, upstreams))
}

/// The registrant `block` configures, its fund history in `datadir`, paying with tips
/// through `host`, each outcome told on stderr.
fn registrant(
    datadir: &Path,
    block: &RegistrantBlock,
    host: &ClientRpcHost,
) -> Result<Registrant, CliError> {
    let mut config = RegistrantConfig::new(
        block.description.clone(),
        block.test.clone(),
        datadir,
        HostPayer(host.clone()),
    );
    config.tags.clone_from(&block.tags);
    config.auto_fund = block.auto_fund.clone();
    config.notify = Some(Arc::new(
        |directory: PeerId, status: &StatusOut, err: Option<&str>| {
            let state = json!(status.state);
            let mut line = format!("directory {directory}: {}", state.as_str().unwrap_or("?"));
            if status.shortfall_atoms > 0 {
                line.push_str(&format!(", {} atoms short", status.shortfall_atoms));
            }
            if !status.note.is_empty() {
                line.push_str(&format!(" ({})", status.note));
            }
            if let Some(err) = err {
                line.push_str(&format!(": {err}"));
            }
            eprintln!("{line}");
        },
    ));
    Registrant::new(config).map_err(CliError)
}

/// The streams that feed `harness` from a client: PMs through the data directory's PM
/// journal (record, then ack), tips through the ledger (credit, then ack), and the data
/// directory bound to the client's identity at every connect.
pub(crate) fn harness_streams(datadir: &Path, harness: &Harness) -> Result<Streams, CliError> {
    let inbox = Arc::new(Inbox::open(datadir)?);
    let wake = Arc::new(Notify::new());
    let forwarder = harness.clone();
    tokio::spawn(journal::forward(
        inbox.clone(),
        wake.clone(),
        move |from, body| {
            let harness = forwarder.clone();
            async move { harness.handle_pm(from, body).await.map_err(Into::into) }
        },
    ));
    let tips = ServeTips {
        harness: harness.clone(),
        // The harness opened (and owns) it; this handle only marks cleared tips.
        ledger: Arc::new(Ledger::attach(datadir)?),
    };
    Ok(Streams::new()
        .pms(JournalHandler::new(inbox.clone(), wake))
        .tips(tips)
        .identity(super::client_guard(inbox)))
}

async fn serve(datadir: &Path, rpc_config: Option<PathBuf>) -> Result<ExitCode, CliError> {
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
    let publisher = publish_status(datadir, &harness, &host, &upstreams);
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
    super::wait_for_interrupt().await;
    eprintln!("stopping");
    harness.close();
    publisher.stop().await;
    // The publisher held the other handle; a snapshot still being written may too, and
    // dropping the last handle stops the upstreams as well.
    if let Ok(upstreams) = Arc::try_unwrap(upstreams) {
        upstreams.shutdown().await;
    }
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
    use std::net::{Ipv4Addr, SocketAddr};
    use std::time::Duration;

    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    use super::*;
    use crate::bridge::{Mode, Settings};
    use crate::devnet::{Devnet, NodeInfo};
    use crate::server::CallState;

    async fn until(what: &str, mut check: impl FnMut() -> bool) {
        for _ in 0..400 {
            if check() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("timed out waiting for: {what}");
    }

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

    /// With a `directory` block, `brmcp serve` registers at startup with the directory
    /// it names, records the fund history, tips the invoice within its auto-fund
    /// policy, and the directory crawls and test-calls it through to pending_review.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_registers_with_its_directories_at_startup_and_reaches_review() {
        use crate::directory::State;
        let dir = tempfile::tempdir().unwrap();
        let devnet = Devnet::start(dir.path().join("devnet"), &["dir", "prov"])
            .await
            .unwrap();
        let [d, p] = <[NodeInfo; 2]>::try_from(devnet.nodes()).unwrap();
        let prov_id = PeerId::from_bytes(p.uid);
        let (directory, dir_host) = devnet_directory(&d).await;
        let before = devnet.balance(&p.uid);
        let prov_host = host_from(&p.config_path).unwrap();
        let config = registrant_config(&d, &p, 20_000);
        let (harness, _upstreams) = start_serving(&p.dir, &config, &prov_host).await.unwrap();
        until_state(&directory, prov_id, State::PendingReview).await;
        let reg = directory.entry(&prov_id).unwrap().reg.unwrap();
        assert_eq!(reg.description, "fortunes");
        // Fee plus test budget, recorded once in the fund history and tipped once.
        let price = i64::try_from(FORTUNE_ATOMS).unwrap();
        assert_eq!(fund_history(&p), [(d.uid_hex(), 1000 + price)]);
        // It paid the invoice and was paid the test's price back.
        assert_eq!(before - devnet.balance(&p.uid), 1000 * 1000);
        harness.close();
        prov_host.close();
        directory.close().await;
        dir_host.close();
        devnet.shutdown().await;
    }

    /// An invoice above the per-request cap is registered but never paid: nothing
    /// tipped, nothing in the fund history, the registration left awaiting funding.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn serve_leaves_an_invoice_above_its_cap_unpaid() {
        use crate::directory::State;
        let dir = tempfile::tempdir().unwrap();
        let devnet = Devnet::start(dir.path().join("devnet"), &["dir", "prov"])
            .await
            .unwrap();
        let [d, p] = <[NodeInfo; 2]>::try_from(devnet.nodes()).unwrap();
        let prov_id = PeerId::from_bytes(p.uid);
        let (directory, dir_host) = devnet_directory(&d).await;
        let before = devnet.balance(&p.uid);
        let prov_host = host_from(&p.config_path).unwrap();
        // The invoice is 11,000 atoms.
        let config = registrant_config(&d, &p, 5_000);
        let (harness, _upstreams) = start_serving(&p.dir, &config, &prov_host).await.unwrap();
        until_state(&directory, prov_id, State::AwaitingFunding).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let reg = directory.entry(&prov_id).unwrap().reg.unwrap();
        assert_eq!(reg.state, State::AwaitingFunding);
        assert_eq!(devnet.balance(&p.uid), before, "nothing tipped");
        assert!(fund_history(&p).is_empty());
        harness.close();
        prov_host.close();
        directory.close().await;
        dir_host.close();
        devnet.shutdown().await;
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
        let config = ServeConfig::parse(
            &format!("{{\"allowed_uids\": [\"{}\"]}}", bob.uid_hex()),
            &alice.dir.join("brmcp.json"),
        )
        .unwrap();
        let host_a = host_from(&alice.config_path).unwrap();
        let (harness, _upstreams) = start_serving(&alice.dir, &config, &host_a).await.unwrap();
        // Credit for one fortune, so the call is charged without a tip.
        Ledger::attach(&alice.dir)
            .unwrap()
            .manual_credit(&bob_id, FORTUNE_ATOMS * MATOMS_PER_ATOM, "test", now())
            .unwrap();

        let listen = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let (bridge, host_b) = crate::cli::bridge::start_bridge(
            &dir.path().join("bridge"),
            &bob.config_path,
            listen,
            false,
        )
        .await
        .unwrap();
        let settings = Settings {
            enabled: true,
            mode: Mode::Autopay,
            per_call_cap_atoms: 20_000,
            per_day_cap_atoms: 100_000,
            allowed_bots: vec![alice.uid_hex()],
            ..Settings::default()
        };
        let settings = bridge.apply_settings(settings).await.unwrap();
        bridge.start().await.unwrap();
        let url = format!(
            "http://{}/mcp/{}",
            bridge.listen_addr().unwrap(),
            alice.uid_hex()
        );
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(url).auth_header(settings.token),
        );
        let agent = ().serve(transport).await.unwrap();
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
        let inbox = Inbox::open(&alice.dir).unwrap();
        until("the call journaled, not handed on", || {
            !inbox.unprocessed(10).unwrap().is_empty()
        })
        .await;
        until("acknowledged", || {
            devnet
                .log(alice.id, crate::devnet::StreamKind::Pm)
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
        let text = result
            .content
            .last()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default();
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
