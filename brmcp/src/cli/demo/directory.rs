//! `brmcp demo --directory`: the discovery loop on a simulated network. A provider's
//! `brmcp serve` registers with a directory and pays its invoice; the directory crawls
//! the provider's catalog and makes its paid test call; the operator approves the
//! listing with an admin tool; the agent searches the directory through the bridge,
//! adds the bot it found (the user confirming) and calls the found tool, paying for it.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use brmcp_adapters::protocol::result_texts;
use brmcp_adapters::{PeerId, Router, RouterConfig};
use brmcp_clientrpc::{ACK_FLUSH_WAIT, Streams};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ElicitRequestParams,
    ElicitResult, ElicitationAction, Implementation,
};
use rmcp::service::{RequestContext, RoleClient};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientHandler, ErrorData, ServiceExt};
use serde_json::{Value, json};

use super::{short, start_demo_bridge, step, text_of, within};
use crate::bridge::{DirectoryEntry, Settings};
use crate::cli::CliError;
use crate::cli::devnet::{DIRECTORY_NICK, directory_policy, provider_config};
use crate::directory::{Directory, Outcome, State};
use crate::server::ServeConfig;
use brmcp_devnet::{Devnet, NodeInfo};

/// How often the demo looks at the registration's progress.
const PROGRESS_POLL: Duration = Duration::from_millis(100);

/// The name the user gives the directory in the bridge's settings.
const DIRECTORY_LABEL: &str = "demo";

/// The name the agent gives the bot it adds.
const BOT_NAME: &str = "fortunes";

/// The word the agent searches for.
const QUERY: &str = "fortune";

/// The agent's MCP client: it can ask the user (elicitation), and the demo's user
/// accepts, printing the question.
#[derive(Clone)]
struct ConsentingUser;

impl ClientHandler for ConsentingUser {
    fn get_info(&self) -> ClientConfig {
        let capabilities: ClientCapabilities =
            serde_json::from_value(json!({"elicitation": {"form": {}}})).unwrap_or_default();
        ClientConfig::new(capabilities, Implementation::new("brmcp-demo-agent", "1"))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        println!("  (the bridge asks the user: {message})");
        println!("  (the user accepts)");
        Ok(ElicitResult::new(ElicitationAction::Accept))
    }
}

/// `tools/call` of `name` with `args` (an object).
fn call(name: &str, args: Value) -> CallToolRequestParams {
    CallToolRequestParams::new(name.to_owned())
        .with_arguments(args.as_object().cloned().unwrap_or_default())
}

/// A tool's answer, failing the step when it is an error.
fn answer(what: &str, result: &CallToolResult) -> Result<String, CliError> {
    let text = text_of(result);
    if result.is_error == Some(true) {
        return Err(CliError(format!("{what}: {text}")));
    }
    Ok(text)
}

/// The JSON of a directory tool's answer (its first text content).
fn answer_json(what: &str, result: &CallToolResult) -> Result<Value, CliError> {
    answer(what, result)?;
    result_texts(result)
        .find_map(|t| serde_json::from_str(t).ok())
        .ok_or_else(|| CliError(format!("{what}: no JSON in the answer")))
}

fn state_name(state: State) -> String {
    json!(state).as_str().unwrap_or("?").to_owned()
}

/// The four nodes of the demo.
struct Nodes {
    provider: NodeInfo,
    agent: NodeInfo,
    operator: NodeInfo,
    directory: NodeInfo,
}

pub(super) async fn demo(dir: &Path) -> Result<ExitCode, CliError> {
    println!("== brmcp demo --directory: finding a paid tool through a verifying directory");
    let devnet = Devnet::start(
        dir.join("devnet"),
        &["alice", "bob", "carol", DIRECTORY_NICK],
    )
    .await?;
    let nodes = match <[NodeInfo; 4]>::try_from(devnet.nodes()) {
        Ok([provider, agent, operator, directory]) => Nodes {
            provider,
            agent,
            operator,
            directory,
        },
        Err(_) => return Err(CliError("the devnet did not start four nodes".into())),
    };
    let result = discovery(&devnet, &nodes, dir).await;
    devnet.shutdown().await;
    result
}

