//! `brmcp serve status` and `brmcp bridge status`: the snapshot the running process
//! published in its data directory, as text or `--json`, saying plainly when no
//! process is running (none ever ran, it stopped, or its snapshot went stale).

use std::path::Path;
use std::process::ExitCode;

use serde_json::json;

use super::CliError;
use super::table::{Table, print_json, rfc3339};
use crate::server::matoms_as_atoms;
use crate::server::{Clock, SystemClock};
use crate::status::{Liveness, STALE_AFTER_SECS, STATUS_FILE, Snapshot};

/// Exit status when no process is running: scripts can tell without parsing.
const NOT_RUNNING: u8 = 3;

/// Prints the snapshot of `datadir` for the `role` (`serve` or `bridge`) command.
/// Exits [`NOT_RUNNING`] when its process is not running.
pub(super) fn show(datadir: &Path, role: &str, json: bool) -> Result<ExitCode, CliError> {
    let now = SystemClock.now().secs();
    let snapshot = crate::status::read(datadir).map_err(CliError)?;
    let Some(snapshot) = snapshot else {
        let file = datadir.join(STATUS_FILE);
        if json {
            print_json(&json!({ "running": false, "state": "never_ran" }));
        } else {
            println!(
                "brmcp {role} is not running: no status in {} (it never ran on this data directory)",
                file.display()
            );
        }
        return Ok(ExitCode::from(NOT_RUNNING));
    };
    if snapshot.role != role {
        return Err(CliError(format!(
            "{}: written by brmcp {}, not brmcp {role}",
            datadir.join(STATUS_FILE).display(),
            snapshot.role
        )));
    }
    let liveness = snapshot.liveness(now);
    if json {
        print_json(&as_json(&snapshot, liveness, now));
    } else {
        print_text(&snapshot, liveness, now);
    }
    Ok(match liveness {
        Liveness::Running => ExitCode::SUCCESS,
        _ => ExitCode::from(NOT_RUNNING),
    })
}

fn state(liveness: Liveness) -> &'static str {
    match liveness {
        Liveness::Running => "running",
        Liveness::Stopped => "stopped",
        _ => "stale",
    }
}

fn as_json(s: &Snapshot, liveness: Liveness, now: i64) -> serde_json::Value {
    json!({
        "running": liveness == Liveness::Running,
        "state": state(liveness),
        "age_secs": now.saturating_sub(s.written_at),
        "started_at_rfc3339": rfc3339(s.started_at),
        "written_at_rfc3339": rfc3339(s.written_at),
        "connection_since_rfc3339": rfc3339(s.connection.since),
        "snapshot": s,
    })
}

fn print_text(s: &Snapshot, liveness: Liveness, now: i64) {
    let age = now.saturating_sub(s.written_at);
    match liveness {
        Liveness::Running => println!(
            "brmcp {} is running: pid {}, started {}, status of {} ({age} s ago)",
            s.role,
            s.pid,
            rfc3339(s.started_at),
            rfc3339(s.written_at)
        ),
        Liveness::Stopped => println!(
            "brmcp {} is not running: pid {} stopped at {}; its last status follows",
            s.role,
            s.pid,
            rfc3339(s.written_at)
        ),
        _ => println!(
            "brmcp {} is not running: its status is stale, last written {} ({age} s ago, \
             more than {STALE_AFTER_SECS} s; pid {} died or hangs); its last status follows",
            s.role,
            rfc3339(s.written_at),
            s.pid
        ),
    }
    let c = &s.connection;
    let error = c
        .last_error
        .as_deref()
        .map_or_else(String::new, |e| format!("; last error: {e}"));
    if c.connected {
        println!(
            "clientrpc: connected since {} ({} connection(s) made){error}",
            rfc3339(c.since),
            c.connects
        );
    } else {
        println!(
            "clientrpc: reconnecting since {} ({} connection(s) made){error}",
            rfc3339(c.since),
            c.connects
        );
    }
    println!(
        "sessions: {} open, at most {} per peer",
        s.sessions.open, s.sessions.max_per_peer
    );
    if let Some(config) = &s.config {
        println!(
            "allowlist: {} caller(s), {} call(s) per minute each",
            config.allowed_callers, config.calls_per_minute
        );
    }
    if let Some(l) = &s.ledger {
        println!(
            "ledger: {} caller(s) hold {} atoms ({} reserved for calls awaiting retry); \
             last 24 h: {} call(s), {} atoms earned, {} refund(s); {} call(s) pending",
            l.callers,
            matoms_as_atoms(l.balances_matoms),
            matoms_as_atoms(l.reserved_matoms),
            l.calls_24h,
            l.earned_atoms_24h,
            l.refunds_24h,
            l.pending
        );
    }
    if let Some(p) = &s.spend {
        println!(
            "spend ({} mode): {} atoms paid in the last 24 h; {} payment(s) pending ({} atoms); \
             caps {} atoms per call, {} atoms per day",
            p.mode,
            p.paid_atoms_24h,
            p.pending,
            p.pending_atoms,
            p.per_call_cap_atoms,
            p.per_day_cap_atoms
        );
    }
    if let Some(r) = &s.refused_address {
        println!(
            "last remote address refused (not in allowed_ips): {} at {}",
            r.address,
            rfc3339(r.at)
        );
    }
    // The router's drops by reason, then its other counters.
    let mut drops = Table::new(&["DROPPED: REASON", "COUNT"]);
    let mut others = Table::new(&["ROUTER COUNTER", "COUNT"]);
    for (name, value) in &s.router {
        match name.strip_prefix("dropped_") {
            Some(reason) => drops.row(vec![reason.to_owned(), value.to_string()]),
            None => others.row(vec![name.clone(), value.to_string()]),
        }
    }
    print!("{drops}{others}");
    if !s.upstreams.is_empty() {
        println!("upstreams:");
        for upstream in &s.upstreams {
            println!("{upstream}");
        }
    }
}
