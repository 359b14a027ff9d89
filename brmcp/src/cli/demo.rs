//! `brmcp demo`: one command, nothing to set up. A simulated Bison Relay network with two
//! clients, the example bot on one, a bridge in autopay mode on the other, and an MCP
//! client that lists the tools, calls the free one, and calls the paid one (the bot
//! answers payment_required, the bridge tips, the bot credits the tip, the bridge
//! reissues the call, the result comes back).
//!
//! With `--upstream "<command>"` the bot sells that stdio MCP server instead, every
//! tool at `--price` atoms: the agent lists its tools with their prices and calls the
//! first one that needs no arguments, paying for it the same way.
//!
//! With `--directory`, the discovery loop instead ([`directory`]): a provider
//! registers with a directory, which verifies it with a paid test; an operator
//! approves it; the agent finds it through the bridge, adds it and pays for its tool.

mod announce;
mod directory;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

use super::CliError;
use brmcp_adapters::protocol::result_text;
use brmcp_clientrpc::ClientRpcHost;

use crate::bridge::{Bridge, Mode, Settings};
use crate::server::ServeConfig;
use brmcp_devnet::Devnet;

/// Spending caps of the demo's bridge: enough for a few fortunes, no more.
const DEMO_PER_CALL_CAP_ATOMS: u64 = 100_000;
const DEMO_PER_DAY_CAP_ATOMS: u64 = 1_000_000;

/// Bound on each step of the demo, so a broken setup fails instead of hanging.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The default price of each tool of `--upstream`: a tenth of the example fortune.
const DEMO_UPSTREAM_PRICE_ATOMS: u64 = 1_000;

/// How often the agent lists again while the upstream is still starting.
const UPSTREAM_POLL: Duration = Duration::from_millis(250);

#[derive(Debug, Args)]
pub(super) struct DemoArgs {
    /// Leave the bridge running and print its URL and token for a real agent.
    #[arg(long)]
    keep_running: bool,
    /// Directory for the simulated network's files (default: a fresh temporary one).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Sell this stdio MCP server instead of the example tools: a program and its
    /// arguments, split at whitespace (no shell quoting), e.g.
    /// "npx -y @modelcontextprotocol/server-everything".
    #[arg(long, value_name = "COMMAND")]
    upstream: Option<String>,
    /// The price of each tool of --upstream, in atoms.
    #[arg(long, value_name = "ATOMS", default_value_t = DEMO_UPSTREAM_PRICE_ATOMS, requires = "upstream")]
    price: u64,
    /// Show the discovery loop instead: a provider listed by a verifying directory,
    /// found, added and paid by the agent.
    #[arg(long, conflicts_with_all = ["upstream", "keep_running"])]
    directory: bool,
    /// Show announcements instead: the bot announces itself in a post, a bridge that
    /// subscribes to its posts discovers it, the user adds it and the agent pays it.
    #[arg(long, conflicts_with_all = ["upstream", "keep_running", "directory"])]
    announce: bool,
}

/// The demo's log: its transcript shows the MCP exchange and the money itself, so the
/// log adds only what went wrong (`--log-level info` brings every line back).
const DEMO_LOG_LEVEL: &str = "warn";

