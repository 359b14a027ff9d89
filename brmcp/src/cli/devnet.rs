//! `brmcp devnet`: a local Bison Relay simulator, with the commands that use it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::{Value, json};

use super::CliError;
use super::table::{Table, print_json, rfc3339};
use crate::directory::{POLICY_FILE, Policy};
use brmcp_adapters::protocol::{ATOMS_PER_DCR, MATOMS_PER_ATOM};
use brmcp_devnet::{
    Devnet, DevnetConfig, FAULTS_FILE, Faults, MAX_POST_BYTES, NodeInfo, NodeSpec, POSTS_DIR,
    PostRequest, Wallet,
};

/// Nicks of the first nodes; more are `node5`, `node6`, ...
const NICKS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// Most nodes one devnet runs: each is a TLS listener and a set of files.
const MAX_NODES: usize = 64;

/// The nick of the directory node (`--directory`); no other node is named so.
pub(super) const DIRECTORY_NICK: &str = "directory";

/// How long `devnet post` waits for the running devnet's answer: it looks for
/// requests every 200 ms, so this is ample on a loaded machine.
const POST_ANSWER_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// How often `devnet post` looks for the answer.
const POST_ANSWER_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// The devnet directory's name in its policy.
const DIRECTORY_NAME: &str = "devnet-directory";

/// The devnet directory's listing fee: small, so a provider pays it from its devnet
/// wallet many times over.
pub(super) const DEVNET_LISTING_FEE_ATOMS: i64 = 5_000;

/// The most the devnet provider's registrant pays a directory in one request: the fee
/// plus the test's price, with room to spare.
const DEVNET_FUND_PER_REQUEST_ATOMS: u64 = 50_000;

/// The most it pays directories in 30 days: a few registrations.
const DEVNET_FUND_PER_MONTH_ATOMS: u64 = 200_000;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(super) struct DevnetArgs {
    #[command(subcommand)]
    command: Option<DevnetCommand>,
    /// Directory for the nodes' certificates and config files, wallets, relay queues
    /// and stream logs (kept between runs, across any stop).
    #[arg(long, value_name = "DIR", required = true)]
    dir: Option<PathBuf>,
    /// How many nodes (clients) to run.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=MAX_NODES as i64))]
    nodes: u16,
    /// Also run a node for a directory (`brmcp directory`), the first node's tools
    /// registering with it and the second node its operator.
    #[arg(long)]
    directory: bool,
    #[command(flatten)]
    faults: FaultArgs,
}

/// The fault dial's starting settings, written to `faults.json` at each start (all
/// off without flags); edits of the file apply while the devnet runs.
#[derive(Debug, Args)]
struct FaultArgs {
    /// Latency added to every PM and tip invoice request, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    latency_ms: u64,
    /// Up to this much more latency per message, at random, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    jitter_ms: u64,
    /// The share of PM deliveries the relay drops and re-sends later (0 to 0.9):
    /// drops become delay, never loss.
    #[arg(long, value_name = "RATE", default_value_t = 0.0, value_parser = drop_rate)]
    pm_drop_rate: f64,
    /// A node (by nick) off the relay from the start; repeatable.
    #[arg(long, value_name = "NICK")]
    offline: Vec<String>,
    /// How long a mediated key exchange takes, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    kx_delay_ms: u64,
    /// Seed for the dial's random rolls (jitter, drops), so a run repeats them.
    #[arg(long, value_name = "N")]
    fault_seed: Option<u64>,
}

/// `--pm-drop-rate`: a number from 0 to 0.9.
fn drop_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if (0.0..=0.9).contains(&r) => Ok(r),
        _ => Err("expected a number from 0 to 0.9".to_owned()),
    }
}

impl FaultArgs {
    fn faults(&self) -> Faults {
        let mut f = Faults::default();
        f.latency_ms = self.latency_ms;
        f.jitter_ms = self.jitter_ms;
        f.pm_drop_rate = self.pm_drop_rate;
        f.offline = self.offline.iter().cloned().collect();
        f.kx_delay_ms = self.kx_delay_ms;
        f.seed = self.fault_seed;
        f
    }
}

