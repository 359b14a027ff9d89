//! `brmcp demo --announce`: a bot announces itself in a post, a bridge on another node
//! that subscribes to its posts discovers it, the user adds it, and the agent pays for
//! a call of the tool it found.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use brmcp_adapters::protocol::Announcement;
use brmcp_adapters::{Clock as _, PeerId, SystemClock};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use super::{example_calls, short, start_demo_bridge, step, within};
use crate::bridge::Settings;
use crate::bridge::announcements::Announcements;
use crate::cli::CliError;
use crate::server::ServeConfig;

/// How often the demo looks for the announcement in the bridge's file.
const DISCOVER_POLL: Duration = Duration::from_millis(200);

fn now_secs() -> u64 {
    u64::try_from(SystemClock.now().secs()).unwrap_or(0)
}

pub(super) async fn demo(dir: &Path) -> Result<ExitCode, CliError> {
    println!("== brmcp demo --announce: a bot announces itself in a Bison Relay post");
    let (devnet, alice, bob) =
        super::alice_and_bob(dir, ("runs a bot", "runs a bridge that does not know it")).await?;

    let config = json!({"allowed_uids": [bob.uid_hex()], "calls_per_minute": 30});
    let config = ServeConfig::parse(
        &config.to_string(),
        &alice.dir.join(crate::cli::serve::SERVE_CONFIG),
    )?;
    let host_a = crate::cli::serve::host_from(&alice.config_path)?;
    let (harness, _upstreams) = within(
        "start the bot",
        crate::cli::serve::start_serving(&alice.dir, &config, &host_a),
    )
    .await?;

    // Bob's bridge, with no bots, subscribed to alice's posts.
    let bridge_dir = dir.join("bob-bridge");
    let (bridge, host_b, settings, addr) =
        start_demo_bridge(&bridge_dir, &bob.config_path, Settings::default()).await?;
    step(
        "subscribe to alice's posts",
        host_b.subscribe_to_posts(&alice.uid_hex()),
    )
    .await?;
    println!("bridge: bob subscribed to alice's posts");

    // Alice's operator: `brmcp serve announce`, published as a post.
    let alice_uid = PeerId::from_bytes(alice.uid);
    // The tools as its callers see them listed.
    let caller = PeerId::from_bytes(bob.uid);
    let (tools, _) = crate::cli::serve::announce::announced_tools(&harness.tools_for(&caller));
    let text = Announcement {
        uid: alice_uid,
        name: "fortunes".into(),
        description: "fortunes on demand".into(),
        issued_secs: now_secs(),
        tools,
    }
    .render()
    .map_err(|e| CliError(format!("write the announcement: {e}")))?;
    println!("\nalice posts (brmcp serve announce):");
    for line in text.lines() {
        println!("  | {line}");
    }
    devnet.publish_post(alice.id, &text)?;

    // Bob's bridge keeps it; `bots discover` would list it.
    let deadline = Instant::now() + super::STEP_TIMEOUT;
    let found = loop {
        let store =
            Announcements::load(&bridge_dir, now_secs()).map_err(|e| CliError(e.to_string()))?;
        if let Some(found) = store.of(&alice_uid, now_secs()) {
            break found.announcement.clone();
        }
        if Instant::now() > deadline {
            return Err(CliError(
                "the announcement did not reach the bridge in time".into(),
            ));
        }
        tokio::time::sleep(DISCOVER_POLL).await;
    };
    println!("\nbob's bridge discovered (brmcp bridge bots discover):");
    println!("  {} {:?}: {}", found.uid, found.name, found.description);
    for tool in &found.tools {
        println!("    {}: {}", tool.name, tool.describe_price());
    }

    // The user's consent: `bots add`, then the agent uses it.
    bridge.add_bot("fortunes", alice_uid).await?;
    println!("\nuser -> bots add fortunes {}", short(&alice.uid_hex()));
    let url = format!("http://{addr}/mcp/fortunes");
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(settings.token.clone()),
    );
    let client = step("connect the MCP client", ().serve(transport)).await?;
    let ok = example_calls(&client).await?;
    let (spend, _) = bridge.spend_log()?;
    for payment in &spend {
        println!(
            "  (the bridge tipped {} atoms ({:?}))",
            payment.atoms, payment.status
        );
    }
    let _ = client.cancel().await;
    bridge.close().await;
    host_b.close();
    harness.close();
    host_a.close();
    devnet.shutdown().await;
    if ok && !spend.is_empty() {
        println!("\ndemo complete: an announced bot was discovered, added and paid");
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError(
            "the announced bot's calls did not both succeed".into(),
        ))
    }
}
