//! `brmcp bridge spend`: the spend log and what counts against the daily cap, and
//! the user's resolution of a payment whose outcome is unknown.

use std::collections::HashMap;
use std::path::Path;
use std::process::ExitCode;

use super::{Resolved, SpendAction, bot_names, now};
use crate::bridge::{SpendEntry, SpendLog, SpendStatus};
use crate::cli::CliError;
use crate::cli::table::{Table, print_json, rfc3339};

/// Prints the spend log of `datadir`, or resolves the payment `action` names.
pub(super) fn run(
    datadir: &Path,
    json: bool,
    action: Option<SpendAction>,
) -> Result<ExitCode, CliError> {
    let log = SpendLog::open(datadir, now())?;
    if let Some(SpendAction::Resolve { id, outcome }) = action {
        let paid = matches!(outcome, Resolved::Paid);
        if !log.resolve_by_user(id, paid)? {
            return Err(CliError(format!("no pending payment {id} (see `spend`)")));
        }
        println!(
            "payment {id} resolved {}",
            if paid { "paid" } else { "failed" }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let names = bot_names(datadir);
    print_spend(&log.entries()?, &names, log.spent_today(now())?, json);
    Ok(ExitCode::SUCCESS)
}

/// The spend log as a table with the daily total, or as one JSON array; a bot is shown
/// by the name the user gave it (`names`: uid to name) where there is one.
fn print_spend(
    entries: &[SpendEntry],
    names: &HashMap<String, String>,
    today_atoms: u64,
    json: bool,
) {
    // Counted against the cap until its outcome arrives or the user resolves it.
    let unconfirmed = |e: &SpendEntry| e.unconfirmed && e.status == SpendStatus::Pending;
    if json {
        let rows: Vec<_> = entries
            .iter()
            .map(|e| {
                serde_json::json!({
                    "id": e.id,
                    "ts": e.ts,
                    "ts_rfc3339": rfc3339(e.ts),
                    "bot": e.bot,
                    "bot_name": names.get(&e.bot),
                    "agent": e.agent,
                    "tool": e.tool,
                    "rail": e.rail,
                    "atoms": e.atoms,
                    "status": e.status.as_str(),
                    "unconfirmed": unconfirmed(e),
                    "error": e.err,
                })
            })
            .collect();
        print_json(&serde_json::json!(rows));
        return;
    }
    let mut table = Table::new(&[
        "ID", "TIME", "AGENT", "BOT", "TOOL", "ATOMS", "STATUS", "NOTE",
    ]);
    for e in entries {
        let note = if unconfirmed(e) {
            "unconfirmed: counted until its outcome arrives or `spend resolve`".to_owned()
        } else {
            e.err.clone().unwrap_or_default()
        };
        table.row(vec![
            e.id.to_string(),
            rfc3339(e.ts),
            e.agent.clone(),
            names.get(&e.bot).unwrap_or(&e.bot).clone(),
            e.tool.clone(),
            e.atoms.to_string(),
            e.status.as_str().to_owned(),
            note,
        ]);
    }
    print!("{table}");
    println!(
        "last 24 hours: {today_atoms} atoms (paid in the last 24 hours, and every pending payment whatever its age)"
    );
}

#[cfg(test)]
mod tests {
    use brmcp_adapters::PeerId;

    use super::*;
    use crate::cli::bridge::{BridgeArgs, run};

    #[derive(Debug, clap::Parser)]
    struct Command {
        #[command(flatten)]
        args: BridgeArgs,
    }

    fn command(dir: &Path, words: &[&str]) -> Result<ExitCode, CliError> {
        use clap::Parser;
        let datadir = dir.to_str().unwrap();
        let argv = ["brmcp-bridge", "--datadir", datadir]
            .into_iter()
            .chain(words.iter().copied());
        run(Command::try_parse_from(argv)
            .map_err(|e| CliError(e.to_string()))?
            .args)
    }

    #[test]
    fn spend_resolve_settles_a_pending_payment_once() {
        let dir = tempfile::tempdir().unwrap();
        let bot = PeerId::from_bytes([1; 32]);
        let log = SpendLog::open(dir.path(), now()).unwrap();
        let id = log
            .reserve(now(), &bot, "t", 700, 1000, 0)
            .unwrap()
            .unwrap();
        log.unconfirm(id).unwrap();
        assert_eq!(log.spent_today(now()).unwrap(), 700);
        let id_arg = id.to_string();
        assert!(command(dir.path(), &["spend", "resolve", &id_arg, "maybe"]).is_err());
        command(dir.path(), &["spend", "resolve", &id_arg, "failed"]).unwrap();
        assert_eq!(log.spent_today(now()).unwrap(), 0, "its budget is free");
        assert_eq!(log.entries().unwrap()[0].status, SpendStatus::Failed);
        let again = command(dir.path(), &["spend", "resolve", &id_arg, "paid"]).unwrap_err();
        assert!(again.0.contains("no pending payment"), "{again:?}");
        assert_eq!(log.entries().unwrap()[0].status, SpendStatus::Failed);
    }
}
