//! The `brmcp` command line: one file per subcommand.
//!
//! Every command prints its result on stdout and its diagnostics on stderr (the
//! library's log too: see `log` for `--log-level`, `RUST_LOG` and the `.conf`'s
//! `debug` and `logfile` keys), and exits non-zero on failure: 1 for an error while
//! running, 2 for a usage error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use brmcp_adapters::{BoxError, PeerId};
use clap::{Parser, Subcommand};

use crate::journal::PmJournal;
use crate::server::{Clock, SystemClock};

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

/// MCP over Bison Relay private messages.
#[derive(Debug, Parser)]
#[command(name = "brmcp", version, about, propagate_version = true)]
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

/// How long a start waits for another consumer's hold on the client to go: rides out a
/// previous run of this process (or of a test) that is still closing.
const CLIENT_LOCK_WAIT: Duration = Duration::from_secs(3);

/// How often the hold is tried within [`CLIENT_LOCK_WAIT`].
const CLIENT_LOCK_RETRY: Duration = Duration::from_millis(50);

/// The file whose lock marks the one brmcp consuming the client `identity` on this
/// machine.
fn client_lock_path(identity: &PeerId) -> PathBuf {
    std::env::temp_dir().join(format!("brmcp-client-{identity}.lock"))
}

/// The identity check of a command consuming a client's streams: binds the data
/// directory to the first client it serves (refusing another one), and holds the
/// client for this process, refusing to start beside another brmcp consuming it.
///
/// One brmcp per client: the client's acknowledgements are per client, not per
/// connection, so a second consumer (a `brmcp serve` and a `brmcp bridge` on one
/// client, say) clears PMs and tips the first has not recorded. The hold is a lock
/// file in the temporary directory named by the client's identity, so it catches a
/// second consumer on this machine; one on another machine goes unseen.
pub(crate) fn client_guard(
    journal: Arc<PmJournal>,
) -> impl Fn(PeerId) -> Result<(), BoxError> + Send + Sync + 'static {
    let held: Mutex<Option<ClientLock>> = Mutex::new(None);
    move |identity: PeerId| {
        journal.bind(&identity, SystemClock.now())?;
        let mut held = held.lock().unwrap_or_else(PoisonError::into_inner);
        if held.as_ref().is_some_and(|lock| lock.identity == identity) {
            return Ok(());
        }
        *held = Some(ClientLock::take(identity)?);
        Ok(())
    }
}

/// The hold on one client: the locked file, removed again when the hold ends so the
/// temporary directory does not collect one file per client ever served.
struct ClientLock {
    identity: PeerId,
    path: PathBuf,
    file: std::fs::File,
}

impl ClientLock {
    fn take(identity: PeerId) -> Result<Self, BoxError> {
        let path = client_lock_path(&identity);
        let deadline = Instant::now() + CLIENT_LOCK_WAIT;
        loop {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                // Another user's file: a lock needs no write access.
                .or_else(|_| std::fs::File::open(&path))
                .map_err(|e| format!("{}: {e}", path.display()))?;
            match file.try_lock() {
                // The holder before us removes the file as it lets go: a lock on a file
                // no longer at the path holds nothing, so open the path again.
                Ok(()) if same_file(&file, &path) => {
                    return Ok(Self {
                        identity,
                        path,
                        file,
                    });
                }
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                    std::thread::sleep(CLIENT_LOCK_RETRY);
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(format!(
                        "another brmcp process consumes the Bison Relay client {identity} \
                         (it holds {}); the client's acknowledgements are per client, so \
                         two consumers would clear each other's PMs and tips: give each \
                         brmcp its own client",
                        path.display()
                    )
                    .into());
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(format!("{}: {e}", path.display()).into());
                }
            }
        }
    }
}

impl Drop for ClientLock {
    fn drop(&mut self) {
        // Removed while still locked, so a waiter that locks the old file sees it gone
        // (`same_file`) and opens a fresh one; only our own file is removed.
        if same_file(&self.file, &self.path) {
            let _ = std::fs::remove_file(&self.path);
        }
        let _ = self.file.unlock();
    }
}

/// Whether `file` is the file now at `path`.
fn same_file(file: &std::fs::File, path: &std::path::Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt as _;
        match (file.metadata(), std::fs::metadata(path)) {
            (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (file, path);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_consumer_of_one_client_is_refused() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut me = [0u8; 32];
        getrandom::fill(&mut me).unwrap();
        let me = PeerId::from_bytes(me);
        let first = client_guard(Arc::new(PmJournal::open(a.path()).unwrap()));
        first(me).unwrap();
        // Reconnecting is fine.
        first(me).unwrap();
        let second = client_guard(Arc::new(PmJournal::open(b.path()).unwrap()));
        let e = second(me).unwrap_err().to_string();
        assert!(e.contains("another brmcp process consumes"), "{e}");
        // Once the first is gone, the client is free, and its lock file gone with it.
        drop(first);
        assert!(!client_lock_path(&me).exists());
        second(me).unwrap();
        assert!(client_lock_path(&me).exists());
        drop(second);
        assert!(!client_lock_path(&me).exists());
    }

    #[test]
    fn a_waiter_takes_the_client_when_the_holder_goes_and_its_file_is_removed() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let mut me = [0u8; 32];
        getrandom::fill(&mut me).unwrap();
        let me = PeerId::from_bytes(me);
        let first = client_guard(Arc::new(PmJournal::open(a.path()).unwrap()));
        first(me).unwrap();
        let second = client_guard(Arc::new(PmJournal::open(b.path()).unwrap()));
        let waiter = std::thread::spawn(move || second(me).map(|()| second));
        std::thread::sleep(CLIENT_LOCK_RETRY * 4);
        drop(first);
        let second = waiter.join().unwrap().unwrap();
        // The waiter holds the file now at the path, so a third is refused.
        let c = tempfile::tempdir().unwrap();
        let third = client_guard(Arc::new(PmJournal::open(c.path()).unwrap()));
        let e = third(me).unwrap_err().to_string();
        assert!(e.contains("another brmcp process consumes"), "{e}");
        drop(second);
        assert!(!client_lock_path(&me).exists());
    }

    #[test]
    fn a_data_directory_refuses_another_client() {
        let dir = tempfile::tempdir().unwrap();
        let mut ids = [[0u8; 32]; 2];
        for id in &mut ids {
            getrandom::fill(id).unwrap();
        }
        let [one, two] = ids.map(PeerId::from_bytes);
        let guard = client_guard(Arc::new(PmJournal::open(dir.path()).unwrap()));
        guard(one).unwrap();
        let e = guard(two).unwrap_err().to_string();
        assert!(
            e.contains(&one.to_string()) && e.contains("start fresh"),
            "{e}"
        );
        let _ = std::fs::remove_file(client_lock_path(&one));
    }
}
