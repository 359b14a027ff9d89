//! `brmcp bridge`: local MCP endpoints for agents, proxying to Bison Relay bots through
//! a running Bison Relay client and paying them with tips under `mcpclient.json`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use std::sync::Arc;

use brmcp_adapters::clientrpc::{
    ClientRpcError, ClientRpcHost, Streams, TipOutcome, proto::TipProgressEvent,
};
use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{BoxError, PeerId, Router, RouterConfig};
use clap::{Args, Subcommand};
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;

use super::CliError;
use crate::bridge::{
    Bridge, Config, DEFAULT_LISTEN, Mode, Payer, PaymentUnconfirmed, SETTINGS_FILE, Settings,
    SpendLog, SpendStatus, serve_stdio,
};
use crate::journal::{self, Inbox, JournalHandler};
use crate::server::{Clock, MATOMS_PER_ATOM, SystemClock};

/// The clientrpc connection file of a bridge data directory (bisonbotkit format).
pub(crate) const RPC_CONFIG: &str = "brmcp-bridge.conf";

#[derive(Debug, Args)]
pub(super) struct BridgeArgs {
    /// Data directory: mcpclient.json, the spend log and the PM journal.
    #[arg(long, value_name = "DIR")]
    datadir: PathBuf,
    /// The clientrpc connection file (default: <datadir>/brmcp-bridge.conf).
    #[arg(long, value_name = "FILE")]
    rpc_config: Option<PathBuf>,
    /// Address of the HTTP endpoint; loopback unless --allow-remote.
    #[arg(long, default_value_t = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Allow a non-loopback --listen address (a token is always required).
    #[arg(long)]
    allow_remote: bool,
    /// A host name (or `host:port`) agents may use to reach a remote listener, besides
    /// the loopback names and the address they connect to (repeatable).
    #[arg(long = "allow-host", value_name = "HOST")]
    allow_hosts: Vec<String>,
    #[command(subcommand)]
    action: Option<BridgeAction>,
}

#[derive(Debug, Subcommand)]
enum BridgeAction {
    /// Serve one bot over stdio, for agent hosts that spawn MCP servers.
    Stdio {
        /// The bot: a name from `bots list`, or its 64-hex user id.
        #[arg(long)]
        bot: String,
    },
    /// Name, allow and forget bots.
    #[command(subcommand)]
    Bots(BotsAction),
    /// Show or rotate the bearer token agents present.
    #[command(subcommand)]
    Token(TokenAction),
    /// Show the spend log and the rolling 24-hour total.
    Spend,
    /// List, approve or deny the payments a running bridge holds for approval (it is
    /// reached at --listen with the token of mcpclient.json).
    #[command(subcommand)]
    Approvals(ApprovalsAction),
}

#[derive(Debug, Subcommand)]
enum ApprovalsAction {
    /// The payments waiting.
    List,
    /// Pay this one.
    Approve {
        /// The payment's id (see `list`).
        id: String,
    },
    /// Refuse this one.
    Deny {
        /// The payment's id (see `list`).
        id: String,
    },
}

#[derive(Debug, Subcommand)]
enum BotsAction {
    /// Allow a bot under a name.
    Add {
        /// The name (letters, digits, `.`, `_`, `-`).
        name: String,
        /// The bot's 64-hex user id.
        uid: PeerId,
    },
    /// Forget a bot, by name or user id.
    Remove {
        /// Name or user id.
        bot: String,
    },
    /// List the allowed bots.
    List,
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Print the token.
    Show,
    /// Replace the token with a fresh one (running bridges keep the old one until
    /// restarted).
    Rotate,
}

