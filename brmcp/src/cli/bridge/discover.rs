//! `brmcp bridge bots discover` and `bots subscribe`: the bots that announced themselves
//! in posts the bridge received (WIRE.md §13), and asking the client for a user's posts.
//! Neither adds a bot: that stays the user's `bots add` (or the page).

use std::path::Path;
use std::process::ExitCode;

use brmcp_adapters::protocol::{AnnouncedTool, ToolPrice};
use brmcp_clientrpc::Streams;
use serde_json::{Value, json};

use super::{BridgeArgs, load, now, rpc_config};
use crate::bridge::SETTINGS_FILE;
use crate::bridge::announcements::{ANNOUNCEMENTS_FILE, Announced, Announcements};
use crate::cli::CliError;
use crate::cli::table::{Table, print_json};

/// Lists the fresh announcements of `datadir`, saying which bots are already added and
/// how many announcements were skipped.
pub(super) fn discover(datadir: &Path, json: bool) -> Result<ExitCode, CliError> {
    let now = u64::try_from(now().secs()).unwrap_or(0);
    let store = Announcements::load(datadir, now).map_err(|e| CliError(e.to_string()))?;
    let settings = load(&datadir.join(SETTINGS_FILE))?;
    let added = |a: &Announced| settings.resolve(&a.announcement.uid.to_string()).is_some();
    let current = store.current(now);
    let skipped = store.skipped();
    if json {
        let rows: Vec<Value> = current.iter().map(|a| row(a, added(a))).collect();
        print_json(&json!({
            "announcements": rows,
            "skipped": {
                "malformed": skipped.malformed,
                "oversized": skipped.oversized,
                "stale": skipped.stale,
                "not_its_author": skipped.not_its_author,
            },
        }));
        return Ok(ExitCode::SUCCESS);
    }
    if current.is_empty() {
        eprintln!(
            "no announcements yet ({}): `bots subscribe USER` asks your client for a bot's \
             posts, and a running bridge keeps the announcements they carry",
            datadir.join(ANNOUNCEMENTS_FILE).display()
        );
    } else {
        let mut table = Table::new(&["NAME", "UID", "ADDED", "TOOLS", "ABOUT"]);
        for a in &current {
            let tools: Vec<String> = a
                .announcement
                .tools
                .iter()
                .map(|t| format!("{} ({})", t.name, t.describe_price()))
                .collect();
            table.row(vec![
                a.announcement.name.clone(),
                a.announcement.uid.to_string(),
                if added(a) { "yes" } else { "no" }.to_owned(),
                tools.join(", "),
                a.announcement.description.clone(),
            ]);
        }
        print!("{table}");
        println!("`bots add NAME UID` adds one (announced bots are never added by themselves)");
    }
    if skipped.total() > 0 {
        eprintln!(
            "skipped {} announcement(s): {} malformed, {} oversized, {} stale, {} naming another bot",
            skipped.total(),
            skipped.malformed,
            skipped.oversized,
            skipped.stale,
            skipped.not_its_author
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One announcement as `bots discover --json` prints it.
pub(crate) fn row(a: &Announced, added: bool) -> Value {
    let tools: Vec<Value> = a.announcement.tools.iter().map(tool).collect();
    json!({
        "uid": a.announcement.uid.to_string(),
        "name": a.announcement.name,
        "description": a.announcement.description,
        "issued": a.announcement.issued_secs,
        "received": a.received_secs,
        "post_id": a.post_id,
        "added": added,
        "tools": tools,
    })
}

fn tool(t: &AnnouncedTool) -> Value {
    let (price_atoms, dynamic) = match t.price {
        ToolPrice::Free => (Some(0), false),
        ToolPrice::Fixed(atoms) => (Some(atoms), false),
        ToolPrice::Dynamic => (None, true),
    };
    json!({
        "name": t.name,
        "description": t.description,
        "price_atoms": price_atoms,
        "dynamic": dynamic,
        "min_atoms": t.bounds.min_atoms(),
        "max_atoms": t.bounds.max_atoms(),
        "price": t.describe_price(),
    })
}

/// Asks the client for `users`' posts (nicks or 64-hex uids); the bridge keeps the
/// announcements among them.
pub(super) async fn subscribe(args: &BridgeArgs, users: &[String]) -> Result<ExitCode, CliError> {
    let host = crate::cli::serve::host_from(&rpc_config(args))?;
    // Consuming nothing: a running bridge's streams are left to it.
    crate::cli::serve::connect(&host, Streams::new().tip_progress(false)).await?;
    let mut failed = None;
    for user in users {
        match host.subscribe_to_posts(user).await {
            Ok(()) => println!("subscribed to {user}'s posts"),
            Err(e) => {
                eprintln!("{user}: {e}");
                failed = Some(e);
            }
        }
    }
    host.close();
    match failed {
        None => Ok(ExitCode::SUCCESS),
        Some(e) => Err(CliError(format!("not every subscription was made: {e}"))),
    }
}