#[derive(Debug, Subcommand)]
enum DevnetCommand {
    /// Print each node's wallet (atoms and DCR) and its recent tips, from the devnet
    /// directory (current while the devnet runs, and after it stopped).
    Wallets(WalletsArgs),
    /// Take a node off the relay: it receives no PMs or tips until `online`.
    Offline(NodeArgs),
    /// Bring a node back onto the relay: what waited arrives, in order.
    Online(NodeArgs),
    /// Publish FILE's text as a post by node NAME (clientrpc has no method to create
    /// a post): the users subscribed to NAME receive it on `PostsStream`. Prints the
    /// post id.
    Post(PostArgs),
}

#[derive(Debug, Args)]
struct PostArgs {
    /// The author's nick.
    #[arg(value_name = "NAME")]
    name: String,
    /// The post's text (UTF-8).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The running devnet's directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

#[derive(Debug, Args)]
struct NodeArgs {
    /// The node's nick.
    #[arg(value_name = "NAME")]
    name: String,
    /// The devnet's directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

#[derive(Debug, Args)]
struct WalletsArgs {
    /// The devnet's directory.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// One JSON document: `{"wallets": [{"nick", "uid", "balance_atoms",
    /// "balance_matoms", "balance_dcr", "recent_tips": [{"direction", "peer",
    /// "peer_nick", "atoms", "matoms", "at"}]}]}`.
    #[arg(long)]
    json: bool,
}

pub(crate) fn nicks(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            NICKS
                .get(i)
                .map_or_else(|| format!("node{}", i + 1), |s| (*s).to_owned())
        })
        .collect()
}

