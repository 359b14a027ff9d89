//! `brmcp bridge`: local MCP endpoints for agents, proxying to Bison Relay bots through
//! a running Bison Relay client and paying them with tips under `mcpclient.json`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{PeerId, Router, RouterConfig};
use brmcp_clientrpc::{ClientRpcHost, Streams};
use clap::{Args, Subcommand};
use tokio::sync::Notify;

use super::CliError;
use crate::bridge::{
    Bridge, Config, DEFAULT_LISTEN, Mode, SETTINGS_FILE, Settings, serve_directory_stdio,
    serve_stdio,
};
use crate::journal::{self, Inbox, JournalHandler};
use crate::server::{Clock, SystemClock};
use crate::status::{ConnectionWatch, Publisher, Snapshot, SpendTotals};

mod approvals;
mod bots;
mod payer;
mod spend;
mod token;

pub(crate) use payer::TipPayer;
use payer::settle_late_tip;

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
    /// Serve one bot, or a directory's tools, over stdio, for agent hosts that spawn
    /// MCP servers.
    Stdio {
        /// The bot: a name from `bots list`, or its 64-hex user id.
        #[arg(
            long,
            required_unless_present = "directory",
            conflicts_with = "directory"
        )]
        bot: Option<String>,
        /// Serve the directory tools (search, get a provider, introduce, add a bot) of
        /// this directory of mcpclient.json's `directories` (name or uid; without a
        /// value, the first).
        #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "")]
        directory: Option<String>,
    },
    /// Name, allow and forget bots.
    #[command(subcommand)]
    Bots(BotsAction),
    /// Show or rotate the bearer token agents present.
    #[command(subcommand)]
    Token(TokenAction),
    /// Show the spend log and what counts against the daily cap, or resolve a payment
    /// whose outcome is unknown.
    Spend {
        /// Print one JSON document (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
        #[command(subcommand)]
        action: Option<SpendAction>,
    },
    /// List, approve or deny the payments a running bridge holds for approval (it is
    /// reached at --listen with the token of mcpclient.json).
    #[command(subcommand)]
    Approvals(ApprovalsAction),
    /// Show the running bridge's state: its clientrpc connection, sessions, router
    /// counters and spend totals (exit status 3 when it is not running).
    Status {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
enum SpendAction {
    /// Settle a pending payment yourself (check the bot's balance or your client's
    /// tips first): `paid` keeps it counted for its 24 hours, `failed` frees its
    /// budget. A pending payment otherwise counts against the daily cap until its
    /// tip's outcome arrives, however long that takes.
    Resolve {
        /// The payment's id (the first column of `spend`).
        id: i64,
        /// What became of it.
        outcome: Resolved,
    },
}

/// The outcome a user gives a pending payment.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Resolved {
    /// The tip was paid.
    Paid,
    /// The tip was not paid.
    Failed,
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
    /// Allow a bot under a name; with --from-directory, a provider a directory lists,
    /// after looking it up there.
    Add {
        /// The name (letters, digits, `.`, `_`, `-`); with --from-directory, optional
        /// (also --name).
        #[arg(required_unless_present = "from_directory")]
        name: Option<String>,
        /// The bot's 64-hex user id.
        #[arg(
            required_unless_present = "from_directory",
            conflicts_with = "from_directory"
        )]
        uid: Option<PeerId>,
        /// Look this provider uid up in a directory (it must be listed there), show its
        /// tools and prices, then add it. Needs the Bison Relay client, as the bridge.
        #[arg(long, value_name = "UID")]
        from_directory: Option<PeerId>,
        /// The directory to look in (a name or uid of mcpclient.json's `directories`;
        /// default: the first).
        #[arg(long, value_name = "NAME", requires = "from_directory")]
        directory: Option<String>,
        /// The name to give the bot added --from-directory.
        #[arg(long = "name", value_name = "NAME", requires = "from_directory")]
        bot_name: Option<String>,
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
    /// Replace the token with a fresh one (a running bridge refuses the old one within
    /// a second).
    Rotate,
}

