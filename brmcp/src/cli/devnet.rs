//! `brmcp devnet`: a local Bison Relay simulator, with the commands that use it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde_json::{Value, json};

use super::CliError;
use crate::directory::{POLICY_FILE, Policy};
use brmcp_devnet::{Devnet, NodeInfo};

/// Nicks of the first nodes; more are `node5`, `node6`, ...
const NICKS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// Most nodes one devnet runs: each is a TLS listener and a set of files.
const MAX_NODES: usize = 64;

/// The nick of the directory node (`--directory`); no other node is named so.
pub(super) const DIRECTORY_NICK: &str = "directory";

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
pub(super) struct DevnetArgs {
    /// Directory for the nodes' certificates and config files (kept between runs).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// How many nodes (clients) to run.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=MAX_NODES as i64))]
    nodes: u16,
    /// Also run a node for a directory (`brmcp directory`), the first node's tools
    /// registering with it and the second node its operator.
    #[arg(long)]
    directory: bool,
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
    super::runtime()?.block_on(async {
        let mut nicks = nicks(usize::from(args.nodes));
        if args.directory {
            nicks.push(DIRECTORY_NICK.to_owned());
        }
        let nicks: Vec<&str> = nicks.iter().map(String::as_str).collect();
        let devnet = Devnet::start(&args.dir, &nicks).await?;
        let mut nodes = devnet.nodes();
        let directory = if args.directory { nodes.pop() } else { None };
        println!(
            "devnet running in {} with {} node(s):",
            args.dir.display(),
            nodes.len()
        );
        for node in nodes.iter().chain(&directory) {
            println!("  {:<6} {}  {}", node.nick, node.uid_hex(), node.url);
        }
        if let [server, client, ..] = nodes.as_slice() {
            print_commands(&args.dir, server, client, directory.as_ref())?;
        } else if let Some(directory) = &directory {
            print_directory(directory, None)?;
        }
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
