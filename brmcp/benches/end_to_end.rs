//! Paid calls end to end, as a user runs them: `brmcp devnet`, `brmcp serve` on alice
//! and an autopay `brmcp bridge` on bob, each its own process, and agents calling the
//! paid `fortune` tool (10,000 atoms) over streamable HTTP. Every call is refused for
//! payment, tipped through the devnet, credited and answered: the whole paid path.
//!
//! Prints calls per second and the p50 and p99 latency of a call, for one agent
//! calling in sequence and for ten agents calling at once. A figure for the README,
//! not a goal: the processes share the machine with the agents.
//!
//! `cargo bench -p brmcp --bench end_to_end` (add `-- CALLS` for calls per agent).

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

#[path = "../tests/cli/processes.rs"]
#[allow(dead_code, unreachable_pub)]
mod processes;

use processes::{Procs, bridge_settings, brmcp, free_port, spawn, start_devnet, wait_for};

/// Calls each agent makes when no count is given.
const CALLS_PER_AGENT: usize = 100;

/// Agents calling at once in the second run.
const AGENTS: usize = 10;

/// Calls made before timing: the sessions, the bridge's link and the bot's first
/// tips are set up by then.
const WARM_UP_CALLS: usize = 5;

/// The bot's rate limit for the run: far above what the run reaches, so the figure is
/// the path's, not the limiter's.
const BOT_CALLS_PER_MINUTE: u32 = 1_000_000;

type Agent = RunningService<rmcp::RoleClient, ()>;

fn main() {
    let calls: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .and_then(|a| a.parse().ok())
        .unwrap_or(CALLS_PER_AGENT);
    let dir = tempfile::tempdir().expect("temporary directory");
    let (procs, url, token) = start(dir.path());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut agents = Vec::new();
        for _ in 0..AGENTS {
            agents.push(agent(&url, &token).await);
        }
        for _ in 0..WARM_UP_CALLS {
            fortune(&agents[0]).await;
        }
        let at = Instant::now();
        let mut one = Vec::with_capacity(calls);
        for _ in 0..calls {
            one.push(fortune(&agents[0]).await);
        }
        report("1 agent", &mut one, at.elapsed());

        let at = Instant::now();
        let runs = agents.iter().map(|a| async move {
            let mut took = Vec::with_capacity(calls);
            for _ in 0..calls {
                took.push(fortune(a).await);
            }
            took
        });
        let mut ten: Vec<Duration> = futures_util::future::join_all(runs)
            .await
            .into_iter()
            .flatten()
            .collect();
        report(&format!("{AGENTS} agents"), &mut ten, at.elapsed());
        for agent in agents {
            let _ = agent.cancel().await;
        }
    });
    drop(procs);
}

/// The devnet, serve and the bridge, started: the processes, the bot's URL at the
/// bridge and the agent token.
fn start(dir: &Path) -> (Procs, String, String) {
    let (mut procs, alice, _bob) = start_devnet(dir);
    let config = dir.join("alice").join("brmcp.json");
    let mut bot: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("brmcp.json"))
            .expect("brmcp.json is JSON");
    bot["calls_per_minute"] = json!(BOT_CALLS_PER_MINUTE);
    std::fs::write(&config, bot.to_string()).expect("write brmcp.json");
    let serve = spawn(
        &mut procs,
        brmcp(&[
            "serve",
            "--datadir",
            dir.join("alice").to_str().expect("utf-8"),
        ]),
    );
    wait_for(&serve, "serving echo and fortune");

    let bridge_dir = bridge_settings(dir, &alice, "autopay");
    let settings = Path::new(&bridge_dir).join("mcpclient.json");
    let mut caps: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&settings).expect("mcpclient.json"))
            .expect("mcpclient.json is JSON");
    // Every call of the run, with room: the devnet's wallets hold 10 DCR.
    caps["per_day_cap_atoms"] = json!(500_000_000);
    std::fs::write(&settings, caps.to_string()).expect("write mcpclient.json");
    let rpc = dir.join("bob").join("brmcp-serve.conf");
    let listen = format!("127.0.0.1:{}", free_port());
    let bridge = spawn(
        &mut procs,
        brmcp(&[
            "bridge",
            "--datadir",
            &bridge_dir,
            "--rpc-config",
            rpc.to_str().expect("utf-8"),
            "--listen",
            &listen,
        ]),
    );
    wait_for(&bridge, "Ctrl-C stops the bridge.");
    let shown = brmcp(&["bridge", "--datadir", &bridge_dir, "token", "show"])
        .output()
        .expect("token show");
    let token = String::from_utf8_lossy(&shown.stdout).trim().to_owned();
    (procs, format!("http://{listen}/mcp/{alice}"), token)
}

async fn agent(url: &str, token: &str) -> Agent {
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url.to_owned()).auth_header(token.to_owned()),
    );
    ().serve(transport)
        .await
        .expect("MCP session through the bridge")
}

/// One paid call, answered with a fortune: how long it took.
async fn fortune(agent: &Agent) -> Duration {
    let at = Instant::now();
    let result = agent
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .expect("fortune");
    assert_ne!(result.is_error, Some(true), "{result:?}");
    at.elapsed()
}

fn report(what: &str, took: &mut [Duration], elapsed: Duration) {
    took.sort_unstable();
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    println!(
        "end_to_end paid calls, {what}: {} calls in {:.1} s, {:.1} calls/s, p50 {:.1} ms, p99 {:.1} ms",
        took.len(),
        elapsed.as_secs_f64(),
        took.len() as f64 / elapsed.as_secs_f64(),
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
    );
}