pub(super) fn run(args: BridgeArgs) -> Result<ExitCode, CliError> {
    match args.action {
        None => super::runtime()?.block_on(run_http(args)),
        Some(BridgeAction::Stdio {
            ref bot,
            ref directory,
        }) => {
            let served = match (bot, directory) {
                (Some(bot), _) => Served::Bot(bot.clone()),
                (None, directory) => Served::Directory(directory.clone().filter(|d| !d.is_empty())),
            };
            super::runtime()?.block_on(run_stdio(args, served))
        }
        Some(BridgeAction::Bots(BotsAction::Add {
            ref name,
            from_directory: Some(uid),
            ref directory,
            ref bot_name,
            ..
        })) => {
            let bot_name = bot_name.clone().or_else(|| name.clone());
            let directory = directory.clone();
            super::runtime()?.block_on(bots::add_from_directory(args, uid, directory, bot_name))
        }
        Some(BridgeAction::Bots(action)) => bots::run(&args.datadir, action),
        Some(BridgeAction::Token(action)) => token::run(&args.datadir, action),
        Some(BridgeAction::Status { json }) => super::status::show(&args.datadir, "bridge", json),
        Some(BridgeAction::Approvals(action)) => {
            let settings = load(&args.datadir.join(SETTINGS_FILE))?;
            super::runtime()?.block_on(approvals::command(args.listen, &settings.token, action))
        }
        Some(BridgeAction::Spend { json, action }) => spend::run(&args.datadir, json, action),
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

/// The clientrpc connection file `args` name, by default the data directory's.
fn rpc_config(args: &BridgeArgs) -> PathBuf {
    args.rpc_config
        .clone()
        .unwrap_or_else(|| args.datadir.join(RPC_CONFIG))
}

/// Connects to the client and builds the bridge as `args` configure it.
async fn start_from_args(args: &BridgeArgs) -> Result<(Bridge, ClientRpcHost), CliError> {
    start_bridge_hosts(
        &args.datadir,
        &rpc_config(args),
        args.listen,
        args.allow_remote,
        &args.allow_hosts,
    )
    .await
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
    let bridge = Bridge::new(config, router.clone(), TipPayer::new(host.clone()))?;
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
    let (bridge, host) = start_from_args(&args).await?;
    let mut settings = bridge.settings();
    let minted = settings.token.is_empty();
    if !settings.enabled {
        settings.enabled = true;
        settings = bridge.apply_settings(settings).await?;
    }
    bridge.start().await?;
    let _watch = bridge.watch_settings();
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
    for (i, directory) in settings.directories.iter().enumerate() {
        let path = if i == 0 {
            "/mcp/directory".to_owned()
        } else {
            format!("/mcp/directory/{}", directory.label())
        };
        eprintln!(
            "  directory {} (search, add bots): http://{addr}{path}",
            directory.label()
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
        tokio::spawn(async move { approvals::prompt(approver).await });
    }
    warn_zero_caps(&args.datadir, &settings);
    let publisher = publish_status(&args.datadir, &bridge, &host);
    eprintln!("Ctrl-C stops the bridge.");
    super::wait_for_interrupt().await;
    bridge.close().await;
    publisher.stop().await;
    host.close();
    Ok(ExitCode::SUCCESS)
}

/// Publishes the running bridge's status to its data directory (see
/// [`crate::status`]).
fn publish_status(datadir: &Path, bridge: &Bridge, host: &ClientRpcHost) -> Publisher {
    let (bridge, host) = (bridge.clone(), host.clone());
    let started_at = now().secs();
    let connection = ConnectionWatch::default();
    let max_per_peer = RouterConfig::client().max_sessions_per_peer;
    Publisher::start(datadir, move || {
        let now = now().secs();
        let stats = bridge.router().stats();
        let connection = connection.observe(&host.status(), now);
        let mut snapshot =
            Snapshot::new("bridge", started_at, now, &stats, max_per_peer, connection);
        let settings = bridge.settings();
        snapshot.spend = match bridge.spend_totals() {
            Ok((counted, pending, pending_atoms)) => Some(SpendTotals {
                mode: format!("{:?}", settings.mode).to_lowercase(),
                paid_atoms_24h: counted.saturating_sub(pending_atoms),
                pending,
                pending_atoms,
                per_call_cap_atoms: settings.per_call_cap_atoms,
                per_day_cap_atoms: settings.per_day_cap_atoms,
            }),
            Err(e) => {
                tracing::warn!(error = %e, "spend totals not read");
                None
            }
        };
        snapshot
    })
}

/// What `bridge stdio` serves.
enum Served {
    /// A bot, by name or uid.
    Bot(String),
    /// A directory's tools, by name or uid (`None`: the first).
    Directory(Option<String>),
}

async fn run_stdio(args: BridgeArgs, served: Served) -> Result<ExitCode, CliError> {
    let (bridge, host) = start_from_args(&args).await?;
    let bot = match served {
        Served::Bot(bot) => bot,
        Served::Directory(name) => {
            warn_zero_caps(&args.datadir, &bridge.settings());
            let _watch = bridge.watch_settings();
            serve_directory_stdio(&bridge, name.as_deref()).await?;
            bridge.close().await;
            host.close();
            return Ok(ExitCode::SUCCESS);
        }
    };
    let uid = bridge
        .bots()
        .into_iter()
        .find(|b| {
            b.name.as_deref() == Some(bot.as_str()) || b.uid.to_string() == bot.to_lowercase()
        })
        .map(|b| b.uid)
        .ok_or_else(|| CliError(format!("{bot:?} is not an allowed bot (see `bots list`)")))?;
    warn_zero_caps(&args.datadir, &bridge.settings());
    let _watch = bridge.watch_settings();
    let publisher = publish_status(&args.datadir, &bridge, &host);
    let served = serve_stdio(&bridge, &uid).await;
    bridge.close().await;
    publisher.stop().await;
    host.close();
    served?;
    Ok(ExitCode::SUCCESS)
}
