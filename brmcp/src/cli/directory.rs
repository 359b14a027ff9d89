//! `brmcp directory`: the verifying directory (`brmcp::directory`) on a running Bison
//! Relay client, paying providers' test calls with tips.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use brmcp_adapters::PeerId;
use brmcp_adapters::clientrpc::proto::KxCompleted;
use brmcp_adapters::clientrpc::{ClientRpcError, ClientRpcHost, Streams, TipOutcome};
use clap::Args;

use super::CliError;
use super::serve::{connect, harness_streams, host_from, write_rpc_template};
use crate::directory::{
    Directory, IntroduceFuture, Introducer, POLICY_FILE, PayError, PayFuture, Payer, Policy,
};
use crate::server::AutoReply;

/// The clientrpc connection file of a directory's data directory (bisonbotkit format).
const RPC_CONFIG: &str = "brmcpdir.conf";

/// The answer to plain chat.
const HELP: &str = "This is a brmcp directory of verified MCP tool providers. Connect an MCP \
                    agent with `brmcp bridge`, allow this bot, and call `search`, \
                    `get_provider`, `register` or `policy`.";

#[derive(Debug, Args)]
pub(super) struct DirectoryArgs {
    /// Data directory: brmcpdir.conf, brmcpdir.json, the directory's state, the ledger,
    /// the snapshot key and the PM journal.
    #[arg(long, value_name = "DIR")]
    datadir: PathBuf,
    /// The clientrpc connection file (default: <datadir>/brmcpdir.conf).
    #[arg(long, value_name = "FILE")]
    rpc_config: Option<PathBuf>,
}

pub(super) fn run(args: DirectoryArgs) -> Result<ExitCode, CliError> {
    super::runtime()?.block_on(serve(&args.datadir, args.rpc_config))
}

/// Tips through the Bison Relay client, telling a refused or failed tip (nothing paid)
/// from one whose outcome is unknown.
pub(super) struct HostPayer(pub(super) ClientRpcHost);

impl Payer for HostPayer {
    fn pay(&self, payee: PeerId, atoms: u64) -> PayFuture<'_> {
        Box::pin(async move {
            match self.0.tip(payee, atoms).await {
                Ok(TipOutcome::Paid { .. }) => Ok(()),
                Ok(TipOutcome::Failed { error, .. }) => {
                    Err(PayError::Failed(format!("tip failed: {error}").into()))
                }
                Err(
                    e @ (ClientRpcError::Rpc { .. }
                    | ClientRpcError::Config(_)
                    | ClientRpcError::NoTipProgress),
                ) => Err(PayError::Failed(format!("tip: {e}").into())),
                Ok(_) | Err(_) => Err(PayError::Unconfirmed),
            }
        })
    }
}

/// Key exchanges through a peer directory: clientrpc's `MediateKX`, the peer mediating
/// toward the provider (it knows both sides).
pub(super) struct HostIntroducer(pub(super) ClientRpcHost);

impl Introducer for HostIntroducer {
    fn introduce(&self, mediator: PeerId, target: PeerId) -> IntroduceFuture<'_> {
        Box::pin(async move {
            self.0
                .mediate_kx(mediator, target)
                .await
                .map_err(|e| format!("mediate kx: {e}").into())
        })
    }
}

/// Adds the KX stream to `streams`: every completed exchange goes to
/// [`Directory::notify_kx`] (a lead awaiting it gets its one invite) before it is
/// acknowledged, so an exchange a crash interrupted is offered again at restart.
pub(super) fn with_kx(streams: Streams, directory: &Directory) -> Streams {
    let directory = directory.clone();
    streams.kx(move |kx: KxCompleted| {
        let directory = directory.clone();
        async move {
            directory.notify_kx(kx.uid).await;
            Ok(())
        }
    })
}

/// A directory serving on a Bison Relay client.
pub(super) struct Running {
    /// The directory.
    pub(super) directory: Directory,
    /// Its client.
    pub(super) host: ClientRpcHost,
    /// Its own uid, when the client told it.
    pub(super) uid: Option<PeerId>,
    /// Its nick.
    pub(super) nick: String,
}

impl Running {
    /// Stops the directory, then its client.
    pub(super) async fn close(&self) {
        self.directory.close().await;
        self.host.close();
    }
}

/// Starts the directory of `datadir` under `policy` on the client `rpc_config` names:
/// PMs, tips and completed key exchanges fed to it, interrupted pipelines resumed.
pub(super) async fn start_directory(
    datadir: &Path,
    rpc_config: &Path,
    policy: Policy,
) -> Result<Running, CliError> {
    let host = host_from(rpc_config)?;
    let directory = Directory::builder()
        .data_dir(datadir)
        .policy(policy)
        .payer(HostPayer(host.clone()))
        .introducer(HostIntroducer(host.clone()))
        .auto_reply(AutoReply::new(HELP))
        .build()?;
    directory.start(host.clone())?;
    let streams = with_kx(harness_streams(datadir, directory.harness())?, &directory);
    connect(&host, streams).await?;
    let me = host.public_identity().await?;
    let uid = me.peer_id();
    if let Some(uid) = uid {
        directory.set_self_uid(uid);
    }
    directory.resume().await?;
    Ok(Running {
        directory,
        host,
        uid,
        nick: me.nick,
    })
}

async fn serve(datadir: &Path, rpc_config: Option<PathBuf>) -> Result<ExitCode, CliError> {
    std::fs::create_dir_all(datadir)
        .map_err(|e| CliError(format!("{}: {e}", datadir.display())))?;
    let rpc_config = rpc_config.unwrap_or_else(|| datadir.join(RPC_CONFIG));
    let wrote = write_rpc_template(&rpc_config)?;
    let (policy, created) = Policy::load_or_create(datadir)?;
    if created {
        eprintln!(
            "created {} - add operator uids to admin_uids",
            datadir.join(POLICY_FILE).display()
        );
    }
    if wrote {
        eprintln!(
            "edit the file(s) above, then run `brmcp directory --datadir {}` again",
            datadir.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    if policy.admin_uids.is_empty() {
        eprintln!("admin_uids is empty: the admin tools are unreachable");
    }
    let running = start_directory(datadir, &rpc_config, policy).await?;
    let uid = running.uid.map_or_else(|| "?".into(), |p| p.to_string());
    eprintln!(
        "directory {} serving as {uid} ({}); snapshot key {}; Ctrl-C stops",
        running.directory.policy().name,
        running.nick,
        &running.directory.public_key()[..16],
    );
    super::wait_for_interrupt().await;
    eprintln!("stopping");
    running.close().await;
    Ok(ExitCode::SUCCESS)
}
