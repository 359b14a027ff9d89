//! `brmcp doctor`: checks a data directory's permissions, its config files and the
//! clientrpc connection its `.conf` names (TLS, auth, version, identity), and says
//! what to fix. Exits 1 when something needs fixing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use brmcp_clientrpc::{BotConfig, ClientRpcConfig, ClientRpcHost, Streams};
use clap::Args;

use super::CliError;
use crate::bridge::{SETTINGS_FILE, Settings};
use crate::directory::RegistrantBlock;
use crate::server::ServeConfig;

/// Bound on reaching the client and asking it two questions: 15 s. A client that
/// answers at all does so in well under a second.
const CHECK_TIMEOUT: Duration = Duration::from_secs(15);

/// Directory levels under the data directory whose permissions are checked (the
/// data directory itself, `logs/`, the devnet's `rpc/`).
const MAX_DEPTH: usize = 2;

#[derive(Debug, Args)]
pub(super) struct DoctorArgs {
    /// The data directory of `brmcp serve` or `brmcp bridge`.
    #[arg(long, value_name = "DIR")]
    datadir: PathBuf,
    /// The clientrpc connection file (default: the data directory's brmcp-serve.conf,
    /// else its brmcp-bridge.conf).
    #[arg(long, value_name = "FILE")]
    rpc_config: Option<PathBuf>,
}

/// What the checks found: `ok` lines and `fix` lines.
#[derive(Default)]
struct Report {
    problems: usize,
}

impl Report {
    fn ok(&self, what: impl std::fmt::Display) {
        println!("ok    {what}");
    }

    fn fix(&mut self, what: impl std::fmt::Display) {
        self.problems += 1;
        println!("FIX   {what}");
    }
}

pub(super) fn run(args: DoctorArgs) -> Result<ExitCode, CliError> {
    let mut report = Report::default();
    check_permissions(&mut report, &args.datadir);
    check_configs(&mut report, &args.datadir);
    let rpc_config = args.rpc_config.or_else(|| {
        [super::serve::RPC_CONFIG, super::bridge::RPC_CONFIG]
            .iter()
            .map(|name| args.datadir.join(name))
            .find(|p| p.exists())
    });
    match rpc_config {
        Some(path) => super::runtime()?.block_on(check_client(&mut report, &path)),
        None => report.fix(format!(
            "no clientrpc connection file in {}: run `brmcp serve` or `brmcp bridge` once to write one, or pass --rpc-config",
            args.datadir.display()
        )),
    }
    if report.problems == 0 {
        println!("all checks passed");
        Ok(ExitCode::SUCCESS)
    } else {
        println!("{} thing(s) to fix", report.problems);
        Ok(ExitCode::FAILURE)
    }
}

#[cfg(unix)]
fn check_permissions(report: &mut Report, dir: &Path) {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => meta,
        Ok(_) => return report.fix(format!("{} is not a directory", dir.display())),
        Err(e) => return report.fix(format!("{}: {e}", dir.display())),
    };
    let before = report.problems;
    walk(report, dir, &meta, 0);
    if report.problems == before {
        report.ok(format!(
            "{}: directories 0700, files 0600, no symbolic links",
            dir.display()
        ));
    }
}

#[cfg(unix)]
fn walk(report: &mut Report, dir: &Path, meta: &std::fs::Metadata, depth: usize) {
    use std::os::unix::fs::PermissionsExt;
    let mode = meta.permissions().mode() & 0o777;
    if mode != crate::secure_fs::DIR_MODE {
        report.fix(format!(
            "{} is {mode:03o}: `chmod 700 {}`",
            dir.display(),
            dir.display()
        ));
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return report.fix(format!("{}: cannot list it", dir.display()));
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let mode = meta.permissions().mode() & 0o777;
        if meta.file_type().is_symlink() {
            report.fix(format!(
                "{} is a symbolic link: remove it (brmcp refuses to follow it)",
                path.display()
            ));
        } else if meta.is_dir() && depth < MAX_DEPTH {
            walk(report, &path, &meta, depth + 1);
        } else if meta.is_file() && mode != crate::secure_fs::FILE_MODE {
            report.fix(format!(
                "{} is {mode:03o}: `chmod 600 {}`",
                path.display(),
                path.display()
            ));
        }
    }
}

#[cfg(not(unix))]
fn check_permissions(_: &mut Report, _: &Path) {}

fn check_configs(report: &mut Report, dir: &Path) {
    let settings = dir.join(SETTINGS_FILE);
    if settings.exists() {
        match Settings::load(&settings) {
            Ok(s) if s.per_call_cap_atoms == 0 || s.per_day_cap_atoms == 0 => report.fix(format!(
                "{}: a cap is 0, which means never pay: set per_call_cap_atoms and per_day_cap_atoms",
                settings.display()
            )),
            Ok(_) => report.ok(format!("{} reads", settings.display())),
            Err(e) => report.fix(e),
        }
    }
    let serve = dir.join(super::serve::SERVE_CONFIG);
    if serve.exists() {
        let read = ServeConfig::load(&serve)
            .and_then(|config| RegistrantBlock::from_config(&config, &serve));
        match read {
            Ok(_) => report.ok(format!("{} reads", serve.display())),
            Err(e) => report.fix(e),
        }
    }
}

async fn check_client(report: &mut Report, path: &Path) {
    let bot = match BotConfig::load(path) {
        Ok(bot) => {
            report.ok(format!("{} reads", path.display()));
            bot
        }
        Err(e) => return report.fix(e),
    };
    for (key, file) in [
        ("servercertpath", Some(&bot.server_cert_path)),
        ("clientcertpath", bot.client_cert_path.as_ref()),
        ("clientkeypath", bot.client_key_path.as_ref()),
    ] {
        if let Some(file) = file
            && !file.is_file()
        {
            report.fix(format!(
                "{}: {key} {} does not exist: point it at your brclient's file",
                path.display(),
                file.display()
            ));
        }
    }
    let host = match ClientRpcHost::new(ClientRpcConfig::from_bot_config(&bot)) {
        Ok(host) => host,
        Err(e) => return report.fix(format!("{}: {e}", path.display())),
    };
    let checked = tokio::time::timeout(CHECK_TIMEOUT, async {
        host.connect(Streams::new()).await?;
        Ok::<_, brmcp_clientrpc::ClientRpcError>((
            host.version().await?,
            host.public_identity().await?,
        ))
    })
    .await;
    host.close();
    match checked {
        Ok(Ok((version, identity))) => {
            report.ok(format!(
                "clientrpc at {}: TLS and auth accepted, {} {}",
                bot.url, version.app_name, version.app_version
            ));
            match identity.peer_id() {
                Some(uid) => report.ok(format!("identity: {} {uid}", identity.nick)),
                None => report.fix("the client reported no user id: is its account set up?"),
            }
        }
        Ok(Err(e)) => report.fix(format!(
            "clientrpc at {}: {e}: check that brclient runs with clientrpc on at brrpcurl, the certificate paths, and rpcuser/rpcpass",
            bot.url
        )),
        Err(_) => report.fix(format!(
            "clientrpc at {}: no answer within {}s: is brclient running there?",
            bot.url,
            CHECK_TIMEOUT.as_secs()
        )),
    }
}