pub(super) fn run(args: DevnetArgs) -> Result<ExitCode, CliError> {
    match args.command {
        Some(DevnetCommand::Wallets(w)) => return wallets(&w),
        Some(DevnetCommand::Offline(n)) => return set_offline(&n, true),
        Some(DevnetCommand::Online(n)) => return set_offline(&n, false),
        Some(DevnetCommand::Post(p)) => return post(&p),
        None => {}
    }
    let Some(dir) = args.dir else {
        return Err(CliError("devnet needs --dir".to_owned()));
    };
    super::runtime()?.block_on(async {
        let mut nicks = nicks(usize::from(args.nodes));
        if args.directory {
            nicks.push(DIRECTORY_NICK.to_owned());
        }
        let nicks: Vec<&str> = nicks.iter().map(String::as_str).collect();
        let faults = args.faults.faults();
        if let Some(nick) = faults.offline.iter().find(|n| !nicks.contains(&n.as_str())) {
            return Err(CliError(format!(
                "--offline {nick}: no such node (the nodes are {})",
                nicks.join(", ")
            )));
        }
        // Nodes the dial keeps offline start off the relay: what waited for them
        // there (kept across a stop) stays queued until they come back.
        let specs = nicks
            .iter()
            .map(|nick| {
                let spec = NodeSpec::new(*nick);
                if faults.offline.contains(*nick) {
                    spec.offline()
                } else {
                    spec
                }
            })
            .collect();
        let devnet = Devnet::start_with(&dir, specs, DevnetConfig::default()).await?;
        brmcp_devnet::write_faults(devnet.dir(), &faults)
            .map_err(|e| CliError(format!("{}: {e}", dir.join(FAULTS_FILE).display())))?;
        devnet
            .watch_faults()
            .map_err(|e| CliError(e.to_string()))?;
        devnet
            .watch_posts()
            .map_err(|e| CliError(format!("{}: {e}", dir.join(POSTS_DIR).display())))?;
        let mut nodes = devnet.nodes();
        let directory = if args.directory { nodes.pop() } else { None };
        println!(
            "devnet running in {} with {} node(s):",
            dir.display(),
            nodes.len()
        );
        for node in nodes.iter().chain(&directory) {
            println!("  {:<6} {}  {}", node.nick, node.uid_hex(), node.url);
        }
        if let [server, client, ..] = nodes.as_slice() {
            print_commands(&dir, server, client, directory.as_ref())?;
        } else if let Some(directory) = &directory {
            print_directory(directory, None)?;
        }
        println!(
            "Wallets, relay queues and stream logs are kept in {} across restarts; see the wallets with:",
            dir.display()
        );
        println!("  brmcp devnet wallets --dir {} [--json]", dir.display());
        println!(
            "Fault dial {} ({}, read live; or `brmcp devnet offline|online NAME --dir {}`).",
            if faults.is_off() { "off" } else { "on" },
            dir.join(FAULTS_FILE).display(),
            dir.display()
        );
        println!(
            "Publish a post as a node: brmcp devnet post NAME FILE --dir {}",
            dir.display()
        );
        println!("Ctrl-C stops the devnet.");
        super::wait_for_interrupt().await;
        devnet.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// `brmcp.json` of a devnet provider: `allowed` may call its tools; with a
/// `directory` (uid), that directory may too (it crawls and test-calls them) and the
/// provider registers with it at startup, paying the invoice within small caps.
pub(super) fn provider_config(allowed: &[String], directory: Option<&str>) -> Value {
    let mut uids: Vec<&str> = allowed.iter().map(String::as_str).collect();
    uids.extend(directory);
    let mut config = json!({"allowed_uids": uids, "calls_per_minute": 30});
    if let Some(directory) = directory {
        config["directory"] = json!({
            "description": "Example tools: echo (free) and fortune (paid)",
            "tags": ["example", "fortune"],
            "test": {"tool": "fortune", "maxAtoms": super::serve::FORTUNE_ATOMS},
            "auto_fund": {
                "enabled": true,
                "max_atoms_per_request": DEVNET_FUND_PER_REQUEST_ATOMS,
                "max_atoms_per_month": DEVNET_FUND_PER_MONTH_ATOMS,
                "allowed_directory_uids": [directory],
            },
            "register_at_uids": [directory],
        });
    }
    config
}

/// The devnet directory's policy: `operator` (uid) its admin, a small fee.
pub(super) fn directory_policy(operator: Option<&str>) -> Policy {
    Policy {
        admin_uids: operator.into_iter().map(str::to_owned).collect(),
        listing_fee_atoms: DEVNET_LISTING_FEE_ATOMS,
        name: DIRECTORY_NAME.to_owned(),
        ..Policy::default()
    }
}

/// Writes `text` to `path` unless the file exists (a later run keeps the user's edits).
fn write_once(path: &Path, text: &str) -> Result<(), CliError> {
    if path.exists() {
        return Ok(());
    }
    crate::secure_fs::write_atomic(path, text.as_bytes())
        .map_err(|e| CliError(format!("{}: {e}", path.display())))
}

/// Prepares the directory node's data directory (its policy, `operator` its admin)
/// and prints the command that runs the directory.
fn print_directory(directory: &NodeInfo, operator: Option<&NodeInfo>) -> Result<(), CliError> {
    let policy = directory_policy(operator.map(NodeInfo::uid_hex).as_deref());
    let text = serde_json::to_string_pretty(&policy).map_err(|e| CliError(e.to_string()))?;
    write_once(&directory.dir.join(POLICY_FILE), &format!("{text}\n"))?;
    println!();
    println!(
        "In another terminal, run the directory {} on node {}:",
        directory.uid_hex(),
        directory.nick
    );
    println!(
        "  brmcp directory --datadir {} --rpc-config {}",
        directory.dir.display(),
        directory.config_path.display()
    );
    if let Some(operator) = operator {
        println!(
            "Its operator is {} (admin_uids in {}).",
            operator.nick,
            directory.dir.join(POLICY_FILE).display()
        );
    }
    Ok(())
}

/// Prepares `server`'s directory to serve `client` (and register with `directory`)
/// and prints the commands to run.
fn print_commands(
    dir: &Path,
    server: &NodeInfo,
    client: &NodeInfo,
    directory: Option<&NodeInfo>,
) -> Result<(), CliError> {
    // Allow the client node to call the server node's tools, once.
    let serve_config = server.dir.join(super::serve::SERVE_CONFIG);
    let config = provider_config(
        &[client.uid_hex()],
        directory.map(NodeInfo::uid_hex).as_deref(),
    );
    write_once(&serve_config, &format!("{config:#}\n"))?;
    if let Some(directory) = directory {
        print_directory(directory, Some(client))?;
    }
    let bridge_dir = dir.join(format!("{}-bridge", client.nick));
    println!();
    println!("In another terminal, serve tools from {}:", server.nick);
    println!("  brmcp serve --datadir {}", server.dir.display());
    println!("and bridge an agent through {}:", client.nick);
    println!(
        "  brmcp bridge --datadir {} --rpc-config {} bots add {} {}",
        bridge_dir.display(),
        client.config_path.display(),
        server.nick,
        server.uid_hex()
    );
    println!(
        "  brmcp bridge --datadir {} --rpc-config {}",
        bridge_dir.display(),
        client.config_path.display()
    );
    println!();
    Ok(())
}

/// `brmcp devnet wallets`: read from the directory's kept state, which every change
/// reaches before anyone sees it, so a running devnet is current there too.
fn wallets(args: &WalletsArgs) -> Result<ExitCode, CliError> {
    let Some(wallets) = brmcp_devnet::read_wallets(&args.dir)? else {
        return Err(CliError(format!(
            "no devnet state in {} (run `brmcp devnet --dir {}` first)",
            args.dir.display(),
            args.dir.display()
        )));
    };
    if args.json {
        print_json(&wallets_json(&wallets));
        return Ok(ExitCode::SUCCESS);
    }
    let mut table = Table::new(&["NICK", "UID", "DCR", "ATOMS"]);
    for w in &wallets {
        table.row(vec![
            w.nick.clone(),
            hex::encode(w.uid),
            dcr_text(w.balance_matoms),
            atoms(w.balance_matoms).to_string(),
        ]);
    }
    print!("{table}");
    for w in wallets.iter().filter(|w| !w.recent_tips.is_empty()) {
        println!();
        println!("{}'s recent tips:", w.nick);
        let mut tips = Table::new(&["AT", "DIRECTION", "PEER", "ATOMS"]);
        for t in &w.recent_tips {
            tips.row(vec![
                rfc3339(t.at_ms.div_euclid(1000)),
                t.direction.as_str().to_owned(),
                t.peer_nick.clone().unwrap_or_else(|| hex::encode(t.peer)),
                atoms(t.matoms).to_string(),
            ]);
        }
        print!("{tips}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `brmcp devnet offline|online NAME`: edits the running devnet's fault dial, which
/// it reads live.
fn set_offline(args: &NodeArgs, offline: bool) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let Some(mut faults) = brmcp_devnet::read_faults(dir).map_err(|e| CliError(e.to_string()))?
    else {
        return Err(CliError(format!(
            "no fault dial in {} (run `brmcp devnet --dir {}` first)",
            dir.display(),
            dir.display()
        )));
    };
    if !dir.join(&args.name).is_dir() || args.name.contains(['/', '\\']) {
        return Err(CliError(format!(
            "no node {:?} in {}",
            args.name,
            dir.display()
        )));
    }
    let changed = if offline {
        faults.offline.insert(args.name.clone())
    } else {
        faults.offline.remove(&args.name)
    };
    if changed {
        brmcp_devnet::write_faults(dir, &faults)
            .map_err(|e| CliError(format!("{}: {e}", dir.join(FAULTS_FILE).display())))?;
    }
    println!(
        "{} is {} (in {}; a running devnet applies it within a second)",
        args.name,
        if offline { "offline" } else { "online" },
        dir.join(FAULTS_FILE).display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `brmcp devnet post NAME FILE`: drops a post request in the running devnet's
/// directory and prints the post id it answers with.
fn post(args: &PostArgs) -> Result<ExitCode, CliError> {
    let dir = &args.dir;
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| CliError(format!("{}: {e}", args.file.display())))?;
    if text.len() > MAX_POST_BYTES {
        return Err(CliError(format!(
            "{}: larger than a post's {MAX_POST_BYTES} bytes",
            args.file.display()
        )));
    }
    let posts = dir.join(POSTS_DIR);
    if !posts.is_dir() {
        return Err(CliError(format!(
            "no running devnet in {} (run `brmcp devnet --dir {}` first)",
            dir.display(),
            dir.display()
        )));
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = format!("{}-{nanos}", std::process::id());
    let request = posts.join(format!("{name}.json"));
    let req = PostRequest {
        author: args.name.clone(),
        text,
    };
    let body = serde_json::to_string(&req).map_err(|e| CliError(e.to_string()))?;
    // Written whole before it appears (the devnet reads only `.json` files), only its
    // user reading it.
    crate::secure_fs::write_atomic(&request, body.as_bytes())
        .map_err(|e| CliError(format!("{}: {e}", request.display())))?;
    let (id_path, err_path) = (request.with_extension("id"), request.with_extension("err"));
    let mut waited = std::time::Duration::ZERO;
    loop {
        if let Ok(id) = std::fs::read_to_string(&id_path) {
            let _ = std::fs::remove_file(&id_path);
            println!("{id}");
            return Ok(ExitCode::SUCCESS);
        }
        if let Ok(why) = std::fs::read_to_string(&err_path) {
            let _ = std::fs::remove_file(&err_path);
            return Err(CliError(format!("post refused: {why}")));
        }
        if waited >= POST_ANSWER_WAIT {
            // Taken back if the devnet has not taken it: nothing is published later.
            if std::fs::remove_file(&request).is_ok() {
                return Err(CliError(format!(
                    "no running devnet in {} answered; nothing published",
                    dir.display()
                )));
            }
            // Taken: its answer is being written.
            waited = std::time::Duration::ZERO;
        }
        std::thread::sleep(POST_ANSWER_POLL);
        waited += POST_ANSWER_POLL;
    }
}

/// Whole atoms of a milliatom amount (rounded down).
fn atoms(matoms: i64) -> i64 {
    matoms.div_euclid(MATOMS_PER_ATOM as i64)
}

/// DCR with all 8 decimals: `9.99990000`.
fn dcr_text(matoms: i64) -> String {
    let atoms = atoms(matoms);
    let per = ATOMS_PER_DCR as i64;
    let sign = if atoms < 0 { "-" } else { "" };
    let abs = atoms.unsigned_abs();
    let per = per.unsigned_abs();
    format!("{sign}{}.{:08}", abs / per, abs % per)
}

/// The `--json` document (documented on [`WalletsArgs::json`]; stable).
fn wallets_json(wallets: &[Wallet]) -> Value {
    let list: Vec<Value> = wallets
        .iter()
        .map(|w| {
            let tips: Vec<Value> = w
                .recent_tips
                .iter()
                .map(|t| {
                    json!({
                        "direction": t.direction.as_str(),
                        "peer": hex::encode(t.peer),
                        "peer_nick": t.peer_nick,
                        "atoms": atoms(t.matoms),
                        "matoms": t.matoms,
                        "at": rfc3339(t.at_ms.div_euclid(1000)),
                    })
                })
                .collect();
            json!({
                "nick": w.nick,
                "uid": hex::encode(w.uid),
                "balance_atoms": atoms(w.balance_matoms),
                "balance_matoms": w.balance_matoms,
                "balance_dcr": dcr_text(w.balance_matoms),
                "recent_tips": tips,
            })
        })
        .collect();
    json!({ "wallets": list })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dcr_text_has_eight_decimals() {
        assert_eq!(dcr_text(10 * 100_000_000_000), "10.00000000");
        assert_eq!(dcr_text(999_990_000_000), "9.99990000");
        assert_eq!(dcr_text(1_999), "0.00000001");
        assert_eq!(dcr_text(-10_000_000), "-0.00010000");
    }
}
