//! `brmcp bridge`: local MCP endpoints for agents, proxying to Bison Relay bots through
//! a running Bison Relay client and paying them with tips under `mcpclient.json`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use brmcp_adapters::clientrpc::{ClientRpcError, ClientRpcHost, Streams, proto::TipProgressEvent};
use brmcp_adapters::wire::UnixTime;
use brmcp_adapters::{BoxError, PeerId, Router, RouterConfig};
use clap::{Args, Subcommand};
use tokio::io::AsyncBufReadExt;
use tokio::sync::{Notify, broadcast};

use super::CliError;
use super::table::{Table, print_json, rfc3339};
use crate::bridge::{
    Bridge, Config, DEFAULT_LISTEN, ListedBot, Mode, Payer, PaymentFailed, PaymentUnconfirmed,
    Resolution, SETTINGS_FILE, Settings, SpendEntry, SpendLog, SpendStatus, TipOutcomeEvent,
    serve_directory_stdio, serve_stdio,
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
    let settings_path = args.datadir.join(SETTINGS_FILE);
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
            super::runtime()?.block_on(add_from_directory(args, uid, directory, bot_name))
        }
        Some(BridgeAction::Bots(action)) => {
            let settings = load(&settings_path)?;
            let settings = match action {
                BotsAction::Add {
                    name: Some(name),
                    uid: Some(uid),
                    ..
                } => settings.with_bot(&name, uid)?,
                BotsAction::Add { .. } => {
                    return Err(CliError(
                        "bots add needs NAME and UID, or --from-directory UID".into(),
                    ));
                }
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
        Some(BridgeAction::Spend { json, action }) => {
            let log = SpendLog::open(&args.datadir, now())?;
            if let Some(SpendAction::Resolve { id, outcome }) = action {
                let paid = matches!(outcome, Resolved::Paid);
                if !log.resolve_by_user(id, paid)? {
                    return Err(CliError(format!("no pending payment {id} (see `spend`)")));
                }
                println!(
                    "payment {id} resolved {}",
                    if paid { "paid" } else { "failed" }
                );
                return Ok(ExitCode::SUCCESS);
            }
            print_spend(&log.entries()?, log.spent_today(now())?, json);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The spend log as a table with the daily total, or as one JSON array.
fn print_spend(entries: &[SpendEntry], today_atoms: u64, json: bool) {
    // Counted against the cap until its outcome arrives or the user resolves it.
    let unconfirmed = |e: &SpendEntry| e.unconfirmed && e.status == SpendStatus::Pending;
    if json {
        let rows: Vec<_> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "id": e.id,
                    "ts": e.ts,
                    "ts_rfc3339": rfc3339(e.ts),
                    "bot": e.bot,
                    "tool": e.tool,
                    "rail": e.rail,
                    "atoms": e.atoms,
                    "status": e.status.as_str(),
                    "unconfirmed": unconfirmed(e),
                    "error": e.err,
                })
            })
            .collect();
        print_json(&serde_json::json!(rows));
        return;
    }
    let mut table = Table::new(&["ID", "TIME", "BOT", "TOOL", "ATOMS", "STATUS", "NOTE"]);
    for e in entries {
        let note = if unconfirmed(e) {
            "unconfirmed: counted until its outcome arrives or `spend resolve`".to_owned()
        } else {
            e.err.clone().unwrap_or_default()
        };
        table.row(vec![
            e.id.to_string(),
            rfc3339(e.ts),
            e.bot.clone(),
            e.tool.clone(),
            e.atoms.to_string(),
            e.status.as_str().to_owned(),
            note,
        ]);
    }
    print!("{table}");
    println!(
        "last 24 hours: {today_atoms} atoms (paid in the last 24 hours, and every pending payment whatever its age)"
    );
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

/// Terminal outcomes a [`TipPayer`] remembers having claimed: a tip's outcome is
/// claimed within the tip wait, so the last 1024 cover every payment in flight.
const MAX_CLAIMED: usize = 1024;

