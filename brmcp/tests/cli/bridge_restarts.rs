//! `brmcp bridge` killed (SIGKILL) and started again, over and over, against one
//! `brmcp serve` on a devnet: every run's call succeeds, and every run goes on with the
//! session the first one opened (the saved sid stays, each run under the next epoch)
//! instead of opening another one on the bot.

use std::path::Path;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use super::processes::{
    Procs, bridge_settings, brmcp, free_port, http_bridge, spawn, start_devnet, wait_for,
};

/// Runs of the bridge process: past the bot's per-peer session bound (8).
const RUNS: u64 = 10;

/// The session the bridge saved for `bot`: its sid and epoch.
fn saved(bridge_dir: &Path, bot: &str) -> (String, u64) {
    let path = bridge_dir.join("sessions").join(format!("{bot}.json"));
    let saved: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("saved session")).expect("JSON");
    (
        saved["sid"].as_str().expect("sid").to_owned(),
        saved["epoch"].as_u64().expect("epoch"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_bridge_goes_on_with_its_session() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut procs, alice, _bob) = start_devnet(dir.path());
    let serve = spawn(
        &mut procs,
        brmcp(&[
            "serve",
            "--datadir",
            dir.path().join("alice").to_str().expect("utf-8"),
        ]),
    );
    wait_for(&serve, "serving echo and fortune");
    let bridge_dir = bridge_settings(dir.path(), &alice, "autopay");
    let token = String::from_utf8_lossy(
        &brmcp(&["bridge", "--datadir", &bridge_dir, "token", "show"])
            .output()
            .expect("token show")
            .stdout,
    )
    .trim()
    .to_owned();
    let rpc = dir.path().join("bob").join("brmcp-serve.conf");

    let mut first_sid = None;
    for run in 0..RUNS {
        let mut bridge = Procs(Vec::new());
        let listen = format!("127.0.0.1:{}", free_port());
        let lines = spawn(&mut bridge, http_bridge(&bridge_dir, &rpc, &listen));
        wait_for(&lines, "Ctrl-C stops the bridge.");
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/{alice}"))
                .auth_header(token.clone()),
        );
        let client = ().serve(transport).await.expect("MCP session");
        let said = format!("run {run}");
        let echo = client
            .call_tool(
                CallToolRequestParams::new("echo").with_arguments(
                    json!({ "text": said })
                        .as_object()
                        .cloned()
                        .unwrap_or_default(),
                ),
            )
            .await
            .unwrap_or_else(|e| panic!("run {run}: {e}"));
        assert_eq!(
            echo.structured_content,
            Some(json!({ "echo": said })),
            "run {run}"
        );
        let (sid, epoch) = saved(Path::new(&bridge_dir), &alice);
        assert_eq!(
            *first_sid.get_or_insert(sid.clone()),
            sid,
            "run {run}: the same session"
        );
        assert_eq!(epoch, run, "run {run}: the next epoch");
        // SIGKILL: nothing of the run reaches the bot.
        drop(bridge);
        drop(client);
    }
}
