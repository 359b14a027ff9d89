//! `brmcp serve --datadir DIR announce`: the bot's announcement for a Bison Relay post
//! (WIRE.md §13), from the tools the harness would list: its upstreams' (started for
//! their first listing, then stopped) or else the example tools.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol::{
    AnnouncedTool, Announcement, MAX_ANNOUNCED_DESCRIPTION_LEN, MAX_ANNOUNCED_NAME_LEN,
    MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN, MAX_ANNOUNCED_TOOLS, PriceBounds, ToolPrice,
};
use brmcp_clientrpc::Streams;
use rmcp::model::Tool;

use super::host::{UPSTREAMS_SETTLE_WAIT, connect, host_from};
use super::{RPC_CONFIG, SERVE_CONFIG, example_tools, now};
use crate::cli::CliError;
use crate::directory::RegistrantBlock;
use crate::server::upstream::Upstreams;
use crate::server::{DynamicTools, ServeConfig};

/// What `announce` is told.
pub(super) struct AnnounceArgs {
    /// The bot's name (default: its Bison Relay nick).
    pub name: Option<String>,
    /// What the bot is (default: the `directory` block's description, if any).
    pub description: Option<String>,
    /// Write the post here instead of standard output.
    pub out: Option<PathBuf>,
}

/// Writes the announcement of the bot `datadir` configures, and says how to publish it.
pub(super) async fn announce(
    datadir: &Path,
    rpc_config: Option<PathBuf>,
    args: AnnounceArgs,
) -> Result<ExitCode, CliError> {
    let config_path = datadir.join(SERVE_CONFIG);
    if config_path.symlink_metadata().is_err() {
        return Err(CliError(format!(
            "{} is missing: is this the data directory `brmcp serve` runs with?",
            config_path.display()
        )));
    }
    let config = ServeConfig::load(&config_path)?;
    let rpc_config = rpc_config.unwrap_or_else(|| datadir.join(RPC_CONFIG));
    let host = host_from(&rpc_config)?;
    // Consuming nothing: the running server's streams are left to it.
    connect(&host, Streams::new().tip_progress(false)).await?;
    let me = host.public_identity().await;
    host.close();
    let me = me?;
    let uid = me
        .peer_id()
        .ok_or_else(|| CliError("the client's identity is not a 64-hex user id".into()))?;
    let tools = listed_tools(&config).await;
    let (tools, skipped) = announced_tools(&tools);
    for line in &skipped {
        eprintln!("not announced: {line}");
    }
    let description = match args.description {
        Some(d) => d,
        None => RegistrantBlock::from_config(&config, &config_path)?
            .map(|b| b.description)
            .unwrap_or_default(),
    };
    let announcement = Announcement {
        uid,
        name: one_line(
            args.name.as_deref().unwrap_or(&me.nick),
            MAX_ANNOUNCED_NAME_LEN,
        ),
        description: one_line(&description, MAX_ANNOUNCED_DESCRIPTION_LEN),
        issued_secs: u64::try_from(now().secs()).unwrap_or(0),
        tools,
    };
    let text = announcement
        .render()
        .map_err(|e| CliError(format!("cannot write the announcement: {e}")))?;
    let file = match &args.out {
        Some(out) => {
            crate::secure_fs::write_atomic(out, text.as_bytes())
                .map_err(|e| CliError(format!("{}: {e}", out.display())))?;
            out.display().to_string()
        }
        None => {
            print!("{text}");
            "FILE".to_owned()
        }
    };
    eprintln!("{}", how_to_publish(&file, uid));
    Ok(ExitCode::SUCCESS)
}

/// How the operator publishes the post: Bison Relay's clientrpc cannot.
fn how_to_publish(file: &str, uid: PeerId) -> String {
    format!(
        "publish it as a post from your brclient: `/post new {file}` (the post is the file's \
         text); on the devnet: `brmcp devnet post NODE {file} --dir DIR`. Bridges that \
         subscribe to {uid}'s posts find it with `brmcp bridge --datadir DIR bots discover`. \
         Announce again when the tools or prices change, and at least every 30 days."
    )
}

/// The tools the harness would list for `config`: the example tools, or its upstreams'
/// first listing (started without touching the running server's status file, and
/// stopped again).
async fn listed_tools(config: &ServeConfig) -> Vec<Tool> {
    if config.upstreams.is_empty() {
        return example_tools().into_iter().map(|s| s.tool).collect();
    }
    let tools = DynamicTools::new();
    let upstreams = Upstreams::start(&config.upstreams, &tools, None, None);
    if !upstreams.settled(UPSTREAMS_SETTLE_WAIT).await {
        eprintln!(
            "not every upstream came up within {} s: only the tools listed so far are announced",
            UPSTREAMS_SETTLE_WAIT.as_secs()
        );
    }
    let listed = tools.definitions().into_iter().map(|(_, t)| t).collect();
    upstreams.shutdown().await;
    listed
}