/// What the payer knows of the client's TipProgress stream: the highest id seen (its
/// position) and the outcomes already taken by a payment.
#[derive(Default)]
struct OutcomeStream {
    position: AtomicU64,
    claimed: Mutex<VecDeque<u64>>,
}

/// Pays bots with Bison Relay tips through the client.
///
/// TipProgress events carry no tag, so the host's own matching (payee and amount) can
/// hand a tip a replayed or unrelated outcome. The payer therefore decides itself which
/// outcome is its tip's: the oldest terminal event for the same bot and amount that it
/// saw after sending, whose id is above the stream position recorded when the payment
/// was made and that no other payment claimed. With none, the payment stays
/// unconfirmed, and the spend log's rule settles it later from the late outcomes.
pub(crate) struct TipPayer {
    host: ClientRpcHost,
    stream: Arc<OutcomeStream>,
}

impl TipPayer {
    /// A payer on `host`, following its TipProgress stream from now on: make it before
    /// the host connects, so replayed outcomes raise its position too.
    pub(crate) fn new(host: ClientRpcHost) -> Self {
        let stream = Arc::new(OutcomeStream::default());
        let mut events = host.subscribe_tip_progress();
        let weak = Arc::downgrade(&stream);
        tokio::spawn(async move {
            loop {
                let id = match events.recv().await {
                    Ok(event) => event.sequence_id,
                    // Missed ids leave the position lower, never higher: outcomes are
                    // then only less likely to be refused.
                    Err(broadcast::error::RecvError::Lagged(_)) => continue,
                    Err(broadcast::error::RecvError::Closed) => return,
                };
                let Some(stream) = weak.upgrade() else { return };
                stream.position.fetch_max(id, Ordering::SeqCst);
            }
        });
        Self { host, stream }
    }
}

/// The oldest terminal event in `events` (those received since the tip was sent) for
/// `bot` and `matoms` above `position` that is not in `claimed`, claimed.
fn claim_outcome(
    events: &mut broadcast::Receiver<TipProgressEvent>,
    claimed: &Mutex<VecDeque<u64>>,
    bot: PeerId,
    matoms: i64,
    position: u64,
) -> Option<TipProgressEvent> {
    let mut candidates = Vec::new();
    loop {
        match events.try_recv() {
            Ok(event) => {
                if event.is_terminal()
                    && event.uid == bot
                    && event.amount_matoms == matoms
                    && event.sequence_id > position
                {
                    candidates.push(event);
                }
            }
            Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => break,
        }
    }
    candidates.sort_by_key(|e| e.sequence_id);
    let mut claimed = claimed
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let event = candidates
        .into_iter()
        .find(|e| !claimed.contains(&e.sequence_id))?;
    if claimed.len() == MAX_CLAIMED {
        claimed.pop_front();
    }
    claimed.push_back(event.sequence_id);
    Some(event)
}

impl Payer for TipPayer {
    async fn pay(&self, bot: PeerId, atoms: u64) -> Result<(), BoxError> {
        self.pay_traced(bot, atoms, self.position()).await.map(drop)
    }

    fn position(&self) -> u64 {
        self.stream.position.load(Ordering::SeqCst)
    }

    async fn pay_traced(
        &self,
        bot: PeerId,
        atoms: u64,
        position: u64,
    ) -> Result<Option<u64>, BoxError> {
        let matoms = atoms
            .checked_mul(MATOMS_PER_ATOM)
            .and_then(|m| i64::try_from(m).ok())
            .ok_or("tip too large")?;
        // Subscribed before TipUser: the tip's outcome cannot be missed.
        let mut events = self.host.subscribe_tip_progress();
        match self.host.tip(bot, atoms).await {
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
            // Whatever the host matched, the outcome this payment takes is decided
            // here, from the events seen since it was sent.
            Ok(_) => {}
        }
        match claim_outcome(&mut events, &self.stream.claimed, bot, matoms, position) {
            Some(event) if event.completed => Ok(Some(event.sequence_id)),
            Some(event) => Err(PaymentFailed {
                id: event.sequence_id,
                reason: format!("tip failed: {}", event.attempt_err),
            }
            .into()),
            // No outcome yet, or only ones that cannot be this tip's: it may still be
            // paid; the spend log keeps it pending until its outcome arrives (see
            // `settle_late_tip`).
            None => Err(PaymentUnconfirmed.into()),
        }
    }
}

