//! `brmcp bridge bots`: the allowed bots, added by hand or from a directory.

use std::path::Path;
use std::process::ExitCode;

use brmcp_adapters::PeerId;
use brmcp_clientrpc::ACK_FLUSH_WAIT;

use super::{BotsAction, BridgeArgs, load, rpc_config, save, start_bridge};
use crate::bridge::{ListedBot, SETTINGS_FILE};
use crate::cli::CliError;
use crate::cli::table::Table;

/// Adds, removes or lists the bots of `datadir`'s settings (not `--from-directory`,
/// which needs the client: [`add_from_directory`]).
pub(super) fn run(datadir: &Path, action: BotsAction) -> Result<ExitCode, CliError> {
    let settings_path = datadir.join(SETTINGS_FILE);
    let settings = load(&settings_path)?;
    let settings = match action {
        BotsAction::Add {
            name: Some(name),
            uid: Some(uid),
            ..
        } => settings.with_bot(&name, uid)?,
        BotsAction::Add { .. } => {
            return Err(CliError(
                "bots add needs NAME and UID, or --from-directory UID".into(),
            ));
        }
        BotsAction::Remove { bot } => settings.without_bot(&bot)?,
        BotsAction::List => {
            for bot in settings.bots() {
                println!("{} {}", bot.uid, bot.name.as_deref().unwrap_or("-"));
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    save(datadir, &settings_path, &settings)?;
    Ok(ExitCode::SUCCESS)
}

/// `bots add --from-directory`: looks `uid` up in the directory, prints it, adds it.
pub(super) async fn add_from_directory(
    args: BridgeArgs,
    uid: PeerId,
    directory: Option<String>,
    name: Option<String>,
) -> Result<ExitCode, CliError> {
    let (bridge, host) =
        start_bridge(&args.datadir, &rpc_config(&args), args.listen, false).await?;
    // Shown before it is added, so the user sees what a failed add was about.
    let added = match bridge.listed_in_directory(directory.as_deref(), uid).await {
        Ok(listed) => {
            print_listed(&listed);
            bridge.add_listed(&listed, name.as_deref()).await.map(drop)
        }
        Err(e) => Err(e),
    };
    bridge.close().await;
    // The directory's replies are in the PM journal: acknowledged before exiting, so
    // they do not wait in the client for the next consumer.
    if !host.flush_acks(ACK_FLUSH_WAIT).await {
        tracing::warn!("PMs handled but not acknowledged at exit; the client offers them again");
    }
    host.close();
    added?;
    let name = bridge
        .bots()
        .into_iter()
        .find(|b| b.uid == uid)
        .and_then(|b| b.name)
        .unwrap_or_default();
    println!("added bot {uid} as {name:?}");
    Ok(ExitCode::SUCCESS)
}

/// A provider as its directory lists it: uid, description, tools with prices, the
/// directory's words with control characters escaped.
fn print_listed(listed: &ListedBot) {
    println!("bot {}: {}", listed.uid, printable(&listed.description));
    let mut table = Table::new(&["TOOL", "PRICE"]);
    for (tool, price) in &listed.tools {
        table.row(vec![printable(tool), price.clone()]);
    }
    print!("{table}");
}

/// `text` with its control characters (line breaks, terminal escapes) escaped, so a
/// directory's words cannot move the cursor, recolour the terminal or fake lines.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(
            printable("echo (free)\n\u{1b}[2Aadded \u{7}ok"),
            "echo (free)\\n\\u{1b}[2Aadded \\u{7}ok"
        );
        assert_eq!(printable("plain text — ok"), "plain text — ok");
    }
}
