//! `brmcp bridge bots`: the allowed bots, added by hand or from a directory.

use std::path::Path;
use std::process::ExitCode;

use brmcp_adapters::PeerId;
use brmcp_clientrpc::ACK_FLUSH_WAIT;

use super::{BotsAction, BridgeArgs, load, rpc_config, save, start_bridge};
use crate::bridge::{BotChange, ListedBot, NamedBot, SETTINGS_FILE, Settings, SettingsError};
use crate::cli::CliError;
use crate::cli::table::{Table, print_json};

/// Adds, removes or lists the bots of `datadir`'s settings (not `--from-directory`,
/// which needs the client: [`add_from_directory`]), saying what changed.
pub(super) fn run(datadir: &Path, action: BotsAction) -> Result<ExitCode, CliError> {
    let settings_path = datadir.join(SETTINGS_FILE);
    let settings = load(&settings_path)?;
    let (settings, said) = match action {
        BotsAction::Add {
            name: Some(name),
            uid: Some(uid),
            replace,
            ..
        } => {
            let (settings, change) = settings
                .with_named_bot(&name, uid, replace)
                .map_err(|e| refused_add(e, &name, uid))?;
            if change.was_named {
                println!("bot {name} ({uid}) is already allowed under that name; nothing changed");
                return Ok(ExitCode::SUCCESS);
            }
            (settings, added(&name, uid, &change))
        }
        BotsAction::Add { .. } => {
            return Err(CliError(
                "bots add needs NAME and UID, or --from-directory UID".into(),
            ));
        }
        BotsAction::Remove { bot } => {
            let uid = settings
                .resolve(&bot)
                .ok_or_else(|| SettingsError::UnknownBot(bot.clone()))?;
            let named = named(&settings, uid);
            (settings.without_bot(&bot)?, format!("removed bot {named}"))
        }
        BotsAction::List { json } => {
            list(&settings, json);
            return Ok(ExitCode::SUCCESS);
        }
        // Dispatched before: discover reads the announcements, subscribe needs the
        // client.
        BotsAction::Discover { .. } | BotsAction::Subscribe { .. } => {
            return Ok(ExitCode::SUCCESS);
        }
    };
    save(datadir, &settings_path, &settings)?;
    println!("{said}");
    Ok(ExitCode::SUCCESS)
}

/// `bots add`'s refusal, saying how to do it anyway where `--replace` would.
fn refused_add(e: SettingsError, name: &str, uid: PeerId) -> CliError {
    match e {
        SettingsError::NameHeld { uid: holder, .. } => CliError(format!(
            "{e}: `bots add {name} {uid} --replace` moves the name to {uid} ({holder} stays \
             allowed, unnamed)"
        )),
        SettingsError::BotNamed { name: ref old, .. } => CliError(format!(
            "{e}: `bots add {name} {uid} --replace` renames it from {old} to {name}"
        )),
        e => e.into(),
    }
}

/// What `bots add` did, one line per change.
fn added(name: &str, uid: PeerId, change: &BotChange) -> String {
    let mut lines = Vec::new();
    if let Some(old) = change.moved_from {
        lines.push(format!(
            "moved the name {name} from bot {old} to bot {uid}; {old} stays allowed without a \
             name (`bots remove {old}` forgets it)"
        ));
    }
    lines.push(match (change.was_allowed, &change.renamed_from) {
        (false, _) => format!("added bot {name} ({uid})"),
        (true, Some(from)) => format!("renamed bot {uid} from {from} to {name}"),
        (true, None) => format!("named bot {uid} {name}"),
    });
    lines.join("\n")
}

/// `name (uid)`, or the uid of a bot without a name.
fn named(settings: &Settings, uid: PeerId) -> String {
    match settings.bots().into_iter().find(|b| b.uid == uid) {
        Some(NamedBot {
            name: Some(name), ..
        }) => format!("{name} ({uid})"),
        _ => uid.to_string(),
    }
}

/// The allowed bots as a table, or as one JSON array of `{"name", "uid"}` (name null
/// when the bot has none).
fn list(settings: &Settings, json: bool) {
    let bots = settings.bots();
    if json {
        let rows: Vec<_> = bots
            .iter()
            .map(|b| serde_json::json!({"name": b.name, "uid": b.uid.to_string()}))
            .collect();
        print_json(&serde_json::json!(rows));
        return;
    }
    if bots.is_empty() {
        eprintln!("no bots allowed yet: `bots add NAME UID` allows one");
        return;
    }
    let mut table = Table::new(&["NAME", "UID"]);
    for bot in bots {
        table.row(vec![
            bot.name.unwrap_or_else(|| "-".to_owned()),
            bot.uid.to_string(),
        ]);
    }
    print!("{table}");
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
