//! `brmcp bridge`: local MCP endpoints for agents, proxying to Bison Relay bots through
//! a running Bison Relay client and paying them with tips under `mcpclient.json`.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{PeerId, Router, RouterConfig};
use brmcp_clientrpc::ClientRpcHost;
use clap::{Args, Subcommand};

use super::CliError;
use crate::bridge::{
    Bridge, Config, DEFAULT_LISTEN, Mode, Ownership, SETTINGS_FILE, Settings, approval_secret,
    running_bridge,
};
use crate::host::{TipPayer, bridge_streams, subscribe_to_announcements};
use crate::server::{Clock, SystemClock};
use crate::status::{ConnectionWatch, Publisher, RefusedAddress, Snapshot, SpendTotals};

mod approvals;
mod bots;
mod discover;
mod spend;
mod stdio;
#[cfg(test)]
mod tip_outcomes;
mod token;

use stdio::Served;

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
    /// Address of the HTTP endpoint, `host:port`: an address or a name resolving to
    /// loopback (`localhost:8892`), unless --allow-remote.
    #[arg(long = "listen", value_name = "HOST:PORT", value_parser = parse_listen,
          default_value_t = Listen::from(DEFAULT_LISTEN))]
    listen_arg: Listen,
    /// The address `--listen` resolved to (see [`resolve_listen`]).
    #[arg(skip = DEFAULT_LISTEN)]
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
    /// MCP servers: through the bridge running on the data directory, else as its
    /// bridge (on an ephemeral loopback port, for the stdio agents that come after).
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
    /// The bearer tokens agents present: the default one (show, rotate) and agents of
    /// their own with their own caps (add, list, remove).
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
    /// List, approve or deny the payments the running bridge of the data directory
    /// holds for approval (found through the data directory, HTTP or stdio, and asked
    /// with its approval secret, which no agent holds).
    #[command(subcommand)]
    Approvals(ApprovalsAction),
    /// Print a URL that opens the running bridge's page in a browser (payments
    /// waiting, bots, mode and caps, the spend log): it carries a login code made
    /// under the approval secret, which no agent holds, that works once, within 5
    /// minutes.
    Ui {
        /// Replace the approval secret first: every page session it opened ends, and
        /// `approvals` and `/payments` take the new one only.
        #[arg(long)]
        rotate: bool,
    },
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
    List {
        /// Print one JSON document (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
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
        /// Move the name from the bot that has it, or rename the bot from the name it
        /// has (both are refused without it).
        #[arg(long)]
        replace: bool,
    },
    /// Forget a bot, by name or user id.
    Remove {
        /// Name or user id.
        bot: String,
    },
    /// List the allowed bots.
    List {
        /// Print one JSON document (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List the bots that announced themselves in posts the bridge received (from
    /// users subscribed to: the allowed bots, and those of `bots subscribe`), with
    /// their tools and prices, and how many announcements were skipped (malformed,
    /// oversized, stale, naming another bot). Adding one is still `bots add`.
    Discover {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Ask the Bison Relay client for users' posts (nicks or 64-hex uids), so the
    /// bridge finds the bots they announce. Needs the client, as the bridge.
    Subscribe {
        /// The users.
        #[arg(required = true)]
        users: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
enum TokenAction {
    /// Print the token.
    Show {
        /// Print one JSON object (`{"token": ...}`) instead of the bare token.
        #[arg(long)]
        json: bool,
    },
    /// Replace the token with a fresh one (a running bridge refuses the old one within
    /// a second).
    Rotate,
    /// Make an agent with its own token (printed once, kept only as a hash) and caps.
    /// In approval mode only the user approves its payments (the page, `approvals`),
    /// unless `--agent-approves`.
    Add {
        /// The agent's name (letters, digits, '.', '_' or '-'), as the spend log shows it.
        name: String,
        /// Most one payment of this agent may be, atoms (also bound by the global cap).
        #[arg(long, value_name = "ATOMS")]
        per_call_cap: u64,
        /// Most this agent's payments of 24 hours may add up to, atoms (also bound by
        /// the global cap).
        #[arg(long, value_name = "ATOMS")]
        per_day_cap: u64,
        /// A bot (name or uid of an allowed bot) this agent may use; repeat for more.
        /// Without any, every allowed bot.
        #[arg(long = "bot", value_name = "BOT")]
        bots: Vec<String>,
        /// Let the agent's own client approve its payments too (by elicitation, or
        /// `input_required` on protocol 2026-07-28): whatever holds the token is then
        /// trusted as the user. For a host that shows the question to a person.
        #[arg(long)]
        agent_approves: bool,
        /// Print one JSON object (`{"name": ..., "token": ...}`) instead of the token.
        #[arg(long)]
        json: bool,
    },
    /// List the agents: names, caps, bots and who approves, never tokens.
    List {
        /// Print one JSON document (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Remove an agent: a running bridge refuses its token within a second.
    Remove {
        /// The agent's name.
        name: String,
    },
}

/// A `--listen` value: what was typed and the addresses it resolved to.
#[derive(Debug, Clone)]
struct Listen {
    text: String,
    addrs: Vec<SocketAddr>,
}

impl From<SocketAddr> for Listen {
    fn from(addr: SocketAddr) -> Self {
        Self {
            text: addr.to_string(),
            addrs: vec![addr],
        }
    }
}

impl std::fmt::Display for Listen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

/// Resolves `host:port` (an address, or a name as `localhost:8892`).
fn parse_listen(text: &str) -> Result<Listen, String> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("not a host:port that resolves: {e}"))?
        .collect();
    if addrs.is_empty() {
        return Err("resolves to no address".into());
    }
    Ok(Listen {
        text: text.to_owned(),
        addrs,
    })
}

/// The address to listen on, from `--listen`: a name resolving only to loopback
/// addresses gives the IPv4 one where there is one (what `localhost` usually means to
/// clients); one resolving elsewhere needs `--allow-remote`, and then its host name
/// is accepted in the `Host` header too.
fn resolve_listen(args: &mut BridgeArgs) -> Result<(), CliError> {
    let listen = &args.listen_arg;
    let loopback = listen.addrs.iter().all(|a| a.ip().is_loopback());
    if !loopback && !args.allow_remote {
        let shown: Vec<String> = listen.addrs.iter().map(|a| a.ip().to_string()).collect();
        return Err(CliError(format!(
            "--listen {}: resolves to {}, not only loopback: pass --allow-remote to listen \
             there (agents then always need the token)",
            listen.text,
            shown.join(", ")
        )));
    }
    args.listen = listen
        .addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(listen.addrs.first())
        .copied()
        .unwrap_or(DEFAULT_LISTEN);
    let host = listen.text.rsplit_once(':').map_or("", |(host, _)| host);
    if !loopback && host.parse::<std::net::IpAddr>().is_err() && !host.starts_with('[') {
        args.allow_hosts.push(host.to_owned());
    }
    Ok(())
}

pub(super) fn run(mut args: BridgeArgs) -> Result<ExitCode, CliError> {
    resolve_listen(&mut args)?;
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
            super::runtime()?.block_on(stdio::run(args, served))
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
        Some(BridgeAction::Bots(BotsAction::Discover { json })) => {
            discover::discover(&args.datadir, json)
        }
        Some(BridgeAction::Bots(BotsAction::Subscribe { ref users })) => {
            super::runtime()?.block_on(discover::subscribe(&args, users))
        }
        Some(BridgeAction::Bots(action)) => bots::run(&args.datadir, action),
        Some(BridgeAction::Token(action)) => token::run(&args.datadir, action),
        Some(BridgeAction::Status { json }) => super::status::show(&args.datadir, "bridge", json),
        Some(BridgeAction::Approvals(action)) => {
            let secret = approval_secret(&args.datadir)?;
            let addr = running_addr(&args.datadir)?;
            super::runtime()?.block_on(approvals::command(&args.datadir, addr, &secret, action))
        }
        Some(BridgeAction::Spend { json, action }) => spend::run(&args.datadir, json, action),
        Some(BridgeAction::Ui { rotate }) => {
            let page = &crate::bridge::ui::BRIDGE_PAGE;
            let now = SystemClock.now().secs();
            if rotate {
                // Even with no bridge running: the old secret opens nothing from now.
                crate::bridge::ui::web::login_code(page, &args.datadir, true, now)?;
                eprintln!("approval secret rotated: every page session it opened has ended");
            }
            let addr = running_addr(&args.datadir)?;
            let code = crate::bridge::ui::web::login_code(page, &args.datadir, false, now)?;
            println!("http://{addr}{}/login#{code}", crate::bridge::ui::UI_PATH);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The names the user gave the bots of `datadir`: uid to name. A missing or
/// unreadable settings file gives none (the uids are shown instead).
fn bot_names(datadir: &Path) -> HashMap<String, String> {
    Settings::load(&datadir.join(SETTINGS_FILE))
        .map(|s| {
            s.bot_names
                .into_iter()
                .map(|(name, uid)| (uid, name))
                .collect()
        })
        .unwrap_or_default()
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
    SystemClock.now()
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
        false,
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
    start_bridge_hosts(datadir, rpc_config, listen, false, allow_remote, &[]).await
}

/// As [`start_bridge`], accepting `allow_hosts` in the `Host` header too.
pub(crate) async fn start_bridge_hosts(
    datadir: &Path,
    rpc_config: &Path,
    listen: SocketAddr,
    listen_fallback: bool,
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
    let router = Router::new(host.clone(), crate::bridge::router_config());
    crate::secure_fs::create_dir(datadir)
        .map_err(|e| CliError(format!("{}: {e}", datadir.display())))?;
    let mut config = Config::new(datadir).with_listen(listen);
    config.listen_fallback = listen_fallback;
    config.allow_remote = allow_remote;
    config.allowed_hosts = allow_hosts.to_vec();
    // Before connecting: the stream redelivers unacknowledged outcomes at once.
    let bridge = Bridge::new(config, router.clone(), TipPayer::new(host.clone()))?;
    let streams = bridge_streams(datadir, router, &bridge)?;
    super::serve::connect(&host, streams).await?;
    // The allowed bots' posts: their announcements keep `bots discover` current.
    let bots: Vec<String> = bridge
        .settings()
        .bots()
        .iter()
        .map(|b| b.uid.to_string())
        .collect();
    let subscriber = host.clone();
    tokio::spawn(async move { subscribe_to_announcements(&subscriber, &bots).await });
    Ok((bridge, host))
}

/// How long `brmcp bridge` waits for the data directory's lock: rides out a previous
/// run still closing and another command's brief look.
const CLAIM_WAIT: Duration = Duration::from_secs(3);

/// The listener of the bridge running on `datadir`.
fn running_addr(datadir: &Path) -> Result<SocketAddr, CliError> {
    match running_bridge(datadir)? {
        None => Err(CliError(format!(
            "no bridge runs on {} (start `brmcp bridge` or a `bridge stdio` agent)",
            datadir.display()
        ))),
        Some(running) => running.endpoint.map(|e| e.addr).ok_or_else(|| {
            CliError(format!(
                "the bridge of {} serves no endpoint yet (starting, or `enabled` is false in mcpclient.json)",
                datadir.display()
            ))
        }),
    }
}

/// Takes the data directory for this process, or says which bridge has it.
fn claim(datadir: &Path) -> Result<Ownership, CliError> {
    crate::secure_fs::create_dir(datadir)
        .map_err(|e| CliError(format!("{}: {e}", datadir.display())))?;
    if let Some(owned) = Ownership::claim_within(datadir, CLAIM_WAIT)? {
        return Ok(owned);
    }
    let at = running_bridge(datadir)?
        .and_then(|r| r.endpoint)
        .map(|e| format!(" (pid {}, http://{})", e.pid, e.addr))
        .unwrap_or_default();
    Err(CliError(format!(
        "a bridge already runs on {}{at}: stop it first (a `bridge stdio` agent's bridge \
         stops with its agent); stdio agents attach to a running bridge themselves",
        datadir.display()
    )))
}

async fn run_http(args: BridgeArgs) -> Result<ExitCode, CliError> {
    let ownership = claim(&args.datadir)?;
    let (bridge, host) = start_from_args(&args).await?;
    bridge.own_data_dir(ownership);
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
        match &bot.name {
            Some(name) => eprintln!(
                "  {name}: http://{addr}/mcp/{name} (also http://{addr}/mcp/{})",
                bot.uid
            ),
            None => eprintln!("  bot: http://{addr}/mcp/{}", bot.uid),
        }
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
    // Logged in either mode: a switch to approval applies without a restart.
    let typed_here = std::io::stdin().is_terminal();
    approvals::log_held(&bridge, &args.datadir, typed_here);
    if typed_here {
        let approver = bridge.clone();
        tokio::spawn(async move { approvals::prompt(approver).await });
    }
    if settings.mode == Mode::Approval {
        let here = if typed_here {
            "type `approve ID` or `deny ID` here, or use"
        } else {
            "decide them with"
        };
        eprintln!(
            "payments wait for approval: {here} `brmcp bridge --datadir {} approvals`",
            args.datadir.display()
        );
    }
    warn_zero_caps(&args.datadir, &settings);
    let publisher = publish_status(&args.datadir, &bridge, &host);
    eprintln!("Ctrl-C stops the bridge.");
    super::wait_for_interrupt().await;
    bridge.close().await;
    publisher.stop().await;
    // What was recorded is cleared on the client, not left for the next consumer.
    host.flush_acks(brmcp_clientrpc::ACK_FLUSH_WAIT).await;
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
        snapshot.refused_address = bridge
            .last_refused_address()
            .map(|r| RefusedAddress::new(r.ip.to_string(), r.at.secs()));
        snapshot
    })
}
