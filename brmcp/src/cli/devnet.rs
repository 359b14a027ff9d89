//! `brmcp devnet`: a local Bison Relay simulator, with the commands that use it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use super::CliError;
use crate::devnet::{Devnet, NodeInfo};

/// Nicks of the first nodes; more are `node5`, `node6`, ...
const NICKS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// Most nodes one devnet runs: each is a TLS listener and a set of files.
const MAX_NODES: usize = 64;

#[derive(Debug, Args)]
pub(super) struct DevnetArgs {
    /// Directory for the nodes' certificates and config files (kept between runs).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// How many nodes (clients) to run.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=MAX_NODES as i64))]
    nodes: u16,
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
        let nicks = nicks(usize::from(args.nodes));
        let nicks: Vec<&str> = nicks.iter().map(String::as_str).collect();
        let devnet = Devnet::start(&args.dir, &nicks).await?;
        let nodes = devnet.nodes();
        println!(
            "devnet running in {} with {} node(s):",
            args.dir.display(),
            nodes.len()
        );
        for node in &nodes {
            println!("  {:<6} {}  {}", node.nick, node.uid_hex(), node.url);
        }
        if let [server, client, ..] = nodes.as_slice() {
            print_commands(&args.dir, server, client)?;
        }
        println!("Ctrl-C stops the devnet.");
        super::wait_for_interrupt().await;
        devnet.shutdown().await;
        Ok(ExitCode::SUCCESS)
    })
}

/// Prepares `server`'s directory to serve `client` and prints the commands to run.
fn print_commands(dir: &Path, server: &NodeInfo, client: &NodeInfo) -> Result<(), CliError> {
    // Allow the client node to call the server node's tools, once.
    let serve_config = server.dir.join(super::serve::SERVE_CONFIG);
    if !serve_config.exists() {
        let text = format!(
            "{{\"allowed_uids\": [\"{}\"], \"calls_per_minute\": 30}}\n",
            client.uid_hex()
        );
        crate::secure_fs::write_atomic(&serve_config, text.as_bytes())
            .map_err(|e| CliError(format!("{}: {e}", serve_config.display())))?;
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
