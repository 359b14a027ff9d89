//! The command line's log: `tracing` events at or above a level, one line each on
//! stderr. The level is [`DEFAULT_LEVEL`] unless [`LEVEL_ENV`] names another
//! (`error`, `warn`, `info`, `debug`, `trace`).

use std::fmt::Write as _;
use std::io::Write as _;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// The environment variable naming the level.
pub(crate) const LEVEL_ENV: &str = "BRMCP_LOG";

/// What the command line shows by default: warnings and errors (a refused stream, a
/// refused PM, a reused tip id, a failed ack).
pub(crate) const DEFAULT_LEVEL: Level = Level::WARN;

/// Installs the log for this process; a second call changes nothing.
pub(crate) fn init() {
    let level = std::env::var(LEVEL_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<Level>().ok())
        .unwrap_or(DEFAULT_LEVEL);
    let _ = tracing::subscriber::set_global_default(Stderr { level });
}

/// Writes each enabled event as one line: `LEVEL target: message key=value ...`.
struct Stderr {
    level: Level,
}

impl Subscriber for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= self.level
    }

    // Spans carry nothing this log shows; they all share one id.
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let meta = event.metadata();
        let mut line = Line::default();
        event.record(&mut line);
        let text = format!(
            "{} {}: {}{}\n",
            meta.level(),
            meta.target(),
            line.message,
            line.fields
        );
        // One write per line, so lines of concurrent events do not interleave.
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }
}
