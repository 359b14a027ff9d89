//! `brmcp directory`: the verifying directory (`brmcp::directory`) on a running Bison
//! Relay client, paying providers' test calls with tips.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use brmcp_adapters::PeerId;
use brmcp_clientrpc::{ACK_FLUSH_WAIT, ClientRpcHost};
use clap::Args;

use super::CliError;
use super::serve::{connect, host_from, write_rpc_template};
use crate::directory::{Directory, POLICY_FILE, Policy, STOP_BLOCKING_WAIT};
use crate::host::{HostIntroducer, HostPayer, harness_streams, with_kx};
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
    let runtime = super::runtime()?;
    let served = runtime.block_on(serve(&args.datadir, args.rpc_config));
    // Dropping the runtime would wait for every blocking task, however long.
    runtime.shutdown_timeout(STOP_BLOCKING_WAIT);
    served
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
    /// Stops the directory (pipelines cut, within [`crate::directory::CLOSE_WAIT`]),
    /// waits for the acknowledgements of what it handled (within [`ACK_FLUSH_WAIT`]:
    /// what is left is replayed at the next start), then closes its client.
    pub(super) async fn close(&self) {
        self.directory.close().await;
        if !self.host.flush_acks(ACK_FLUSH_WAIT).await {
            tracing::warn!(
                "items handled but not acknowledged at exit; the client offers them again"
            );
        }
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
    crate::secure_fs::create_dir(datadir)
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
    eprintln!(
        "stopping (within {} s; a paid test in flight resumes at the next start)",
        crate::directory::STOP_WITHIN.as_secs()
    );
    running.close().await;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use brmcp_adapters::{Router, RouterConfig};
    use brmcp_clientrpc::Streams;
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use serde_json::{Value, json};

    use super::*;
    use crate::cli::serve::{FORTUNE_ATOMS, connect, start_serving};
    use crate::cli::testing::until;
    use crate::directory::State;
    use crate::server::ServeConfig;
    use brmcp_devnet::{Devnet, DevnetConfig, NodeInfo, NodeSpec, StreamKind};

    fn policy(admin: &NodeInfo) -> Policy {
        Policy {
            admin_uids: vec![admin.uid_hex()],
            listing_fee_atoms: 1000,
            snapshot_price_atoms: 50,
            test_budget_max_atoms: 100_000,
            ..Policy::default()
        }
    }

    async fn admin_call(
        admin: &rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
        tool: &str,
        args: Value,
    ) -> Value {
        let result = admin
            .call_tool(
                CallToolRequestParams::new(tool.to_owned())
                    .with_arguments(args.as_object().cloned().unwrap()),
            )
            .await
            .unwrap();
        let text = brmcp_adapters::protocol::result_text(&result);
        assert_ne!(result.is_error, Some(true), "{tool}: {text}");
        serde_json::from_str(&text).unwrap()
    }

    /// The transitive KX fallback through real clientrpc: directory A learns provider
    /// P from peer B's snapshot, cannot reach P (no key exchange), asks B to mediate
    /// (`MediateKX`); the devnet completes the exchange, A's KX stream hands it to
    /// `notify_kx` before acknowledging it, and the one invite that follows brings P's
    /// registration to A's review queue.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_mediated_kx_completion_sends_the_pending_invite() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = DevnetConfig::default();
        cfg.kx_all = false;
        let specs = ["a", "b", "p", "op"].map(NodeSpec::new).to_vec();
        let devnet = Devnet::start_with(tmp.path().join("devnet"), specs, cfg)
            .await
            .unwrap();
        let [a, b, p, op] = <[NodeInfo; 4]>::try_from(devnet.nodes()).unwrap();
        for (x, y) in [(&a, &b), (&b, &p), (&op, &a), (&op, &b)] {
            devnet.kx(x.id, y.id).unwrap();
        }
        let dir_a = start_directory(&a.dir, &a.config_path, policy(&op))
            .await
            .unwrap();
        let dir_b = start_directory(&b.dir, &b.config_path, policy(&op))
            .await
            .unwrap();
        let provider = PeerId::from_bytes(p.uid);

        // P registers with B and is approved there.
        let config = json!({
            "allowed_uids": [a.uid_hex(), b.uid_hex()],
            "directory": {
                "description": "fortunes",
                "test": {"tool": "fortune", "maxAtoms": FORTUNE_ATOMS},
                "auto_fund": {"enabled": true, "max_atoms_per_request": 50_000,
                              "allowed_directory_uids": [a.uid_hex(), b.uid_hex()]},
                "register_at_uids": [b.uid_hex()],
            }
        });
        let config = ServeConfig::parse(&config.to_string(), &p.dir.join("brmcp.json")).unwrap();
        let p_host = host_from(&p.config_path).unwrap();
        let (harness, _upstreams) = start_serving(&p.dir, &config, &p_host).await.unwrap();
        let state_at = |d: &Directory, s: State| {
            d.entry(&provider)
                .unwrap()
                .reg
                .is_some_and(|r| r.state == s)
        };
        until("pending at B", || {
            state_at(&dir_b.directory, State::PendingReview)
        })
        .await;
        let op_host = host_from(&op.config_path).unwrap();
        let router = Router::new(op_host.clone(), RouterConfig::client());
        connect(&op_host, Streams::new().pms(router.clone()))
            .await
            .unwrap();
        let to_b = ().serve(router.dial(PeerId::from_bytes(b.uid)).unwrap());
        let to_b = to_b.await.unwrap();
        admin_call(&to_b, "approve", json!({"uid": p.uid_hex()})).await;

        // A follows B's snapshot to P, which it cannot reach: B is asked to mediate.
        let to_a = ().serve(router.dial(PeerId::from_bytes(a.uid)).unwrap());
        let to_a = to_a.await.unwrap();
        let key = dir_b.directory.public_key();
        admin_call(
            &to_a,
            "add_peer",
            json!({"uid": b.uid_hex(), "pubKey": key}),
        )
        .await;
        let verified = admin_call(&to_a, "verify_peer", json!({"uid": b.uid_hex()})).await;
        assert_eq!(verified["newLeads"], 1, "{verified}");
        let kx_before = devnet.log(a.id, StreamKind::Kx).unwrap().len();
        let lead = admin_call(&to_a, "pursue_lead", json!({"uid": p.uid_hex()})).await;
        assert_eq!(lead["state"], "pursuing", "{lead}");
        assert_eq!(lead["note"], "awaiting key exchange via peer");

        // The exchange completed on A's client; the invite it triggered registered P
        // at A (funded, crawled, test-paid), and the completion was acknowledged.
        until("pending at A", || {
            state_at(&dir_a.directory, State::PendingReview)
        })
        .await;
        let kx = devnet.log(a.id, StreamKind::Kx).unwrap();
        assert_eq!(kx.len(), kx_before + 1, "one KXCompleted on A");
        let completed = kx.last().unwrap();
        assert_eq!(completed.params["nick"], "p");
        until("the completion acked", || {
            devnet
                .log(a.id, StreamKind::Kx)
                .unwrap()
                .iter()
                .all(|e| e.acked)
        })
        .await;
        let leads = admin_call(&to_a, "leads", json!({})).await;
        assert_eq!(leads["leads"][0]["state"], "converted", "{leads}");

        // A completion delivered again (a crash before its acknowledgement) sends no
        // second invite: the registration and the fee stand as they are.
        let before = dir_a.directory.entry(&provider).unwrap().reg.unwrap();
        let stats = dir_a.directory.stats().unwrap();
        dir_a.directory.notify_kx(provider).await.unwrap();
        // A quiet window for a registration the provider would send in the background.
        tokio::time::sleep(Duration::from_millis(500)).await;
        dir_a.directory.settle().await;
        let after = dir_a.directory.entry(&provider).unwrap().reg.unwrap();
        assert_eq!(after.created_at, before.created_at);
        assert_eq!(after.state, State::PendingReview);
        assert_eq!(
            serde_json::to_value(dir_a.directory.stats().unwrap()).unwrap(),
            serde_json::to_value(stats).unwrap()
        );

        let _ = to_a.cancel().await;
        let _ = to_b.cancel().await;
        router.close();
        op_host.close();
        harness.close();
        p_host.close();
        dir_a.close().await;
        dir_b.close().await;
        devnet.shutdown().await;
    }
}
