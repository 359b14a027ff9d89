//! The `brmcp` command line: one file per subcommand.
//!
//! Every command prints its result on stdout and its diagnostics on stderr, and exits
//! non-zero on failure: 1 for an error while running, 2 for a usage error.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bridge;
mod demo;
mod devnet;
mod directory;
mod serve;
mod wire;

/// MCP over Bison Relay private messages.
#[derive(Debug, Parser)]
#[command(name = "brmcp", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the example tools (echo, free; fortune, paid) over a Bison Relay client.
    Serve(serve::ServeArgs),
    /// Serve Bison Relay bots to local MCP agents (HTTP or stdio), paying them with tips.
    Bridge(bridge::BridgeArgs),
    /// Run a verifying directory of tool providers (compatible with brmcpdir) over a
    /// Bison Relay client.
    Directory(directory::DirectoryArgs),
    /// Run a local Bison Relay simulator (relay and clients) until interrupted.
    Devnet(devnet::DevnetArgs),
    /// Show the whole thing working: a simulated network, a bot with a paid tool, a
    /// bridge in autopay mode, and an MCP client calling through it.
    Demo(demo::DemoArgs),
    /// Inspect and produce envelope parts (the wire format of WIRE.md).
    #[command(subcommand)]
    Wire(wire::WireCommand),
}

/// A failed command: what to print after `brmcp: `.
#[derive(Debug)]
pub struct CliError(String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        Self(e.to_string())
    }
}

/// Runs the command line with the process's arguments.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Wire(cmd) => wire::run(cmd),
        Command::Serve(args) => serve::run(args),
        Command::Devnet(args) => devnet::run(args),
        Command::Directory(args) => directory::run(args),
        Command::Bridge(args) => bridge::run(args),
        Command::Demo(args) => demo::run(args),
    };
    match result {
        Ok(code) => code,
        Err(CliError(message)) => {
            eprintln!("brmcp: {message}");
            ExitCode::FAILURE
        }
    }
}

/// The runtime long-running commands use.
fn runtime() -> Result<tokio::runtime::Runtime, CliError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError(format!("cannot start the async runtime: {e}")))
}

/// Waits for Ctrl-C (or SIGTERM on Unix).
async fn wait_for_interrupt() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