async fn discovery(devnet: &Devnet, n: &Nodes, dir: &Path) -> Result<ExitCode, CliError> {
    let Nodes {
        provider,
        agent,
        operator,
        directory: d,
    } = n;
    let provider_id = PeerId::from_bytes(provider.uid);
    println!(
        "devnet: alice {} provides tools; bob {} runs the agent's bridge; carol {} operates the directory {}",
        short(&provider.uid_hex()),
        short(&agent.uid_hex()),
        short(&operator.uid_hex()),
        short(&d.uid_hex()),
    );

    // 1. The directory, carol its operator.
    let policy = directory_policy(Some(&operator.uid_hex()));
    let fee = policy.listing_fee_atoms;
    let running = within(
        "start the directory",
        super::super::directory::start_directory(&d.dir, &d.config_path, policy),
    )
    .await?;
    let directory = &running.directory;
    println!(
        "\n[1] directory {} up on {}: listing fee {fee} atoms, snapshot key {}",
        directory.policy().name,
        short(&d.uid_hex()),
        &directory.public_key()[..16]
    );

    // 2. The provider registers at startup and pays the invoice.
    let listed_before = directory.entry(&provider_id)?.live.is_some();
    let config = provider_config(&[agent.uid_hex()], Some(&d.uid_hex()));
    let config = ServeConfig::parse(
        &config.to_string(),
        &provider.dir.join(super::super::serve::SERVE_CONFIG),
    )?;
    let provider_host = super::super::serve::host_from(&provider.config_path)?;
    let provider_before = devnet.balance(&provider.uid);
    let (harness, _upstreams) = within(
        "start the provider",
        super::super::serve::start_serving(&provider.dir, &config, &provider_host),
    )
    .await?;
    println!(
        "\n[2] provider alice: brmcp serve registers with the directory at startup (its test: fortune, up to {} atoms), paying the invoice within its auto-fund caps",
        super::super::serve::FORTUNE_ATOMS
    );

    // 3 and 4. Verified and approved, unless an earlier run in this directory listed
    // alice already (her registrant leaves a fresh listing alone).
    if listed_before {
        println!(
            "\n[3] alice is listed already (an earlier run in {}): her registrant leaves the fresh listing alone",
            dir.display()
        );
    } else {
        verify(directory, provider_id).await?;
        approve(operator, d, provider).await?;
    }

    // 5. The agent finds the tool through the bridge's directory tools and adds the bot.
    let allowed = Settings {
        directories: vec![DirectoryEntry::new(
            PeerId::from_bytes(d.uid),
            Some(DIRECTORY_LABEL.to_owned()),
        )],
        ..Settings::default()
    };
    let (bridge, agent_host, settings, addr) =
        start_demo_bridge(&dir.join("bob-bridge"), &agent.config_path, allowed).await?;
    let connect = |path: String| {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}{path}"))
                .auth_header(settings.token.clone()),
        );
        ConsentingUser.serve(transport)
    };
    println!(
        "\n[5] agent -> http://{addr}/mcp/directory (bob's bridge, directory {DIRECTORY_LABEL:?})"
    );
    let finder = step(
        "connect to the directory tools",
        connect("/mcp/directory".into()),
    )
    .await?;
    println!("agent -> directory_search {{\"query\": \"{QUERY}\"}}");
    let found = step(
        "directory_search",
        finder.call_tool(call("directory_search", json!({"query": QUERY}))),
    )
    .await?;
    let found_text = answer("directory_search", &found)?;
    println!("  <- {}", first_text(&found));
    if !found_text.contains(&provider.uid_hex()) {
        return Err(CliError(format!(
            "the search did not find alice: {found_text}"
        )));
    }
    println!(
        "agent -> directory_add_bot {{\"uid\": \"{}\", \"name\": \"{BOT_NAME}\"}}",
        short(&provider.uid_hex())
    );
    let added = step(
        "directory_add_bot",
        finder.call_tool(call(
            "directory_add_bot",
            json!({"uid": provider.uid_hex(), "name": BOT_NAME}),
        )),
    )
    .await?;
    answer("directory_add_bot", &added)?;
    println!("  <- {}", first_text(&added));
    let _ = finder.cancel().await;

    // 6. The agent calls the tool it found, paying for it.
    let bot = step(
        "connect to the added bot",
        connect(format!("/mcp/{}", provider.uid_hex())),
    )
    .await?;
    println!(
        "\n[6] agent -> tools/call fortune ({} atoms) on the added bot",
        super::super::serve::FORTUNE_ATOMS
    );
    // A reused `--dir` keeps the spend log of earlier runs: only entries added from
    // here on are this call's.
    let logged_before = bridge.spend_log()?.0.len();
    let fortune = step("call fortune", bot.call_tool(call("fortune", json!({})))).await?;
    println!("  <- {}", answer("call fortune", &fortune)?);
    let _ = bot.cancel().await;
    let (spend, today) = bridge.spend_log()?;
    let paid_now = spend.get(logged_before..).unwrap_or_default();
    for payment in paid_now {
        println!(
            "  (the bridge tipped {} atoms ({:?}) to {} and reissued the call)",
            payment.atoms,
            payment.status,
            short(&payment.bot)
        );
    }
    let provider_after = devnet.balance(&provider.uid);
    println!(
        "\nalice's wallet (milliatoms): {provider_before} -> {provider_after} (paid the directory, paid by its test and by the agent)"
    );
    println!(
        "bridge spend log: {} payment(s), {today} atoms in the last 24 hours",
        spend.len()
    );

    bridge.close().await;
    agent_host.close();
    harness.close();
    provider_host.close();
    running.close().await;
    if paid_now.is_empty() {
        return Err(CliError("the agent's call was not paid for".into()));
    }
    println!(
        "\ndemo complete: alice was listed after a paid test and approval; the agent found, added and paid for her tool"
    );
    Ok(ExitCode::SUCCESS)
}