/// Settles the spend log's pending payment a tip outcome belongs to, by the spend log's
/// attribution rule ([`SpendLog::resolve_outcome`]): every terminal outcome, the one a
/// payment still waiting takes (its payer's own settlement by the same outcome then
/// changes nothing, and neither does this after it), those that arrive after the bridge
/// stopped waiting, and those redelivered after a restart. A replayed outcome or one of
/// a tip sent before the payment settles nothing. The host acknowledges the outcome
/// only after this returns `Ok`, so an outcome is never lost between its
/// acknowledgement and its record; on `Err` it is offered again.
async fn settle_late_tip(bridge: Bridge, event: TipProgressEvent) -> Result<(), BoxError> {
    let Some(outcome) = late_outcome(&event) else {
        return Ok(());
    };
    match bridge.resolve_spend(&outcome) {
        Ok(Resolution::Settled(id)) => {
            tracing::info!(id, bot = %event.uid, atoms = outcome.atoms, paid = event.completed, "tip outcome recorded");
        }
        Ok(Resolution::Replay) => {
            tracing::debug!(outcome = event.sequence_id, "replayed tip outcome ignored");
        }
        // A tip sent by hand, or by another program on the same client.
        Ok(Resolution::NotOurs) => {
            tracing::debug!(bot = %event.uid, atoms = outcome.atoms, "tip outcome matches no pending payment");
        }
        Err(e) => {
            tracing::warn!(error = %e, "late tip outcome not recorded; retrying");
            return Err(e.into());
        }
    }
    Ok(())
}

/// A terminal TipProgress event as a spend-log outcome; `None` for an amount the
/// bridge never tips (not whole atoms).
fn late_outcome(event: &TipProgressEvent) -> Option<TipOutcomeEvent<'_>> {
    let atoms = u64::try_from(event.amount_matoms)
        .ok()
        .filter(|m| m % MATOMS_PER_ATOM == 0)
        .map(|m| m / MATOMS_PER_ATOM)?;
    let outcome = if event.completed {
        Ok(())
    } else if event.attempt_err.is_empty() {
        Err("tip failed")
    } else {
        Err(event.attempt_err.as_str())
    };
    Some(TipOutcomeEvent {
        id: event.sequence_id,
        bot: event.uid,
        atoms,
        outcome,
    })
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

/// What `bridge stdio` serves.
enum Served {
    /// A bot, by name or uid.
    Bot(String),
    /// A directory's tools, by name or uid (`None`: the first).
    Directory(Option<String>),
}

/// `bots add --from-directory`: looks `uid` up in the directory, prints it, adds it.
async fn add_from_directory(
    args: BridgeArgs,
    uid: PeerId,
    directory: Option<String>,
    name: Option<String>,
) -> Result<ExitCode, CliError> {
    let rpc_config = args
        .rpc_config
        .unwrap_or_else(|| args.datadir.join(RPC_CONFIG));
    let (bridge, host) = start_bridge(&args.datadir, &rpc_config, args.listen, false).await?;
    let added = bridge
        .add_from_directory(directory.as_deref(), uid, name.as_deref())
        .await;
    bridge.close().await;
    host.close();
    let listed = added?;
    print_listed(&listed);
    let name = bridge
        .bots()
        .into_iter()
        .find(|b| b.uid == uid)
        .and_then(|b| b.name)
        .unwrap_or_default();
    println!("added bot {uid} as {name:?}");
    Ok(ExitCode::SUCCESS)
}

/// A provider as its directory lists it: uid, description, tools with prices.
fn print_listed(listed: &ListedBot) {
    println!("bot {}: {}", listed.uid, listed.description);
    let mut table = Table::new(&["TOOL", "PRICE"]);
    for (tool, price) in &listed.tools {
        table.row(vec![tool.clone(), price.clone()]);
    }
    print!("{table}");
}

