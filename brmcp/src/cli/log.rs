//! The command line's log: `tracing` events, one line each, on stderr and, when the
//! clientrpc `.conf` names a `logfile`, appended there too.
//!
//! The filter is, first found: `--log-level`, [`RUST_LOG`](RUST_LOG_ENV), [`BRMCP_LOG`]
//! (`LEVEL_ENV`, kept for old setups), the `.conf`'s `debug` key (bisonbotkit's
//! levels), else [`DEFAULT_LEVEL`]. Each is a level (`error`, `warn`, `info`, `debug`,
//! `trace`, `off`) or `target=level` pairs, comma separated (`info,brmcp_adapters=debug`).
//! A bare `info` means [`DEFAULT_LEVEL`]: bisonbotkit writes `debug=info` into every
//! `.conf`, and that must not bring back rmcp's per-session lines; name `rmcp=info`
//! to see them.

use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt as _;

use super::CliError;

/// The environment variable of the usual Rust filter.
pub(crate) const RUST_LOG_ENV: &str = "RUST_LOG";

/// The older environment variable naming the level.
pub(crate) const LEVEL_ENV: &str = "BRMCP_LOG";

/// What the command line shows by default: one line per call, payment, refused caller,
/// lost and restored connection, and the warnings and errors. rmcp's own info lines (a
/// few for every MCP session that starts and ends) would bury those, so its warnings
/// and errors only.
pub(crate) const DEFAULT_LEVEL: &str = "info,rmcp=warn";

/// The installed log: its filter handle, and whether the level was chosen explicitly
/// (then the `.conf`'s `debug` key does not override it).
struct Installed {
    filter: reload::Handle<Targets, tracing_subscriber::Registry>,
    explicit: AtomicBool,
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// The file the `.conf`'s `logfile` names, once opened.
static LOG_FILE: OnceLock<Mutex<File>> = OnceLock::new();

fn parse(filter: &str, origin: &str) -> Result<Targets, CliError> {
    let filter = filter.trim();
    // A bare kit level: its names where they differ from ours.
    let filter = match filter.to_ascii_lowercase().as_str() {
        "critical" => "error".to_owned(),
        "warning" => "warn".to_owned(),
        "info" => DEFAULT_LEVEL.to_owned(),
        _ => filter.to_owned(),
    };
    filter
        .parse::<Targets>()
        .map_err(|e| CliError(format!("{origin}: log filter {filter:?}: {e}")))
}

/// Installs the log for this process, from `--log-level` (`flag`) or the environment.
///
/// # Errors
/// A filter that does not parse, naming where it came from.
pub(crate) fn init(flag: Option<&str>) -> Result<(), CliError> {
    let env = |name: &'static str| {
        std::env::var(name)
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (v, name))
    };
    let chosen = flag
        .map(|f| (f.to_owned(), "--log-level"))
        .or_else(|| env(RUST_LOG_ENV))
        .or_else(|| env(LEVEL_ENV));
    let explicit = chosen.is_some();
    let targets = match chosen {
        Some((filter, origin)) => parse(&filter, origin)?,
        None => parse(DEFAULT_LEVEL, "default")?,
    };
    let (layer, filter) = reload::Layer::new(targets);
    let lines = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(Tee);
    if tracing_subscriber::registry()
        .with(layer)
        .with(lines)
        .try_init()
        .is_ok()
    {
        let _ = INSTALLED.set(Installed {
            filter,
            explicit: AtomicBool::new(explicit),
        });
    }
    Ok(())
}

/// A command's own default, for one whose output is its transcript (the demo): applied
/// unless the level was chosen explicitly, and then kept over any `.conf`'s `debug`.
pub(crate) fn command_default(level: &str) -> Result<(), CliError> {
    if let Some(installed) = INSTALLED.get()
        && !installed.explicit.swap(true, Ordering::Relaxed)
    {
        let _ = installed.filter.reload(parse(level, "default")?);
    }
    Ok(())
}

/// Applies a bisonbotkit `.conf`'s `debug` (unless the level was chosen explicitly)
/// and `logfile` keys.
///
/// # Errors
/// A `debug` value that is not a filter, or a `logfile` that cannot be opened.
pub(crate) fn apply_conf(conf: &brmcp_clientrpc::BotConfig, path: &Path) -> Result<(), CliError> {
    let origin = format!("{}: debug", path.display());
    if let (Some(installed), Some(level)) = (INSTALLED.get(), conf.extra.get("debug"))
        && !installed.explicit.load(Ordering::Relaxed)
        && !level.is_empty()
    {
        let targets = parse(level, &origin)?;
        let _ = installed.filter.reload(targets);
    }
    if let Some(logfile) = conf.extra.get("logfile").filter(|f| !f.is_empty())
        && LOG_FILE.get().is_none()
    {
        let logfile = Path::new(logfile);
        let file = open_log(logfile).map_err(|e| {
            CliError(format!(
                "{}: logfile {}: {e}",
                path.display(),
                logfile.display()
            ))
        })?;
        let _ = LOG_FILE.set(Mutex::new(file));
    }
    Ok(())
}

/// The log file, appended to: its directory 0700, itself 0600, never through a link.
fn open_log(path: &Path) -> std::io::Result<File> {
    crate::secure_fs::open_append(path)
}

/// Writes each line to stderr and to the log file, if one is open.
#[derive(Clone, Copy)]
struct Tee;

impl<'a> MakeWriter<'a> for Tee {
    type Writer = TeeLine;

    fn make_writer(&'a self) -> Self::Writer {
        TeeLine(Vec::new())
    }
}

/// One event's text, written whole when dropped, so concurrent lines never interleave.
struct TeeLine(Vec<u8>);

impl Write for TeeLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TeeLine {
    fn drop(&mut self) {
        let _ = std::io::stderr().lock().write_all(&self.0);
        if let Some(file) = LOG_FILE.get() {
            let mut file = file.lock().unwrap_or_else(PoisonError::into_inner);
            let _ = file.write_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing::Level;

    use super::*;

    #[test]
    fn a_bare_info_leaves_rmcp_at_warnings_as_the_default_does() {
        // bisonbotkit writes `debug=info` into every `.conf`.
        for filter in ["info", "INFO", DEFAULT_LEVEL] {
            let targets = parse(filter, "test").unwrap();
            assert!(
                targets.would_enable("brmcp::server", &Level::INFO),
                "{filter}"
            );
            assert!(
                !targets.would_enable("rmcp::service", &Level::INFO),
                "{filter}"
            );
            assert!(
                targets.would_enable("rmcp::service", &Level::WARN),
                "{filter}"
            );
        }
        let asked = parse("info,rmcp=info", "test").unwrap();
        assert!(asked.would_enable("rmcp::service", &Level::INFO));
        let debug = parse("debug", "test").unwrap();
        assert!(debug.would_enable("rmcp::service", &Level::DEBUG));
    }
}