/// Step 3: the directory's pipeline, as it goes (funding, crawl, paid test), up to
/// the review queue with a passed test.
async fn verify(directory: &Directory, provider_id: PeerId) -> Result<(), CliError> {
    println!("\n[3] the directory verifies alice:");
    let reg = within("verify the provider", async {
        let mut last = None;
        loop {
            let reg = directory.entry(&provider_id)?.reg;
            let state = reg.as_ref().map(|r| r.state);
            if state != last {
                if let Some(state) = state {
                    println!("  registration: {}", state_name(state));
                }
                last = state;
            }
            if let Some(reg) = reg
                && reg.state == State::PendingReview
            {
                return Ok(reg);
            }
            tokio::time::sleep(PROGRESS_POLL).await;
        }
    })
    .await?;
    // The catalog is the provider's `tools/list` answer as crawled.
    let tools = reg
        .catalog
        .as_ref()
        .and_then(|c| c.get("tools").unwrap_or(c).as_array())
        .map_or(0, Vec::len);
    println!(
        "  crawled {tools} tool(s); paid test of {}: {} ({} atoms paid); fee {} atoms",
        reg.test.tool,
        match reg.test_outcome {
            Some(Outcome::Ok) => "ok",
            Some(Outcome::Failed) => "failed",
            None => "not run",
        },
        reg.paid_atoms,
        reg.fee_atoms
    );
    if reg.test_outcome != Some(Outcome::Ok) {
        return Err(CliError(format!(
            "the directory's paid test failed: {}",
            reg.test_err
        )));
    }

    Ok(())
}

/// Step 4: the operator reviews and approves, with the admin tools.
async fn approve(operator: &NodeInfo, d: &NodeInfo, provider: &NodeInfo) -> Result<(), CliError> {
    let operator_host = super::super::serve::host_from(&operator.config_path)?;
    let operator_router = Router::new(operator_host.clone(), RouterConfig::client());
    super::super::serve::connect(&operator_host, Streams::new().pms(operator_router.clone()))
        .await?;
    let transport = operator_router
        .dial(PeerId::from_bytes(d.uid))
        .map_err(|e| CliError(format!("dial the directory: {e}")))?;
    let admin = step("the operator connects", ().serve(transport)).await?;
    println!("\n[4] operator carol -> pending_registrations");
    let pending = step(
        "pending_registrations",
        admin.call_tool(call("pending_registrations", json!({}))),
    )
    .await?;
    let pending_result = pending;
    let pending = answer_json("pending_registrations", &pending_result)?;
    let listed = pending["registrations"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|p| p["uid"] == provider.uid_hex() && p["testOutcome"] == "ok");
    println!("  <- {}", first_text(&pending_result));
    if !listed {
        return Err(CliError(
            "alice is not pending review with a passed test".into(),
        ));
    }
    println!("operator carol -> approve {}", short(&provider.uid_hex()));
    let approved = step(
        "approve",
        admin.call_tool(call("approve", json!({"uid": provider.uid_hex()}))),
    )
    .await?;
    println!("  <- {}", answer("approve", &approved)?);
    let _ = admin.cancel().await;
    // The directory's answers were handled: cleared on the client, not left for a
    // next consumer.
    operator_host.flush_acks(ACK_FLUSH_WAIT).await;
    operator_router.close();
    operator_host.close();

    Ok(())
}

/// The first text of a tool's answer (the bridge's rendering, before its JSON).
fn first_text(result: &CallToolResult) -> String {
    result_texts(result).next().unwrap_or_default().to_owned()
}
