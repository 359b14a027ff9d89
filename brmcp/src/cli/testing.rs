//! What the subcommands' devnet tests share.

use std::time::Duration;

/// How often [`until`] checks.
const POLL: Duration = Duration::from_millis(25);

/// How many checks [`until`] makes before it fails: 30 s at [`POLL`], room for a devnet
/// round trip on a loaded machine.
const POLLS: u32 = 1200;

/// Waits until `check` holds; panics naming `what` when it never does.
pub(crate) async fn until(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..POLLS {
        if check() {
            return;
        }
        tokio::time::sleep(POLL).await;
    }
    panic!("timed out waiting for: {what}");
}

/// `brmcp.json` allowing only `caller`, as `serve`'s config of `node`, the bot.
pub(crate) fn allowing(
    node: &brmcp_devnet::NodeInfo,
    caller: &brmcp_devnet::NodeInfo,
) -> crate::server::ServeConfig {
    crate::server::ServeConfig::parse(
        &format!("{{\"allowed_uids\": [\"{}\"]}}", caller.uid_hex()),
        &node.dir.join("brmcp.json"),
    )
    .unwrap()
}

/// The CLI's bridge in `datadir` on `node`'s clientrpc, autopaying `bot` up to 20,000
/// atoms a call and 100,000 a day (waiting `tip_wait_secs` for a tip, else the default),
/// and an agent connected to it over HTTP.
pub(crate) async fn autopay_bridge(
    datadir: &std::path::Path,
    node: &brmcp_devnet::NodeInfo,
    bot: &brmcp_devnet::NodeInfo,
    tip_wait_secs: Option<u64>,
) -> (
    crate::bridge::Bridge,
    brmcp_clientrpc::ClientRpcHost,
    rmcp::service::RunningService<rmcp::service::RoleClient, ()>,
) {
    use rmcp::ServiceExt;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    use crate::bridge::{Mode, Settings};

    let listen = std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), 0);
    let (bridge, host) =
        crate::cli::bridge::start_bridge(datadir, &node.config_path, listen, false)
            .await
            .unwrap();
    let mut settings = Settings {
        enabled: true,
        mode: Mode::Autopay,
        per_call_cap_atoms: 20_000,
        per_day_cap_atoms: 100_000,
        allowed_bots: vec![bot.uid_hex()],
        ..Settings::default()
    };
    if let Some(secs) = tip_wait_secs {
        settings.tip_wait_secs = secs;
    }
    let settings = bridge.apply_settings(settings).await.unwrap();
    bridge.start().await.unwrap();
    let url = format!(
        "http://{}/mcp/{}",
        bridge.listen_addr().unwrap(),
        bot.uid_hex()
    );
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(settings.token),
    );
    let agent = ().serve(transport).await.unwrap();
    (bridge, host, agent)
}