/// The announced form of `tools`, and a line for each tool left out (unpriced, a
/// malformed price, a name an announcement cannot hold, or past the tool bound).
pub(crate) fn announced_tools(tools: &[Tool]) -> (Vec<AnnouncedTool>, Vec<String>) {
    let mut announced = Vec::new();
    let mut skipped = Vec::new();
    for tool in tools {
        let meta = tool.meta.as_ref().map(|m| &m.0);
        let price = match ToolPrice::from_meta(meta) {
            Ok(Some(price)) => price,
            Ok(None) => {
                skipped.push(format!("{}: no price", tool.name));
                continue;
            }
            Err(e) => {
                skipped.push(format!("{}: {e}", tool.name));
                continue;
            }
        };
        if announced.len() == MAX_ANNOUNCED_TOOLS {
            skipped.push(format!(
                "{}: an announcement lists at most {MAX_ANNOUNCED_TOOLS} tools",
                tool.name
            ));
            continue;
        }
        announced.push(AnnouncedTool {
            name: tool.name.to_string(),
            description: one_line(
                tool.description.as_deref().unwrap_or(""),
                MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN,
            ),
            price,
            bounds: PriceBounds::from_meta(meta).unwrap_or(PriceBounds::NONE),
        });
    }
    (announced, skipped)
}

/// `text`'s first line without control characters, cut to `max` bytes at a character
/// boundary (an ellipsis marking the cut).
fn one_line(text: &str, max: usize) -> String {
    let line: String = text
        .lines()
        .next()
        .unwrap_or("")
        .chars()
        .filter(|c| !c.is_control())
        .collect();
    let line = line.trim();
    if line.len() <= max {
        return line.to_owned();
    }
    let mut cut = max - '…'.len_utf8();
    while !line.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &line[..cut])
}

#[cfg(test)]
mod tests {
    use super::*;
    use brmcp_adapters::protocol::{DYNAMIC_PRICING, PRICE_MAX_META, PRICING_META};
    use rmcp::model::MetaObject;

    #[test]
    fn the_example_tools_are_announced_at_their_prices() {
        let tools: Vec<Tool> = example_tools().into_iter().map(|s| s.tool).collect();
        let (announced, skipped) = announced_tools(&tools);
        assert!(skipped.is_empty(), "{skipped:?}");
        let prices: Vec<_> = announced
            .iter()
            .map(|t| (t.name.as_str(), t.price))
            .collect();
        assert_eq!(
            prices,
            [
                ("echo", ToolPrice::Free),
                ("fortune", ToolPrice::Fixed(super::super::FORTUNE_ATOMS))
            ]
        );
    }

    #[test]
    fn bounds_are_announced_and_unpriced_or_surplus_tools_left_out() {
        let mut dynamic = example_tools().remove(0).tool;
        dynamic.name = "report".into();
        let mut meta = MetaObject::default();
        meta.0.insert(PRICING_META.into(), DYNAMIC_PRICING.into());
        meta.0.insert(PRICE_MAX_META.into(), 500.into());
        dynamic.meta = Some(meta);
        let mut unpriced = dynamic.clone();
        unpriced.name = "plain".into();
        unpriced.meta = None;
        let mut many = vec![dynamic, unpriced];
        for i in 0..MAX_ANNOUNCED_TOOLS {
            let mut t = example_tools().remove(1).tool;
            t.name = format!("t{i}").into();
            many.push(t);
        }
        let (announced, skipped) = announced_tools(&many);
        assert_eq!(announced.len(), MAX_ANNOUNCED_TOOLS);
        assert_eq!(announced[0].bounds.max_atoms(), Some(500));
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(skipped[0].starts_with("plain: no price"));
        assert!(skipped[1].starts_with(&format!("t{}:", MAX_ANNOUNCED_TOOLS - 1)));
    }

    #[test]
    fn descriptions_are_cut_to_one_line_within_their_bound() {
        assert_eq!(one_line("first\nsecond", 64), "first");
        assert_eq!(one_line("tab\there", 64), "tabhere");
        let cut = one_line(&"é".repeat(200), MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN);
        assert!(cut.len() <= MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN && cut.ends_with('…'));
    }
}