pub(super) fn run(args: DemoArgs) -> Result<ExitCode, CliError> {
    super::log::command_default(DEMO_LOG_LEVEL)?;
    let (dir, temporary) = match args.dir {
        Some(dir) => (dir, false),
        None => {
            let dir = std::env::temp_dir().join(format!("brmcp-demo-{}", std::process::id()));
            (dir, true)
        }
    };
    let upstream = match &args.upstream {
        None => None,
        Some(line) => {
            let mut words = line.split_whitespace().map(str::to_owned);
            let command = words
                .next()
                .ok_or_else(|| CliError("--upstream: no command given".into()))?;
            Some(serde_json::json!([{
                "name": "upstream",
                "command": command,
                "args": words.collect::<Vec<_>>(),
                "default_price_atoms": args.price,
                "resources": true,
                "prompts": true,
            }]))
        }
    };
    let result = if args.directory {
        super::runtime()?.block_on(directory::demo(&dir))
    } else if args.announce {
        super::runtime()?.block_on(announce::demo(&dir))
    } else {
        super::runtime()?.block_on(demo(&dir, args.keep_running, upstream))
    };
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

async fn step<T, E: std::fmt::Display>(
    what: &str,
    fut: impl Future<Output = Result<T, E>>,
) -> Result<T, CliError> {
    match tokio::time::timeout(STEP_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(CliError(format!("{what}: {e}"))),
        Err(_) => Err(CliError(format!("{what}: no answer in {STEP_TIMEOUT:?}"))),
    }
}

/// As [`step`], for steps that already speak [`CliError`].
async fn within<T>(
    what: &str,
    fut: impl Future<Output = Result<T, CliError>>,
) -> Result<T, CliError> {
    tokio::time::timeout(STEP_TIMEOUT, fut)
        .await
        .map_err(|_| CliError(format!("{what}: no answer in {STEP_TIMEOUT:?}")))?
}

/// Starts the demo's bridge in `bridge_dir` on the client of `rpc_config`, with the
/// bots and directories of `allowed`, in autopay mode under the demo caps, listening
/// on a loopback port: the bridge, its client, its settings and its address.
async fn start_demo_bridge(
    bridge_dir: &Path,
    rpc_config: &Path,
    allowed: Settings,
) -> Result<(Bridge, ClientRpcHost, Settings, SocketAddr), CliError> {
    let listen = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), 0);
    let (bridge, host) = within(
        "start the bridge",
        super::bridge::start_bridge(bridge_dir, rpc_config, listen, false),
    )
    .await?;
    let settings = Settings {
        enabled: true,
        mode: Mode::Autopay,
        per_call_cap_atoms: DEMO_PER_CALL_CAP_ATOMS,
        per_day_cap_atoms: DEMO_PER_DAY_CAP_ATOMS,
        ..allowed
    };
    let settings = bridge.apply_settings(settings).await?;
    bridge.start().await?;
    let addr = bridge
        .listen_addr()
        .ok_or_else(|| CliError("the bridge's HTTP endpoint did not start".into()))?;
    Ok((bridge, host, settings, addr))
}

fn text_of(result: &CallToolResult) -> String {
    if let Some(s) = &result.structured_content {
        return s.to_string();
    }
    result_text(result)
}

/// A devnet in `dir` with nodes alice and bob, said with what each `does`.
async fn alice_and_bob(
    dir: &Path,
    does: (&str, &str),
) -> Result<(Devnet, brmcp_devnet::NodeInfo, brmcp_devnet::NodeInfo), CliError> {
    let devnet = Devnet::start(dir.join("devnet"), &["alice", "bob"]).await?;
    let (alice, bob) = match devnet.nodes().as_slice() {
        [a, b] => (a.clone(), b.clone()),
        _ => return Err(CliError("the devnet did not start two nodes".into())),
    };
    println!(
        "devnet: alice {} {}; bob {} {}",
        short(&alice.uid_hex()),
        does.0,
        short(&bob.uid_hex()),
        does.1
    );
    Ok((devnet, alice, bob))
}

