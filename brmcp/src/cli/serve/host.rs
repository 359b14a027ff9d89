//! Wiring the harness to a Bison Relay client: the clientrpc connection, the harness
//! on it (its streams are `host::harness_streams`), and the registrant.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use brmcp_adapters::PeerId;
use brmcp_clientrpc::{BotConfig, ClientRpcConfig, ClientRpcHost, Streams};
use serde_json::json;

use super::with_tools;
use crate::cli::CliError;
use crate::directory::{Registrant, RegistrantBlock, RegistrantConfig, StatusOut};
use crate::host::{HostPayer, harness_streams};
use crate::server::upstream::Upstreams;
use crate::server::{AutoReply, Harness, ServeConfig};

/// Connects to the clientrpc endpoint a bisonbotkit config names.
pub(crate) fn host_from(rpc_config: &Path) -> Result<ClientRpcHost, CliError> {
    let bot = BotConfig::load(rpc_config)?;
    crate::cli::log::apply_conf(&bot, rpc_config)?;
    let config = ClientRpcConfig::from_bot_config(&bot);
    Ok(ClientRpcHost::new(config)?)
}

/// Starts `host` on `streams`; the error names the client's address.
pub(crate) async fn connect(host: &ClientRpcHost, streams: Streams) -> Result<(), CliError> {
    host.connect(streams).await.map_err(|e| {
        CliError(format!(
            "cannot reach the Bison Relay client at {}: {e}",
            host.config().url
        ))
    })
}

/// Starts the harness on `host` and feeds it the host's PMs (through the PM journal)
/// and tips (through the ledger), the data directory bound to the client; with
/// upstreams in `config`, starts supervising them (their tools are served as they come
/// up).
/// The longest a starting server waits for its upstreams' first listing before it takes
/// calls: long enough for a server started by `npx` or a container, short enough that a
/// broken upstream does not keep the bot's other tools (and refunds' notices) away.
pub(super) const UPSTREAMS_SETTLE_WAIT: Duration = Duration::from_secs(30);

pub(crate) async fn start_serving(
    datadir: &Path,
    config: &ServeConfig,
    host: &ClientRpcHost,
) -> Result<(Harness, Upstreams), CliError> {
    let builder = Harness::builder()
        .data_dir(datadir)
        .config(config)
        .auto_reply(AutoReply::new(
            "This is a brmcp bot: connect an MCP agent with `brmcp bridge` to use its tools.",
        ));
    // Callers' sessions are parked at rest (the harness's default: `DEFAULT_PARK_AFTER`,
    // or `LISTENED_PARK_AFTER` with upstream tools, whose list changes are pushed; one
    // a parked session missed is told on its revival).
    let (mut builder, upstreams) = with_tools(builder, datadir, config);
    let block = RegistrantBlock::from_config(config, &datadir.join(super::SERVE_CONFIG))?;
    let registrant = match &block {
        None => None,
        Some(block) => Some(registrant(datadir, block, host)?),
    };
    if let Some(registrant) = &registrant {
        builder = builder.tool(registrant.listing_invite());
    }
    let harness = builder.build()?;
    if harness.refunded_at_open() > 0 {
        eprintln!(
            "refunded {} call(s) interrupted by the last stop",
            harness.refunded_at_open()
        );
    }
    // Before any call is taken or an interrupted one is told to retry: the upstreams'
    // tools listed, so a prompt retry finds them.
    if !upstreams.settled(UPSTREAMS_SETTLE_WAIT).await {
        eprintln!(
            "serving before every upstream came up (waited {} s); its tools are served once it does",
            UPSTREAMS_SETTLE_WAIT.as_secs()
        );
    }
    let router = harness.start(host.clone())?;
    let streams = harness_streams(datadir, &harness)?;
    connect(host, streams).await?;
    if let (Some(registrant), Some(block)) = (registrant, &block) {
        registrant.attach(router);
        let directories = block.register_at_uids.clone();
        // In the background: a directory that is slow to answer holds up nothing.
        tokio::spawn(async move {
            for directory in directories {
                let _ = registrant.register(directory).await;
            }
        });
    }
    Ok((harness, upstreams))
}

/// The registrant `block` configures, its fund history in `datadir`, paying with tips
/// through `host`, each outcome told on stderr.
fn registrant(
    datadir: &Path,
    block: &RegistrantBlock,
    host: &ClientRpcHost,
) -> Result<Registrant, CliError> {
    let mut config = RegistrantConfig::new(
        block.description.clone(),
        block.test.clone(),
        datadir,
        HostPayer(host.clone()),
    );
    config.tags.clone_from(&block.tags);
    config.auto_fund = block.auto_fund.clone();
    config.notify = Some(Arc::new(
        |directory: PeerId, status: &StatusOut, err: Option<&str>| {
            let state = json!(status.state);
            let mut line = format!("directory {directory}: {}", state.as_str().unwrap_or("?"));
            if status.shortfall_atoms > 0 {
                line.push_str(&format!(", {} atoms short", status.shortfall_atoms));
            }
            if !status.note.is_empty() {
                line.push_str(&format!(" ({})", status.note));
            }
            if let Some(err) = err {
                line.push_str(&format!(": {err}"));
            }
            eprintln!("{line}");
        },
    ));
    Registrant::new(config).map_err(CliError)
}
