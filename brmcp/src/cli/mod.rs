//! The `brmcp` command line: one file per subcommand.
//!
//! Every command prints its result on stdout and its diagnostics on stderr (the
//! library's log too: see `log` for `--log-level`, `RUST_LOG` and the `.conf`'s
//! `debug` and `logfile` keys), and exits non-zero on failure: 1 for an error while
//! running, 2 for a usage error.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bridge;
mod demo;
mod devnet;
mod directory;
mod doctor;
mod log;
mod serve;
mod status;
mod table;
#[cfg(test)]
mod testing;
mod wire;

/// What `--version` prints: the crate's version and the commit it was built from
/// (`unknown` when built outside a git checkout; see build.rs).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("BRMCP_GIT_COMMIT"),
    ")"
);

/// MCP over Bison Relay private messages.
#[derive(Debug, Parser)]
#[command(name = "brmcp", version = VERSION, about, propagate_version = true)]
struct Cli {
    /// Log filter: a level (error, warn, info, debug, trace, off) or target=level
    /// pairs; overrides RUST_LOG, BRMCP_LOG and the .conf's debug key.
    #[arg(long, global = true, value_name = "FILTER")]
    log_level: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve tools over a Bison Relay client: the upstream MCP servers brmcp.json names,
    /// or else the example tools (echo, free; fortune, paid).
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
    /// Check a data directory, its config files and its Bison Relay client connection,
    /// and say what to fix.
    Doctor(doctor::DoctorArgs),
    /// Inspect and produce envelope parts (the wire format of WIRE.md).
    #[command(subcommand)]
    Wire(wire::WireCommand),
    /// Print a completion script for SHELL, to source or to install where the shell
    /// looks (e.g. `brmcp completions bash > ~/.local/share/bash-completion/completions/brmcp`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// The command line's definition, for the references generated from it (the command
/// reference, the man pages): every command, argument and help text `brmcp` parses,
/// with the version without the commit, so a generated page stays the same from one
/// commit to the next.
pub fn command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command().version(env!("CARGO_PKG_VERSION"))
}

/// A failed command: what to print after `brmcp: `.
#[derive(Debug)]
pub struct CliError(String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        Self(e.to_string())
    }
}

/// The exit status of a command whose reader went away (`brmcp ... | head`): a shell's
/// status for a process ended by SIGPIPE (128 + 13).
const BROKEN_PIPE_EXIT: i32 = 141;

/// Ends the process quietly when printing to a closed pipe, as a Unix filter does.
///
/// Rust ignores SIGPIPE, so `println!` panics on a closed stdout instead; the signal's
/// default cannot be restored without unsafe code, so the panic it raises is turned
/// into the same exit here. Every other panic goes to the default hook.
fn quiet_on_broken_pipe() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(BROKEN_PIPE_EXIT);
        }
        default(info);
    }));
}

/// Runs the command line with the process's arguments.
pub fn main() -> ExitCode {
    quiet_on_broken_pipe();
    let cli = Cli::parse();
    let result = log::init(cli.log_level.as_deref()).and_then(|()| match cli.command {
        Command::Wire(cmd) => wire::run(cmd),
        Command::Serve(args) => serve::run(args),
        Command::Devnet(args) => devnet::run(args),
        Command::Directory(args) => directory::run(args),
        Command::Bridge(args) => bridge::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Cli::command(), "brmcp", &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
    });
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
