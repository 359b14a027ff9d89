//! `brmcp bridge stdio`: one agent on stdio, served through the bridge of the data
//! directory. When a bridge runs there (`brmcp bridge`, or another `bridge stdio`
//! that started one), the agent goes through it, sharing its Bison Relay client, its
//! spend log and its caps; only when none runs does this process become the bridge,
//! on an ephemeral loopback port, for itself and the agents that attach after it.
//! When that bridge goes away, an attached agent's session moves to the next (see
//! [`crate::bridge::pump`]).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use brmcp_clientrpc::ClientRpcHost;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::{BridgeArgs, publish_status, rpc_config, start_bridge_hosts, warn_zero_caps};
use crate::bridge::{
    Bridge, EndpointRecord, Ownership, SETTINGS_FILE, Settings, Upstream, pump, running_bridge,
};
use crate::cli::CliError;
use crate::status::Publisher;

/// How long a start waits for a bridge to attach to or to become: 60 s. Another
/// process holding the data directory may still be connecting to its client.
const ATTACH_WAIT: Duration = Duration::from_secs(60);

/// How often the data directory is looked at within [`ATTACH_WAIT`].
const ATTACH_RETRY: Duration = Duration::from_millis(100);

/// How long a recorded listener has to accept a connection before it counts as gone.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// What `bridge stdio` serves.
pub(super) enum Served {
    /// A bot, by name or uid.
    Bot(String),
    /// A directory's tools, by name or uid (`None`: the first).
    Directory(Option<String>),
}

/// The endpoint path of `served` under `settings`.
fn endpoint_path(settings: &Settings, served: &Served) -> Result<String, CliError> {
    match served {
        Served::Bot(bot) => settings
            .bots()
            .into_iter()
            .find(|b| {
                b.name.as_deref() == Some(bot.as_str()) || b.uid.to_string() == bot.to_lowercase()
            })
            .map(|b| format!("/mcp/{}", b.uid))
            .ok_or_else(|| CliError(format!("{bot:?} is not an allowed bot (see `bots list`)"))),
        Served::Directory(name) => {
            let uid = settings
                .directory(name.as_deref())
                .and_then(|d| d.peer())
                .ok_or_else(|| match name {
                    Some(name) => CliError(format!(
                        "no directory {name:?} in the `directories` of mcpclient.json"
                    )),
                    None => CliError("mcpclient.json lists no `directories`".into()),
                })?;
            Ok(format!("/mcp/directory/{uid}"))
        }
    }
}

/// The bridge this process started, when it became the data directory's.
struct Owned {
    bridge: Bridge,
    host: ClientRpcHost,
    publisher: Publisher,
    _watch: tokio::task::JoinHandle<()>,
}

struct StdioUpstream<'a> {
    args: &'a BridgeArgs,
    path: String,
    owned: Option<Owned>,
    /// The other process's bridge last attached to.
    attached: Option<EndpointRecord>,
}