pub(super) fn run(args: BridgeArgs) -> Result<ExitCode, CliError> {
    let settings_path = args.datadir.join(SETTINGS_FILE);
    match args.action {
        None => super::runtime()?.block_on(run_http(args)),
        Some(BridgeAction::Stdio { ref bot }) => {
            let bot = bot.clone();
            super::runtime()?.block_on(run_stdio(args, bot))
        }
        Some(BridgeAction::Bots(action)) => {
            let settings = load(&settings_path)?;
            let settings = match action {
                BotsAction::Add { name, uid } => settings.with_bot(&name, uid)?,
                BotsAction::Remove { bot } => settings.without_bot(&bot)?,
                BotsAction::List => {
                    for bot in settings.bots() {
                        println!("{} {}", bot.uid, bot.name.as_deref().unwrap_or("-"));
                    }
                    return Ok(ExitCode::SUCCESS);
                }
            };
            save(&args.datadir, &settings_path, &settings)?;
            Ok(ExitCode::SUCCESS)
        }
        Some(BridgeAction::Token(action)) => {
            let mut settings = load(&settings_path)?;
            if matches!(action, TokenAction::Rotate) || settings.token.is_empty() {
                settings.token = new_token()?;
                save(&args.datadir, &settings_path, &settings)?;
            }
            println!("{}", settings.token);
            Ok(ExitCode::SUCCESS)
        }
        Some(BridgeAction::Approvals(action)) => {
            let settings = load(&settings_path)?;
            super::runtime()?.block_on(approvals_command(args.listen, &settings.token, action))
        }
        Some(BridgeAction::Spend) => {
            let log = SpendLog::open(&args.datadir, now())?;
            for e in log.entries()? {
                let unconfirmed = if e.unconfirmed && e.status == SpendStatus::Pending {
                    " (unconfirmed: waiting for the tip's outcome)"
                } else {
                    ""
                };
                println!(
                    "{} {} {} atoms to {} for {} {:?}{unconfirmed}{}",
                    e.id,
                    e.ts,
                    e.atoms,
                    e.bot,
                    e.tool,
                    e.status,
                    e.err.map(|why| format!(": {why}")).unwrap_or_default()
                );
            }
            println!("last 24 hours: {} atoms", log.spent_today(now())?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Says so when a cap is 0, which means "never pay" (the default).
fn warn_zero_caps(datadir: &Path, settings: &Settings) {
    if settings.per_call_cap_atoms == 0 || settings.per_day_cap_atoms == 0 {
        eprintln!(
            "spending caps are 0, which means never pay: set per_call_cap_atoms and per_day_cap_atoms (atoms) in {} to let the bridge pay bots",
            datadir.join(SETTINGS_FILE).display()
        );
    }
}

fn now() -> UnixTime {
    SystemClock.unix()
}

fn load(path: &Path) -> Result<Settings, CliError> {
    Ok(Settings::load(path)?)
}

fn save(datadir: &Path, path: &Path, settings: &Settings) -> Result<(), CliError> {
    crate::secure_fs::create_dir(datadir)
        .map_err(|e| CliError(format!("{}: {e}", datadir.display())))?;
    Ok(settings.clone().normalized()?.save(path)?)
}

fn new_token() -> Result<String, CliError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| CliError(format!("entropy: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Pays bots with Bison Relay tips through the client.
pub(crate) struct TipPayer(pub(crate) ClientRpcHost);

impl Payer for TipPayer {
    async fn pay(&self, bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        let outcome = match self.0.tip(bot, atoms).await {
            Ok(outcome) => outcome,
            // Refused by the client, or never sent.
            Err(
                e @ (ClientRpcError::Rpc { .. }
                | ClientRpcError::Config(_)
                | ClientRpcError::NoTipProgress),
            ) => return Err(e.into()),
            // After TipUser may have reached the client (the host closing, a lost
            // connection, an answer it could not read): the tip may be paid.
            Err(e) => {
                tracing::warn!(error = %e, %bot, atoms, "tip outcome unknown");
                return Err(PaymentUnconfirmed.into());
            }
        };
        match outcome {
            TipOutcome::Paid { .. } => Ok(()),
            TipOutcome::Failed { error, .. } => Err(format!("tip failed: {error}").into()),
            // The tip may still be paid: the spend log keeps it pending until its
            // outcome arrives (see `settle_late_tips`).
            _ => Err(PaymentUnconfirmed.into()),
        }
    }
}

/// Settles the spend log's unconfirmed payment a tip outcome belongs to: the outcomes
/// that arrive after the bridge stopped waiting for them (also those redelivered after
/// a restart). The host acknowledges the outcome only after this returns `Ok`, so an
/// outcome is never lost between its acknowledgement and its record; on `Err` it is
/// offered again.
async fn settle_late_tip(bridge: Bridge, event: TipProgressEvent) -> Result<(), BoxError> {
    // The bridge tips whole atoms.
    let Some(atoms) = u64::try_from(event.amount_matoms)
        .ok()
        .filter(|m| m % MATOMS_PER_ATOM == 0)
        .map(|m| m / MATOMS_PER_ATOM)
    else {
        return Ok(());
    };
    let outcome = if event.completed {
        Ok(())
    } else if event.attempt_err.is_empty() {
        Err("tip failed")
    } else {
        Err(event.attempt_err.as_str())
    };
    match bridge.resolve_spend(&event.uid, atoms, outcome) {
        Ok(true) => {
            tracing::info!(bot = %event.uid, atoms, paid = event.completed, "late tip outcome recorded");
        }
        // A tip sent by hand, or by another program on the same client.
        Ok(false) => {
            tracing::debug!(bot = %event.uid, atoms, "tip outcome matches no unconfirmed payment");
        }
        Err(e) => {
            tracing::warn!(error = %e, "late tip outcome not recorded; retrying");
            return Err(e.into());
        }
    }
    Ok(())
}

/// Connects to the client and builds the bridge on it.
pub(crate) async fn start_bridge(
    datadir: &Path,
    rpc_config: &Path,
    listen: SocketAddr,
    allow_remote: bool,
) -> Result<(Bridge, ClientRpcHost), CliError> {
    start_bridge_hosts(datadir, rpc_config, listen, allow_remote, &[]).await
}

/// As [`start_bridge`], accepting `allow_hosts` in the `Host` header too.
pub(crate) async fn start_bridge_hosts(
    datadir: &Path,
    rpc_config: &Path,
    listen: SocketAddr,
    allow_remote: bool,
    allow_hosts: &[String],
) -> Result<(Bridge, ClientRpcHost), CliError> {
    if super::serve::write_rpc_template(rpc_config)? {
        return Err(CliError(format!(
            "edit {} to point at your Bison Relay client, then run the command again",
            rpc_config.display()
        )));
    }
    let host = super::serve::host_from(rpc_config)?;
    let router = Router::new(host.clone(), RouterConfig::client());
    crate::secure_fs::create_dir(datadir)
        .map_err(|e| CliError(format!("{}: {e}", datadir.display())))?;
    let mut config = Config::new(datadir).with_listen(listen);
    config.allow_remote = allow_remote;
    config.allowed_hosts = allow_hosts.to_vec();
    // Before connecting: the stream redelivers unacknowledged outcomes at once.
    let bridge = Bridge::new(config, router.clone(), TipPayer(host.clone()))?;
    let inbox = Arc::new(Inbox::open(datadir)?);
    let wake = Arc::new(Notify::new());
    tokio::spawn(journal::forward(
        inbox.clone(),
        wake.clone(),
        move |from, body| {
            let router = router.clone();
            async move { router.handle_pm(from, body).await.map_err(Into::into) }
        },
    ));
    let settler = bridge.clone();
    let streams = Streams::new()
        .pms(JournalHandler::new(inbox.clone(), wake))
        .tip_results(move |event| settle_late_tip(settler.clone(), event))
        .identity(super::client_guard(inbox));
    super::serve::connect(&host, streams).await?;
    Ok((bridge, host))
}

async fn run_http(args: BridgeArgs) -> Result<ExitCode, CliError> {
    let rpc_config = args
        .rpc_config
        .unwrap_or_else(|| args.datadir.join(RPC_CONFIG));
    let (bridge, host) = start_bridge_hosts(
        &args.datadir,
        &rpc_config,
        args.listen,
        args.allow_remote,
        &args.allow_hosts,
    )
    .await?;
    let mut settings = bridge.settings();
    let minted = settings.token.is_empty();
    if !settings.enabled {
        settings.enabled = true;
        settings = bridge.apply_settings(settings).await?;
    }
    bridge.start().await?;
    let addr = bridge
        .listen_addr()
        .ok_or_else(|| CliError("the HTTP endpoint did not start".into()))?;
    eprintln!(
        "bridge listening on http://{addr} ({:?} mode)",
        settings.mode
    );
    for bot in bridge.bots() {
        eprintln!(
            "  {}: http://{addr}/mcp/{}",
            bot.name.as_deref().unwrap_or("bot"),
            bot.uid
        );
    }
    if bridge.bots().is_empty() {
        eprintln!(
            "  no bots allowed yet: add one with `brmcp bridge --datadir {} bots add NAME UID`",
            args.datadir.display()
        );
    }
    // The token is shown once, when made; later starts must not copy it into logs.
    if minted {
        eprintln!(
            "agents authenticate with: Authorization: Bearer {}",
            settings.token
        );
    } else {
        eprintln!(
            "agents authenticate with: Authorization: Bearer <token> (`brmcp bridge --datadir {} token show`)",
            args.datadir.display()
        );
    }
    if settings.mode == Mode::Approval {
        eprintln!(
            "payments wait for approval: type `approve ID` or `deny ID` here, or use `brmcp bridge --datadir {} approvals`",
            args.datadir.display()
        );
        let approver = bridge.clone();
        tokio::spawn(async move { approvals(approver).await });
    }
    warn_zero_caps(&args.datadir, &settings);
    eprintln!("Ctrl-C stops the bridge.");
    super::wait_for_interrupt().await;
    bridge.close().await;
    host.close();
    Ok(ExitCode::SUCCESS)
}

async fn approvals_command(
    listen: SocketAddr,
    token: &str,
    action: ApprovalsAction,
) -> Result<ExitCode, CliError> {
    let base = format!("http://{listen}/payments");
    let client = reqwest::Client::new();
    let request = match &action {
        ApprovalsAction::List => client.get(&base),
        ApprovalsAction::Approve { id } => client.post(format!("{base}/{id}/approve")),
        ApprovalsAction::Deny { id } => client.post(format!("{base}/{id}/deny")),
    };
    let response = request
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| CliError(format!("no bridge at {listen}: {e}")))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(CliError(format!(
            "bridge answered {status}: {}",
            body.trim()
        )));
    }
    match action {
        ApprovalsAction::List => {
            let list: Vec<serde_json::Value> = serde_json::from_str(&body)?;
            if list.is_empty() {
                println!("no payment is waiting");
            }
            for p in list {
                println!(
                    "{} {} atoms to {} for {}",
                    p["id"].as_str().unwrap_or("?"),
                    p["atoms"],
                    p["bot"].as_str().unwrap_or("?"),
                    p["tool"].as_str().unwrap_or("?")
                );
            }
        }
        ApprovalsAction::Approve { id } => println!("approved {id}"),
        ApprovalsAction::Deny { id } => println!("denied {id}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Shows each payment waiting for approval and takes `approve ID` / `deny ID` lines.
async fn approvals(bridge: Bridge) {
    let mut pending = bridge.subscribe_payments();
    let printer = tokio::spawn(async move {
        while let Ok(p) = pending.recv().await {
            eprintln!(
                "payment {} waits: {} atoms to {} for {}",
                p.id, p.atoms, p.bot, p.tool
            );
        }
    });
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut words = line.split_whitespace();
        let (verb, id) = (words.next(), words.next());
        let approve = match verb {
            Some("approve") => true,
            Some("deny") => false,
            _ => {
                eprintln!("type `approve ID` or `deny ID`");
                continue;
            }
        };
        match id {
            Some(id) if bridge.resolve_payment(id, approve) => eprintln!("payment {id} resolved"),
            Some(id) => eprintln!("no payment {id} is waiting"),
            None => eprintln!("which payment? type `approve ID` or `deny ID`"),
        }
    }
    printer.abort();
}

async fn run_stdio(args: BridgeArgs, bot: String) -> Result<ExitCode, CliError> {
    let rpc_config = args
        .rpc_config
        .unwrap_or_else(|| args.datadir.join(RPC_CONFIG));
    let (bridge, host) = start_bridge_hosts(
        &args.datadir,
        &rpc_config,
        args.listen,
        args.allow_remote,
        &args.allow_hosts,
    )
    .await?;
    let uid = bridge
        .bots()
        .into_iter()
        .find(|b| {
            b.name.as_deref() == Some(bot.as_str()) || b.uid.to_string() == bot.to_lowercase()
        })
        .map(|b| b.uid)
        .ok_or_else(|| CliError(format!("{bot:?} is not an allowed bot (see `bots list`)")))?;
    warn_zero_caps(&args.datadir, &bridge.settings());
    serve_stdio(&bridge, &uid).await?;
    bridge.close().await;
    host.close();
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::service::{RoleClient, RunningService};
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    use super::*;
    use crate::bridge::SpendEntry;
    use crate::devnet::{Devnet, NodeInfo};
    use crate::server::{Harness, ServeConfig};

    /// A devnet with the example bot on alice and the CLI's bridge on bob, tipping
    /// through bob's clientrpc, and an agent connected to the bridge. The bridge waits
    /// 1 s for a tip; the devnet retries a failed tip attempt after 2 s.
    struct Net {
        dir: tempfile::TempDir,
        devnet: Devnet,
        alice: NodeInfo,
        bob: NodeInfo,
        harness: Harness,
        bridge: Bridge,
        host_b: ClientRpcHost,
        agent: RunningService<RoleClient, ()>,
    }

    async fn net() -> Net {
        let dir = tempfile::tempdir().unwrap();
        let devnet = Devnet::start(dir.path().join("devnet"), &["alice", "bob"])
            .await
            .unwrap();
        let [alice, bob] = <[NodeInfo; 2]>::try_from(devnet.nodes()).unwrap();
        let config = ServeConfig::parse(
            &format!("{{\"allowed_uids\": [\"{}\"]}}", bob.uid_hex()),
            &alice.dir.join("brmcp.json"),
        )
        .unwrap();
        let host_a = super::super::serve::host_from(&alice.config_path).unwrap();
        let harness = super::super::serve::start_serving(&alice.dir, &config, &host_a)
            .await
            .unwrap();
        let listen = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let (bridge, host_b) =
            start_bridge(&dir.path().join("bridge"), &bob.config_path, listen, false)
                .await
                .unwrap();
        let settings = Settings {
            enabled: true,
            mode: Mode::Autopay,
            tip_wait_secs: 1,
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
        Net {
            dir,
            devnet,
            alice,
            bob,
            harness,
            bridge,
            host_b,
            agent,
        }
    }

    async fn fortune(net: &Net) -> String {
        let r = net
            .agent
            .call_tool(CallToolRequestParams::new("fortune"))
            .await
            .unwrap();
        r.content
            .last()
            .and_then(|c| c.as_text())
            .map(|t| t.text.clone())
            .unwrap_or_default()
    }

    /// The spend log once its only entry is no longer pending.
    async fn settled(bridge: &Bridge) -> (SpendEntry, u64) {
        for _ in 0..200 {
            let (entries, today) = bridge.spend_log().unwrap();
            if let [entry] = entries.as_slice()
                && entry.status != SpendStatus::Pending
            {
                return (entry.clone(), today);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the payment stayed pending: {:?}", bridge.spend_log());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tip_paid_after_the_wait_is_recorded_paid() {
        let net = net().await;
        // The first attempt fails; the retry 2 s later succeeds.
        net.devnet.set_can_invoice(net.alice.id, false).unwrap();
        assert_eq!(
            fortune(&net).await,
            "brmcp-bridge: payment not made: tip not confirmed within 1s"
        );
        let (entries, today) = net.bridge.spend_log().unwrap();
        assert_eq!(entries[0].status, SpendStatus::Pending);
        assert_eq!(today, 10_000, "a pending tip counts");
        net.devnet.set_can_invoice(net.alice.id, true).unwrap();

        let (entry, today) = settled(&net.bridge).await;
        assert_eq!(entry.status, SpendStatus::Paid);
        assert_eq!(today, 10_000);
        // The bot was credited, so the next call runs on that credit: no new payment.
        for _ in 0..200 {
            let bob = PeerId::from_bytes(net.bob.uid);
            if net.harness.balance_matoms(bob).await.unwrap() > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let text = fortune(&net).await;
        assert!(!text.starts_with("brmcp-bridge"), "{text}");
        assert_eq!(net.bridge.spend_log().unwrap().0.len(), 1);
        net.devnet.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tip_failing_after_the_wait_frees_the_budget() {
        let net = net().await;
        net.devnet.set_can_invoice(net.alice.id, false).unwrap();
        assert_eq!(
            fortune(&net).await,
            "brmcp-bridge: payment not made: tip not confirmed within 1s"
        );
        // Three attempts, 2 s apart, all refused: the terminal event fails it.
        let (entry, today) = settled(&net.bridge).await;
        assert_eq!(entry.status, SpendStatus::Failed);
        assert_eq!(
            entry.err.as_deref(),
            Some("unable to generate payment invoice")
        );
        assert_eq!(today, 0, "a failed tip no longer counts");
        net.devnet.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_tip_paid_while_the_bridge_was_stopped_is_recorded_at_its_next_start() {
        let net = net().await;
        net.devnet.set_can_invoice(net.alice.id, false).unwrap();
        let alice_before = net.devnet.balance(&net.alice.uid);
        assert_eq!(
            fortune(&net).await,
            "brmcp-bridge: payment not made: tip not confirmed within 1s"
        );
        // The bridge stops before any retry of the tip can succeed.
        net.bridge.close().await;
        net.host_b.close();
        net.devnet.set_can_invoice(net.alice.id, true).unwrap();
        for _ in 0..200 {
            if net.devnet.balance(&net.alice.uid) > alice_before {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(
            net.devnet.balance(&net.alice.uid) > alice_before,
            "the client's retry paid the tip"
        );
        let (entries, _) = net.bridge.spend_log().unwrap();
        assert_eq!(
            entries[0].status,
            SpendStatus::Pending,
            "nobody was listening"
        );

        // Started again on the same directory, the bridge gets the outcome the client
        // kept for it and settles the payment.
        let listen = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
        let (bridge, host) = start_bridge(
            &net.dir.path().join("bridge"),
            &net.bob.config_path,
            listen,
            false,
        )
        .await
        .unwrap();
        let (entry, today) = settled(&bridge).await;
        assert_eq!(entry.status, SpendStatus::Paid);
        assert_eq!(today, 10_000);
        host.close();
        net.devnet.shutdown().await;
    }
}
