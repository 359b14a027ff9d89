//! Wiring the harness to a Bison Relay client: the clientrpc connection, and the
//! streams that feed it PMs (through the PM journal) and tips (through the ledger).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use brmcp_adapters::{BoxError, PeerId};
use brmcp_clientrpc::ReceivedTip;
use brmcp_clientrpc::{BotConfig, ClientRpcConfig, ClientRpcHost, Streams, TipHandler};
use serde_json::json;
use tokio::sync::Notify;

use super::with_tools;
use crate::cli::CliError;
use crate::cli::directory::HostPayer;
use crate::cli::table::matoms_as_atoms;
use crate::directory::{Registrant, RegistrantBlock, RegistrantConfig, StatusOut};
use crate::journal::{self, JournalHandler, PmJournal};
use crate::server::upstream::Upstreams;
use crate::server::{AutoReply, Harness, Ledger, ServeConfig, Tip};

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

/// Records each tip in the ledger (which credits it once, whatever the redeliveries)
/// before the host acknowledges it.
struct ServeTips {
    harness: Harness,
    ledger: Arc<Ledger>,
}

impl TipHandler for ServeTips {
    async fn handle_tip(&self, tip: ReceivedTip) -> Result<(), BoxError> {
        let Ok(matoms) = u64::try_from(tip.amount_matoms) else {
            // brclient reports settled amounts, never negative ones: nothing to credit.
            tracing::error!(seq = tip.sequence_id, from = %tip.uid, matoms = tip.amount_matoms, "tip with a negative amount not credited");
            return Ok(());
        };
        let outcome = self
            .harness
            .record_tip(Tip {
                seq: tip.sequence_id,
                caller: tip.uid,
                matoms,
            })
            .await?;
        tracing::info!(
            seq = tip.sequence_id,
            caller = %tip.uid,
            atoms = %matoms_as_atoms(matoms),
            outcome = ?outcome,
            "tip received"
        );
        Ok(())
    }

    async fn cleared(&self, up_to: u64) -> Result<(), BoxError> {
        let ledger = self.ledger.clone();
        tokio::task::spawn_blocking(move || ledger.clear_tips(up_to)).await??;
        Ok(())
    }
}

/// Starts the harness on `host` and feeds it the host's PMs (through the PM journal)
/// and tips (through the ledger), the data directory bound to the client; with
/// upstreams in `config`, starts supervising them (their tools are served as they come
/// up).
/// The longest a starting server waits for its upstreams' first listing before it takes
/// calls: long enough for a server started by `npx` or a container, short enough that a
/// broken upstream does not keep the bot's other tools (and refunds' notices) away.
const UPSTREAMS_SETTLE_WAIT: Duration = Duration::from_secs(30);

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
    // Idle callers' sessions are parked (the harness's default, `DEFAULT_PARK_AFTER`),
    // upstream tools included: a list change a parked session missed is told on its
    // revival.
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

/// The streams that feed `harness` from a client: PMs through the data directory's PM
/// journal (record, then ack), tips through the ledger (credit, then ack), and the data
/// directory bound to the client's identity at every connect.
pub(crate) fn harness_streams(datadir: &Path, harness: &Harness) -> Result<Streams, CliError> {
    let journal = Arc::new(PmJournal::open(datadir)?);
    let wake = Arc::new(Notify::new());
    let forwarder = harness.clone();
    tokio::spawn(journal::forward(
        journal.clone(),
        wake.clone(),
        move |from, body| {
            let harness = forwarder.clone();
            async move { harness.handle_pm(from, body).await.map_err(Into::into) }
        },
    ));
    let tips = ServeTips {
        harness: harness.clone(),
        // The harness opened (and owns) it; this handle only marks cleared tips.
        ledger: Arc::new(Ledger::attach(datadir)?),
    };
    Ok(Streams::new()
        .pms(JournalHandler::new(journal.clone(), wake))
        .tips(tips)
        .identity(crate::cli::client_guard(journal)))
}