impl StdioUpstream<'_> {
    /// Starts the bridge of the data directory, whose lock `ownership` holds.
    async fn start_owned(&mut self, ownership: Ownership) -> Result<SocketAddr, CliError> {
        let args = self.args;
        // The configured address when it is free, so the agents configured with the
        // HTTP endpoint reach this bridge too; else an ephemeral loopback port, which
        // the stdio agents find through the data directory all the same.
        let (listen, fallback) = if args.listen.ip().is_loopback() {
            (args.listen, true)
        } else {
            (
                SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), 0),
                false,
            )
        };
        let (bridge, host) = start_bridge_hosts(
            &args.datadir,
            &rpc_config(args),
            listen,
            fallback,
            false,
            &[],
        )
        .await?;
        bridge.own_data_dir(ownership);
        let mut settings = bridge.settings();
        if !settings.enabled {
            settings.enabled = true;
            settings = bridge.apply_settings(settings).await?;
        }
        warn_zero_caps(&args.datadir, &settings);
        bridge.start().await?;
        // Stdin is the agent's: the held payments are decided with `approvals`.
        super::approvals::log_held(&bridge, &args.datadir, false);
        let watch = bridge.watch_settings();
        let publisher = publish_status(&args.datadir, &bridge, &host);
        let addr = bridge
            .listen_addr()
            .ok_or_else(|| CliError("the bridge's endpoint did not start".into()))?;
        tracing::info!(%addr, "this process is the bridge of its data directory");
        self.owned = Some(Owned {
            bridge,
            host,
            publisher,
            _watch: watch,
        });
        Ok(addr)
    }

    fn transport(
        &self,
        addr: SocketAddr,
        token: String,
    ) -> StreamableHttpClientTransport<reqwest::Client> {
        StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}{}", self.path))
                .auth_header(token),
        )
    }

    async fn find(&mut self) -> Result<StreamableHttpClientTransport<reqwest::Client>, CliError> {
        let datadir = &self.args.datadir;
        let deadline = Instant::now() + ATTACH_WAIT;
        loop {
            if let Some(owned) = &self.owned {
                let addr = owned
                    .bridge
                    .listen_addr()
                    .ok_or_else(|| CliError("the bridge's endpoint stopped".into()))?;
                return Ok(self.transport(addr, owned.bridge.settings().token));
            }
            if let Some(ownership) = Ownership::claim(datadir)? {
                self.start_owned(ownership).await?;
                continue;
            }
            if let Some(running) = running_bridge(datadir)?
                && let Some(endpoint) = running.endpoint
                && answers(endpoint.addr).await
            {
                let token = Settings::load(&datadir.join(SETTINGS_FILE))?.token;
                self.attached = Some(endpoint);
                tracing::info!(addr = %endpoint.addr, pid = endpoint.pid, "attached to the running bridge");
                return Ok(self.transport(endpoint.addr, token));
            }
            if Instant::now() >= deadline {
                return Err(CliError(format!(
                    "a bridge holds {} but serves no endpoint (is `enabled` false in mcpclient.json?)",
                    datadir.display()
                )));
            }
            tokio::time::sleep(ATTACH_RETRY).await;
        }
    }

    async fn close(self) {
        if let Some(owned) = self.owned {
            owned.bridge.close().await;
            owned.publisher.stop().await;
            // What was recorded is cleared on the client, not left for the next consumer.
            owned.host.flush_acks(brmcp_clientrpc::ACK_FLUSH_WAIT).await;
            owned.host.close();
        }
    }
}

impl Upstream for StdioUpstream<'_> {
    type Transport = StreamableHttpClientTransport<reqwest::Client>;

    async fn connect(&mut self) -> Result<Self::Transport, String> {
        self.find().await.map_err(|CliError(e)| e)
    }

    fn alive(&mut self) -> bool {
        if self.owned.is_some() {
            return true;
        }
        match running_bridge(&self.args.datadir) {
            Ok(Some(running)) => running.endpoint == self.attached,
            Ok(None) => false,
            // Unreadable for a moment: the requests themselves will tell.
            Err(_) => true,
        }
    }
}

/// Whether a listener accepts connections at `addr`.
async fn answers(addr: SocketAddr) -> bool {
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}

/// Serves `served` to the agent on this process's stdio through the data directory's
/// bridge, until the agent leaves.
pub(super) async fn run(args: BridgeArgs, served: Served) -> Result<ExitCode, CliError> {
    let settings = Settings::load(&args.datadir.join(SETTINGS_FILE))?;
    let path = endpoint_path(&settings, &served)?;
    crate::secure_fs::create_dir(&args.datadir)
        .map_err(|e| CliError(format!("{}: {e}", args.datadir.display())))?;
    let mut upstream = StdioUpstream {
        args: &args,
        path,
        owned: None,
        attached: None,
    };
    let stdio = rmcp::transport::IntoTransport::<
        rmcp::RoleServer,
        std::io::Error,
        rmcp::transport::async_rw::TransportAdapterAsyncRW,
    >::into_transport(rmcp::transport::stdio());
    let pumped = pump(stdio, &mut upstream).await;
    upstream.close().await;
    pumped.map_err(CliError)?;
    Ok(ExitCode::SUCCESS)
}
