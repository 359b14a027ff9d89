//! Payments held for approval: the `brmcp bridge approvals` client of a running
//! bridge's `/payments`, and the prompt of a bridge run in approval mode.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;

use tokio::io::AsyncBufReadExt;
use tokio::sync::broadcast::error::RecvError;

use super::{ApprovalsAction, bot_names};
use crate::bridge::Bridge;
use crate::bridge::quote::DynamicQuote;
use crate::cli::CliError;
use crate::cli::table::{Table, print_json, rfc3339};
use brmcp_adapters::protocol::PriceBounds;

/// `brmcp bridge approvals`: lists or decides the payments the bridge at `listen`
/// holds, presenting the user's approval `secret`; bots are shown by the names of
/// `datadir`'s settings.
pub(super) async fn command(
    datadir: &Path,
    listen: SocketAddr,
    secret: &str,
    action: ApprovalsAction,
) -> Result<ExitCode, CliError> {
    let base = format!("http://{listen}/payments");
    let client = reqwest::Client::new();
    let request = match &action {
        ApprovalsAction::List { .. } => client.get(&base),
        ApprovalsAction::Approve { id } => client.post(format!("{base}/{id}/approve")),
        ApprovalsAction::Deny { id } => client.post(format!("{base}/{id}/deny")),
    };
    let response = request
        .bearer_auth(secret)
        .send()
        .await
        .map_err(|e| CliError(format!("no bridge at {listen}: {e}")))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(CliError(format!(
            "bridge answered {status}: {}",
            body.trim()
        )));
    }
    match action {
        ApprovalsAction::List { json } => {
            let list: Vec<serde_json::Value> = serde_json::from_str(&body)?;
            print_list(&list, &bot_names(datadir), json);
        }
        ApprovalsAction::Approve { id } => println!("approved {id}"),
        ApprovalsAction::Deny { id } => println!("denied {id}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The payments of `/payments` as a table, or as one JSON array with the bot's name
/// beside its uid (`names`: uid to name).
fn print_list(list: &[serde_json::Value], names: &HashMap<String, String>, json: bool) {
    let bot = |p: &serde_json::Value| p["bot"].as_str().unwrap_or("?").to_owned();
    let created = |p: &serde_json::Value| p["created"].as_i64().unwrap_or(0);
    if json {
        let rows: Vec<_> = list
            .iter()
            .map(|p| {
                let mut row = serde_json::json!({
                    "id": p["id"],
                    "bot": p["bot"],
                    "bot_name": names.get(&bot(p)),
                    "tool": p["tool"],
                    "atoms": p["atoms"],
                    "created": p["created"],
                    "agent": p["agent"],
                    "created_rfc3339": rfc3339(created(p)),
                });
                if let Some(quote) = p.get("quote") {
                    row["quote"] = quote.clone();
                }
                row
            })
            .collect();
        print_json(&serde_json::json!(rows));
        return;
    }
    if list.is_empty() {
        println!("no payment is waiting");
        return;
    }
    let mut table = Table::new(&["ID", "SINCE", "AGENT", "BOT", "TOOL", "ATOMS"]);
    for p in list {
        let uid = bot(p);
        table.row(vec![
            p["id"].as_str().unwrap_or("?").to_owned(),
            rfc3339(created(p)),
            p["agent"].as_str().unwrap_or("?").to_owned(),
            names.get(&uid).cloned().unwrap_or(uid),
            p["tool"].as_str().unwrap_or("?").to_owned(),
            match quoted(p) {
                Some(quote) => format!("{} ({quote})", p["atoms"]),
                None => p["atoms"].to_string(),
            },
        ]);
    }
    print!("{table}");
}

/// A listed payment's dynamic quote, as the page shows it (`quoted 40 atoms, listed at
/// most 100 atoms`); `None` for a fixed price, or a `quote` that does not read.
fn quoted(p: &serde_json::Value) -> Option<DynamicQuote> {
    let quote = p.get("quote")?;
    let max_atoms = match &quote["max_atoms"] {
        serde_json::Value::Null => None,
        most => Some(most.as_u64()?),
    };
    let bounds = PriceBounds::new(quote["min_atoms"].as_u64()?, max_atoms).ok()?;
    Some(DynamicQuote {
        price_atoms: quote["price_atoms"].as_u64()?,
        bounds,
    })
}

/// Logs each payment the bridge holds for approval, whatever stdin is (a bridge run
/// as a service must say a payment waits too): id, bot (by name when it has one),
/// tool, atoms and the command deciding it.
pub(super) fn log_held(bridge: &Bridge, datadir: &Path, typed_here: bool) {
    let mut pending = bridge.subscribe_payments();
    let datadir = datadir.to_owned();
    tokio::spawn(async move {
        loop {
            let p = match pending.recv().await {
                Ok(p) => p,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "payments waiting for approval not logged (`approvals list` shows them)"
                    );
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            // The file, not the bridge: holding the bridge would keep it from ending.
            let uid = p.bot.to_string();
            let bot = bot_names(&datadir).remove(&uid).unwrap_or(uid);
            let here = if typed_here {
                format!(", or type `approve {}` here", p.id)
            } else {
                String::new()
            };
            tracing::info!(
                id = %p.id,
                agent = %p.agent,
                %bot,
                tool = %p.tool,
                atoms = p.atoms,
                "payment waits for approval: `brmcp bridge --datadir {} approvals approve {}` \
                 (or `deny {}`){here}",
                datadir.display(),
                p.id,
                p.id,
            );
        }
    });
}

/// Takes `approve ID` / `deny ID` lines from stdin (a terminal) until it ends.
pub(super) async fn prompt(bridge: Bridge) {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut words = line.split_whitespace();
        let (verb, id) = (words.next(), words.next());
        let approve = match verb {
            Some("approve") => true,
            Some("deny") => false,
            _ => {
                eprintln!("type `approve ID` or `deny ID`");
                continue;
            }
        };
        match id {
            Some(id) if bridge.resolve_payment(id, approve) => eprintln!("payment {id} resolved"),
            Some(id) => eprintln!("no payment {id} is waiting"),
            None => eprintln!("which payment? type `approve ID` or `deny ID`"),
        }
    }
}
