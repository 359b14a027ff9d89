//! The `brmcp` command line: one file per subcommand.
//!
//! Every command prints its result on stdout and its diagnostics on stderr, and exits
//! non-zero on failure: 1 for an error while running, 2 for a usage error.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    };
    match result {
        Ok(code) => code,
        Err(CliError(message)) => {
            eprintln!("brmcp: {message}");
            ExitCode::FAILURE
        }
    }
}