async fn run_stdio(args: BridgeArgs, served: Served) -> Result<ExitCode, CliError> {
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

    fn terminal(id: u64, bot: PeerId, matoms: i64, completed: bool) -> TipProgressEvent {
        serde_json::from_value(serde_json::json!({
            "sequenceId": id.to_string(),
            "uid": base64_uid(bot),
            "amountMatoms": matoms.to_string(),
            "completed": completed,
            "attempt": 1,
            "attemptErr": if completed { "" } else { "no route" },
        }))
        .unwrap()
    }

    fn base64_uid(bot: PeerId) -> String {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(bot.as_bytes())
    }

    #[derive(Debug, clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: BridgeArgs,
    }

    fn command(dir: &Path, words: &[&str]) -> Result<ExitCode, CliError> {
        use clap::Parser;
        let datadir = dir.to_str().unwrap();
        let argv = ["brmcp-bridge", "--datadir", datadir]
            .into_iter()
            .chain(words.iter().copied());
        run(Command::try_parse_from(argv)
            .map_err(|e| CliError(e.to_string()))?
            .args)
    }

    #[test]
    fn spend_resolve_settles_a_pending_payment_once() {
        let dir = tempfile::tempdir().unwrap();
        let bot = PeerId::from_bytes([1; 32]);
        let log = SpendLog::open(dir.path(), now()).unwrap();
        let id = log
            .reserve(now(), &bot, "t", 700, 1000, 0)
            .unwrap()
            .unwrap();
        log.unconfirm(id).unwrap();
        assert_eq!(log.spent_today(now()).unwrap(), 700);
        let id_arg = id.to_string();
        assert!(command(dir.path(), &["spend", "resolve", &id_arg, "maybe"]).is_err());
        command(dir.path(), &["spend", "resolve", &id_arg, "failed"]).unwrap();
        assert_eq!(log.spent_today(now()).unwrap(), 0, "its budget is free");
        assert_eq!(log.entries().unwrap()[0].status, SpendStatus::Failed);
        let again = command(dir.path(), &["spend", "resolve", &id_arg, "paid"]).unwrap_err();
        assert!(again.0.contains("no pending payment"), "{again:?}");
        assert_eq!(log.entries().unwrap()[0].status, SpendStatus::Failed);
    }

    #[test]
    fn a_tip_takes_only_an_outcome_that_can_be_its_own() {
        let (tx, mut rx) = broadcast::channel(16);
        let claimed = Mutex::new(VecDeque::new());
        let (bot, other) = (PeerId::from_bytes([1; 32]), PeerId::from_bytes([2; 32]));
        // Replayed from before the tip was sent (at position 100), another bot's, another
        // amount, a retrying attempt: none of them is this tip's outcome.
        tx.send(terminal(90, bot, 5000, true)).unwrap();
        tx.send(terminal(110, other, 5000, true)).unwrap();
        tx.send(terminal(111, bot, 6000, true)).unwrap();
        let mut retrying = terminal(112, bot, 5000, false);
        retrying.will_retry = true;
        tx.send(retrying).unwrap();
        assert_eq!(claim_outcome(&mut rx, &claimed, bot, 5000, 100), None);
        // Two tips of one amount in flight: each takes its own outcome, once.
        tx.send(terminal(130, bot, 5000, false)).unwrap();
        tx.send(terminal(120, bot, 5000, true)).unwrap();
        let mut second = tx.subscribe();
        let first = claim_outcome(&mut rx, &claimed, bot, 5000, 100).unwrap();
        assert_eq!((first.sequence_id, first.completed), (120, true));
        tx.send(terminal(120, bot, 5000, true)).unwrap();
        tx.send(terminal(130, bot, 5000, false)).unwrap();
        let next = claim_outcome(&mut second, &claimed, bot, 5000, 100).unwrap();
        assert_eq!((next.sequence_id, next.completed), (130, false));
        assert_eq!(claim_outcome(&mut rx, &claimed, bot, 5000, 100), None);
    }

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
        let (harness, _upstreams) =
            super::super::serve::start_serving(&alice.dir, &config, &host_a)
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