async fn demo(
    dir: &Path,
    keep_running: bool,
    upstreams: Option<serde_json::Value>,
) -> Result<ExitCode, CliError> {
    println!("== brmcp demo: MCP over (simulated) Bison Relay, paid with tips");
    let (devnet, alice, bob) = alice_and_bob(dir, ("serves tools", "runs the bridge")).await?;

    // The bot on alice, callable by bob: echo (free) and fortune (paid), or the
    // upstream's tools.
    let serve_dir = alice.dir.clone();
    let mut config = json!({"allowed_uids": [bob.uid_hex()], "calls_per_minute": 30});
    let upstream = upstreams.is_some();
    if let Some(upstreams) = upstreams {
        config["upstreams"] = upstreams;
    }
    let config = ServeConfig::parse(
        &config.to_string(),
        &serve_dir.join(super::serve::SERVE_CONFIG),
    )?;
    let host_a = super::serve::host_from(&alice.config_path)?;
    let (harness, _upstreams) = within(
        "start the bot",
        super::serve::start_serving(&serve_dir, &config, &host_a),
    )
    .await?;

    // The bridge on bob, in autopay mode with caps.
    let allowed = Settings {
        allowed_bots: vec![alice.uid_hex()],
        ..Settings::default()
    };
    let (bridge, host_b, settings, addr) =
        start_demo_bridge(&dir.join("bob-bridge"), &bob.config_path, allowed).await?;
    let url = format!("http://{addr}/mcp/{}", alice.uid_hex());
    println!(
        "bridge: {url} (autopay, caps {DEMO_PER_CALL_CAP_ATOMS} atoms per call, {DEMO_PER_DAY_CAP_ATOMS} per day)"
    );

    // An MCP client, as an agent would connect.
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.clone())
            .auth_header(settings.token.clone()),
    );
    let client = step("connect the MCP client", ().serve(transport)).await?;
    let wallet = |uid: &[u8; 32]| devnet.balance(uid);
    let (alice_before, bob_before) = (wallet(&alice.uid), wallet(&bob.uid));
    let calls_ok = if upstream {
        upstream_calls(&client).await?
    } else {
        example_calls(&client).await?
    };
    let (spend, today) = bridge.spend_log()?;
    for payment in &spend {
        println!(
            "  (the bot answered payment_required; the bridge tipped {} atoms ({:?}) and reissued the call)",
            payment.atoms, payment.status
        );
    }
    let (alice_after, bob_after) = (wallet(&alice.uid), wallet(&bob.uid));
    let credit = step(
        "read the bot's ledger",
        harness.balance_matoms(brmcp_adapters::PeerId::from_bytes(bob.uid)),
    )
    .await?;
    println!(
        "\nwallets (milliatoms): alice {alice_before} -> {alice_after}, bob {bob_before} -> {bob_after}"
    );
    println!("bot ledger: bob's remaining credit {credit} matoms");
    println!(
        "bridge spend log: {} payment(s), {today} atoms in the last 24 hours",
        spend.len()
    );

    let ok = calls_ok && alice_after > alice_before;
    if keep_running {
        println!("\nThe bridge stays up for a real agent:");
        println!("  URL:   {url}");
        println!("  token: {}", settings.token);
        println!("Ctrl-C stops.");
        super::wait_for_interrupt().await;
    }
    let _ = client.cancel().await;
    bridge.close().await;
    host_b.close();
    harness.close();
    host_a.close();
    devnet.shutdown().await;
    if ok {
        if upstream {
            println!("\ndemo complete: a paid call to the upstream crossed Bison Relay");
        } else {
            println!("\ndemo complete: a free call and a paid call crossed Bison Relay");
        }
        Ok(ExitCode::SUCCESS)
    } else {
        Err(CliError("the demo's calls did not both succeed".into()))
    }
}

fn print_tools(tools: &[Tool]) {
    println!("\nagent -> tools/list");
    for tool in tools {
        let price = tool
            .meta
            .as_ref()
            .and_then(|m| m.get(crate::server::PRICE_META))
            .map_or_else(|| "?".into(), ToString::to_string);
        println!(
            "  {:<8} {} atoms  {}",
            tool.name,
            price,
            tool.description.as_deref().unwrap_or("")
        );
    }
}

