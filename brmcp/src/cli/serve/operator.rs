//! `brmcp serve <action>`: the operator's commands on a data directory's ledger
//! (balances, credit, refund, journal) and the running server's status.

use std::path::Path;
use std::process::ExitCode;

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;
use clap::Subcommand;
use serde_json::json;

use super::now;
use crate::cli::CliError;
use crate::cli::table::{Table, print_json, rfc3339};
use crate::server::matoms_as_atoms;
use crate::server::{
    Balance, CallId, FILE_NAME as LEDGER_FILE, JournalEntry, Ledger, MATOMS_PER_ATOM,
    atoms_to_matoms,
};

#[derive(Debug, Subcommand)]
pub(super) enum ServeAction {
    /// List callers' balances (also while the server runs).
    Balances {
        /// Print one JSON document (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Credit a caller by hand, with a reason kept in the audit table.
    Credit {
        /// The caller's user id (64 hex).
        uid: PeerId,
        /// Atoms to credit (at least 1).
        atoms: u64,
        /// Why (kept in the audit table).
        #[arg(long)]
        reason: String,
        /// Create the ledger when the data directory holds none yet (without it, a
        /// mistyped `--datadir` is refused instead of credited).
        #[arg(long)]
        create: bool,
        /// Print one JSON object instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Refund a completed paid call by its journal id.
    Refund {
        /// The call's journal id (see `journal`).
        call: i64,
        /// Why (kept in the audit table).
        #[arg(long)]
        reason: String,
        /// Print one JSON object instead of a sentence.
        #[arg(long)]
        json: bool,
    },
    /// Show the running server's state: its clientrpc connection, sessions, router
    /// counters, allowlist, ledger totals and upstream MCP servers (exit status 3
    /// when it is not running).
    Status {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a URL that opens the running server's operator page (started with
    /// --ui-listen) in a browser: it carries a login code that works once, within 5
    /// minutes.
    Ui {
        /// Replace the operator secret first: every page session it opened ends.
        #[arg(long)]
        rotate: bool,
    },
    /// Print the bot's announcement for a Bison Relay post: what it is, its tools with
    /// their prices or bounds, and how to add it (WIRE.md §13); then say how to publish
    /// it (brclient's `/post new FILE`; on the devnet `brmcp devnet post`). Reads the
    /// bot's user id from its client and the tools from its upstreams (started for the
    /// listing, then stopped) or the example tools.
    Announce {
        /// The bot's name (default: its Bison Relay nick).
        #[arg(long)]
        name: Option<String>,
        /// What the bot is (default: the `directory` block's description, if any).
        #[arg(long)]
        description: Option<String>,
        /// Write the post to FILE instead of standard output.
        #[arg(long, value_name = "FILE")]
        out: Option<std::path::PathBuf>,
    },
    /// Show the most recent paid calls.
    Journal {
        /// Only this caller's calls.
        #[arg(long)]
        uid: Option<PeerId>,
        /// How many entries.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// Print one JSON document (an array of objects) instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn operate(datadir: &Path, action: ServeAction) -> Result<ExitCode, CliError> {
    if let ServeAction::Status { json } = action {
        return crate::cli::status::show(datadir, "serve", json);
    }
    if let ServeAction::Ui { rotate } = action {
        println!("{}", super::ui::login_url(datadir, rotate)?);
        return Ok(ExitCode::SUCCESS);
    }
    // A mistyped directory must not get a fresh, empty ledger that seems to work.
    let create = matches!(action, ServeAction::Credit { create: true, .. });
    if !create && datadir.join(LEDGER_FILE).symlink_metadata().is_err() {
        return Err(CliError(format!(
            "no ledger in {} ({LEDGER_FILE} is missing): is this the data directory `brmcp \
             serve` runs with?{}",
            datadir.display(),
            if matches!(action, ServeAction::Credit { .. }) {
                " Add --create to make a new ledger there."
            } else {
                ""
            }
        )));
    }
    // Stopped, the server's calls left pending are refunded as at its start; running,
    // they are in flight, and the operator works beside it.
    let opened = Ledger::open_for_operator(datadir, now())?;
    if opened.refunded > 0 {
        eprintln!("refunded {} interrupted call(s)", opened.refunded);
    }
    let ledger = opened.ledger;
    match action {
        ServeAction::Balances { json } => print_balances(&ledger.balances()?, json),
        ServeAction::Credit {
            uid,
            atoms,
            reason,
            json,
            ..
        } => {
            if atoms == 0 {
                return Err(CliError(
                    "nothing to credit: atoms must be at least 1".into(),
                ));
            }
            let matoms =
                atoms_to_matoms(atoms).ok_or_else(|| CliError("amount too large".into()))?;
            let balance = ledger.manual_credit(&uid, matoms, &reason, now())?;
            if json {
                print_json(&json!({
                    "caller": uid.to_string(),
                    "credited_atoms": atoms,
                    "credited_matoms": matoms,
                    "balance_matoms": balance,
                }));
            } else {
                println!(
                    "credited {atoms} atoms to {uid}; new balance {} atoms",
                    matoms_as_atoms(balance)
                );
            }
        }
        ServeAction::Refund { call, reason, json } => {
            let id = CallId::new(call);
            let balance = ledger.manual_refund(id, &reason, now())?;
            let entry = ledger
                .journal_entry(id)?
                .ok_or_else(|| CliError(format!("call {call} vanished after its refund")))?;
            print_refund(&entry, balance, json);
        }
        ServeAction::Journal { uid, limit, json } => {
            print_journal(&ledger.journal(uid.as_ref(), limit)?, json);
        }
        ServeAction::Status { .. } | ServeAction::Ui { .. } | ServeAction::Announce { .. } => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn print_balances(balances: &[Balance], json: bool) {
    if json {
        let rows: Vec<_> = balances
            .iter()
            .map(|b| {
                json!({
                    "caller": b.caller.to_string(),
                    "balance_matoms": b.matoms,
                    "balance_atoms": b.matoms / MATOMS_PER_ATOM,
                    "reserved_matoms": b.reserved_matoms,
                })
            })
            .collect();
        print_json(&json!(rows));
        return;
    }
    let mut table = Table::new(&["CALLER", "BALANCE (ATOMS)", "RESERVED (ATOMS)"]);
    for b in balances {
        table.row(vec![
            b.caller.to_string(),
            matoms_as_atoms(b.matoms),
            matoms_as_atoms(b.reserved_matoms),
        ]);
    }
    print!("{table}");
}

fn print_refund(entry: &JournalEntry, balance_matoms: u64, json: bool) {
    if json {
        print_json(&json!({
            "call": entry.id.get(),
            "caller": entry.caller.to_string(),
            "tool": entry.tool,
            "refunded_atoms": entry.price_atoms,
            "balance_matoms": balance_matoms,
        }));
        return;
    }
    println!(
        "refunded call {} ({}): {} atoms returned to {}; new balance {} atoms",
        entry.id.get(),
        entry.tool,
        entry.price_atoms,
        entry.caller,
        matoms_as_atoms(balance_matoms)
    );
}

fn print_journal(entries: &[JournalEntry], json: bool) {
    if json {
        let rows: Vec<_> = entries
            .iter()
            .map(|e| {
                let finished = e.finished_at.map(UnixTime::secs);
                json!({
                    "id": e.id.get(),
                    "caller": e.caller.to_string(),
                    "tool": e.tool,
                    "price_atoms": e.price_atoms,
                    "state": e.state.as_str(),
                    "started_at": e.started_at.secs(),
                    "started_at_rfc3339": rfc3339(e.started_at.secs()),
                    "finished_at": finished,
                    "finished_at_rfc3339": finished.map(rfc3339),
                    "reason": e.reason,
                    "call_key": e.call_key,
                })
            })
            .collect();
        print_json(&json!(rows));
        return;
    }
    let mut table = Table::new(&[
        "ID", "STARTED", "FINISHED", "CALLER", "TOOL", "ATOMS", "STATE", "REASON",
    ]);
    for e in entries {
        table.row(vec![
            e.id.get().to_string(),
            rfc3339(e.started_at.secs()),
            e.finished_at
                .map_or_else(|| "-".to_owned(), |t| rfc3339(t.secs())),
            e.caller.to_string(),
            e.tool.clone(),
            e.price_atoms.to_string(),
            e.state.to_string(),
            e.reason.clone().unwrap_or_default(),
        ]);
    }
    print!("{table}");
}
