//! Payments held for approval: the `brmcp bridge approvals` client of a running
//! bridge's `/payments`, and the prompt of a bridge run in approval mode.

use std::net::SocketAddr;
use std::process::ExitCode;

use tokio::io::AsyncBufReadExt;

use super::ApprovalsAction;
use crate::bridge::Bridge;
use crate::cli::CliError;

/// `brmcp bridge approvals`: lists or decides the payments the bridge at `listen`
/// holds, presenting the user's approval `secret`.
pub(super) async fn command(
    listen: SocketAddr,
    secret: &str,
    action: ApprovalsAction,
) -> Result<ExitCode, CliError> {
    let base = format!("http://{listen}/payments");
    let client = reqwest::Client::new();
    let request = match &action {
        ApprovalsAction::List => client.get(&base),
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
        ApprovalsAction::List => {
            let list: Vec<serde_json::Value> = serde_json::from_str(&body)?;
            if list.is_empty() {
                println!("no payment is waiting");
            }
            for p in list {
                println!(
                    "{} {} atoms to {} for {}",
                    p["id"].as_str().unwrap_or("?"),
                    p["atoms"],
                    p["bot"].as_str().unwrap_or("?"),
                    p["tool"].as_str().unwrap_or("?")
                );
            }
        }
        ApprovalsAction::Approve { id } => println!("approved {id}"),
        ApprovalsAction::Deny { id } => println!("denied {id}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Shows each payment waiting for approval and takes `approve ID` / `deny ID` lines.
pub(super) async fn prompt(bridge: Bridge) {
    let mut pending = bridge.subscribe_payments();
    let printer = tokio::spawn(async move {
        while let Ok(p) = pending.recv().await {
            eprintln!(
                "payment {} waits: {} atoms to {} for {}",
                p.id, p.atoms, p.bot, p.tool
            );
        }
    });
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
    printer.abort();
}