/// The example bot's calls: echo (free), then fortune (paid). Whether both succeeded.
async fn example_calls(client: &RunningService<RoleClient, ()>) -> Result<bool, CliError> {
    print_tools(&step("tools/list", client.list_all_tools()).await?);
    println!("\nagent -> tools/call echo {{\"text\": \"hello over Bison Relay\"}}");
    let echo = step(
        "call echo",
        client.call_tool(
            CallToolRequestParams::new("echo").with_arguments(
                json!({"text": "hello over Bison Relay"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        ),
    )
    .await?;
    println!("  <- {}", text_of(&echo));
    println!("\nagent -> tools/call fortune (10000 atoms)");
    let fortune = step(
        "call fortune",
        client.call_tool(CallToolRequestParams::new("fortune")),
    )
    .await?;
    println!("  <- {}", text_of(&fortune));
    Ok(fortune.is_error != Some(true) && echo.is_error != Some(true))
}

/// The upstream's calls: its tools once it is up, then a harmless one (see
/// [`harmless_call`]). Whether that call succeeded.
async fn upstream_calls(client: &RunningService<RoleClient, ()>) -> Result<bool, CliError> {
    let tools = within("the upstream's tools/list", async {
        loop {
            let tools = client.list_all_tools().await?;
            if !tools.is_empty() {
                return Ok(tools);
            }
            tokio::time::sleep(UPSTREAM_POLL).await;
        }
    })
    .await?;
    print_tools(&tools);
    let Some((tool, arguments)) = harmless_call(&tools) else {
        return Err(CliError(
            "the upstream has no echo and no tool that takes only text arguments: nothing \
             harmless to call"
                .into(),
        ));
    };
    println!(
        "\nagent -> tools/call {} {}",
        tool.name,
        serde_json::Value::Object(arguments.clone())
    );
    let result = step(
        "call the upstream's tool",
        client.call_tool(CallToolRequestParams::new(tool.name.clone()).with_arguments(arguments)),
    )
    .await?;
    println!("  <- {}", text_of(&result));
    Ok(result.is_error != Some(true))
}

/// The text the demo passes for each argument of the upstream tool it calls.
const DEMO_TEXT: &str = "hello over Bison Relay";

/// What the demo calls on an upstream: its echo when it has one, else the first tool
/// whose required arguments are all text and whose name does not suggest it reveals
/// the environment (a demo's transcript is shown and shared; an `env` tool would print
/// the operator's secrets). Each required argument gets [`DEMO_TEXT`].
fn harmless_call(tools: &[Tool]) -> Option<(&Tool, serde_json::Map<String, serde_json::Value>)> {
    let text_only = |tool: &Tool| {
        let required = tool
            .input_schema
            .get("required")
            .and_then(serde_json::Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        let properties = tool
            .input_schema
            .get("properties")
            .and_then(serde_json::Value::as_object);
        let mut arguments = serde_json::Map::new();
        for name in required {
            let name = name.as_str()?;
            let kind = properties?.get(name)?.get("type")?.as_str()?;
            if kind != "string" {
                return None;
            }
            arguments.insert(name.to_owned(), DEMO_TEXT.into());
        }
        Some(arguments)
    };
    let echo = tools
        .iter()
        .filter(|t| t.name.to_ascii_lowercase().ends_with("echo"))
        .find_map(|t| text_only(t).map(|a| (t, a)));
    echo.or_else(|| {
        tools
            .iter()
            .filter(|t| !t.name.to_ascii_lowercase().contains("env"))
            .find_map(|t| text_only(t).map(|a| (t, a)))
    })
}

fn short(hex: &str) -> &str {
    &hex[..16.min(hex.len())]
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    fn tool(name: &str, schema: serde_json::Value) -> Tool {
        let serde_json::Value::Object(schema) = schema else {
            panic!("an object schema");
        };
        Tool::new(name.to_owned(), "", Arc::new(schema))
    }

    #[test]
    fn the_upstream_demo_calls_an_echo_never_an_environment_dump() {
        let none = json!({"type": "object"});
        let message = json!({"type": "object", "properties": {"message": {"type": "string"}},
            "required": ["message"]});
        let numbers = json!({"type": "object", "properties": {"a": {"type": "number"}},
            "required": ["a"]});
        let everything = [
            tool("get-env", none.clone()),
            tool("get-sum", numbers.clone()),
            tool("echo", message),
            tool("get-tiny-image", none.clone()),
        ];
        let (chosen, arguments) = harmless_call(&everything).unwrap();
        assert_eq!(chosen.name, "echo");
        assert_eq!(
            serde_json::Value::Object(arguments),
            json!({"message": DEMO_TEXT})
        );

        let no_echo = [
            tool("printEnv", none.clone()),
            tool("get-sum", numbers.clone()),
            tool("get-tiny-image", none),
        ];
        let (chosen, arguments) = harmless_call(&no_echo).unwrap();
        assert_eq!(chosen.name, "get-tiny-image");
        assert!(arguments.is_empty());

        assert!(harmless_call(&[tool("get-sum", numbers)]).is_none());
    }
}
