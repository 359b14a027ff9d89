//! The operator's view of running processes: `brmcp serve status` and `brmcp bridge
//! status` after traffic (non-zero counters, totals, the connection), `brmcp.json`
//! edited while serving (one info line, a removed caller refused and logged, SIGHUP
//! rereading it), a lost clientrpc connection shown and logged and its reconnect
//! logged, and "not running" once the processes are
//! SIGKILLed and their snapshots go stale.

use std::path::Path;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use super::processes::{brmcp, spawn, start_bridge, start_devnet, wait_for};

/// `brmcp <role> --datadir <dir> status [--json]`: exit code and stdout.
fn status(role: &str, dir: &Path, json: bool) -> (i32, String) {
    let mut args = vec![role, "--datadir", dir.to_str().expect("utf-8"), "status"];
    if json {
        args.push("--json");
    }
    let out = brmcp(&args).output().expect("brmcp status");
    let code = out.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&out.stdout).into_owned())
}

fn status_json(role: &str, dir: &Path) -> Value {
    let (_, out) = status(role, dir, true);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{role} status --json: {e}: {out}"))
}

/// Polls `role`'s JSON status until `check` holds (up to 30 s).
async fn until_status(role: &str, dir: &Path, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    for _ in 0..300 {
        last = status_json(role, dir);
        if check(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{role} status never showed {what}: {last:#}");
}

/// Polls the log file until it holds a line with every one of `words` (up to 30 s).
async fn until_logged(path: &Path, words: &[&str]) -> String {
    let mut text = String::new();
    for _ in 0..300 {
        text = std::fs::read_to_string(path).unwrap_or_default();
        if text.lines().any(|l| words.iter().all(|w| l.contains(w))) {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no line with {words:?} in {}:\n{text}", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_log_lines_of_running_serve_and_bridge_processes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let (mut procs, alice, bob) = start_devnet(dir);
    let alice_dir = dir.join("alice");
    let serve = spawn(
        &mut procs,
        brmcp(&["serve", "--datadir", alice_dir.to_str().expect("utf-8")]),
    );
    wait_for(&serve, "serving echo and fortune");
    let (bridge_dir, listen, token) = start_bridge(&mut procs, dir, &alice, "autopay");
    let bridge_dir = Path::new(&bridge_dir).to_owned();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/{alice}"))
            .auth_header(token),
    );
    let client = ().serve(transport).await.expect("MCP session");
    let echo = CallToolRequestParams::new("echo").with_arguments(
        json!({"text": "hi"})
            .as_object()
            .cloned()
            .unwrap_or_default(),
    );
    client.call_tool(echo.clone()).await.expect("echo");
    let fortune = client
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .expect("fortune");
    assert_ne!(fortune.is_error, Some(true), "{fortune:?}");

    // The server's status after traffic.
    let served = until_status("serve", &alice_dir, "the paid call", |s| {
        s["snapshot"]["ledger"]["earned_atoms_24h"] == 10_000
    })
    .await;
    let snap = &served["snapshot"];
    assert_eq!(served["running"], true, "{served:#}");
    assert!(
        snap["router"]["pms_received"].as_u64() > Some(0),
        "{served:#}"
    );
    assert!(
        snap["router"]["messages_delivered"].as_u64() > Some(0),
        "{served:#}"
    );
    assert!(snap["sessions"]["open"].as_u64() >= Some(1), "{served:#}");
    assert_eq!(snap["connection"]["connected"], true, "{served:#}");
    assert_eq!(snap["config"]["allowed_callers"], 1, "{served:#}");
    assert!(
        snap["ledger"]["calls_24h"].as_u64() >= Some(1),
        "{served:#}"
    );
    let (code, text) = status("serve", &alice_dir, false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("brmcp serve is running"), "{text}");
    assert!(text.contains("clientrpc: connected since 20"), "{text}");
    assert!(text.contains("DROPPED: REASON"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("disallowed ")), "{text}");

    // The bridge's.
    let bridged = until_status("bridge", &bridge_dir, "the payment", |s| {
        s["snapshot"]["spend"]["paid_atoms_24h"] == 10_000
    })
    .await;
    let snap = &bridged["snapshot"];
    assert_eq!(bridged["running"], true, "{bridged:#}");
    assert!(snap["router"]["pms_sent"].as_u64() > Some(0), "{bridged:#}");
    assert_eq!(snap["spend"]["per_call_cap_atoms"], 100_000, "{bridged:#}");
    assert_eq!(snap["connection"]["connected"], true, "{bridged:#}");
    let (code, text) = status("bridge", &bridge_dir, false);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("10000 atoms paid in the last 24 h"), "{text}");

    // Log lines: a call, a tip, a payment.
    let serve_log = alice_dir.join("logs/brmcp-serve.log");
    let bridge_log = dir.join("bob/logs/brmcp-serve.log");
    until_logged(
        &serve_log,
        &[" call ", "fortune", "price_atoms=10000", "outcome=\"ok\""],
    )
    .await;
    until_logged(&serve_log, &["tip received", &bob, "Credited"]).await;
    until_logged(&bridge_log, &["paid", "amount=10000"]).await;

    // Bob removed from brmcp.json while serving: one info line, then refused.
    std::fs::write(
        alice_dir.join("brmcp.json"),
        r#"{"allowed_uids": [], "calls_per_minute": 30}"#,
    )
    .expect("write brmcp.json");
    until_logged(&serve_log, &["config reloaded", &format!("allowed -{bob}")]).await;
    until_status("serve", &alice_dir, "the emptied allowlist", |s| {
        s["snapshot"]["config"]["allowed_callers"] == 0
    })
    .await;
    let refused = tokio::time::timeout(Duration::from_secs(3), client.call_tool(echo)).await;
    assert!(
        refused.is_err() || refused.is_ok_and(|r| r.is_err()),
        "a refused caller is not served"
    );
    until_logged(&serve_log, &["refused a caller that is not allowed", &bob]).await;
    until_status("serve", &alice_dir, "the refusal counted", |s| {
        s["snapshot"]["router"]["dropped_disallowed"].as_u64() > Some(0)
    })
    .await;

    // SIGHUP rereads the file at once.
    let serve_pid = procs.0[1].id().to_string();
    let hup = std::process::Command::new("kill")
        .args(["-HUP", &serve_pid])
        .status()
        .expect("kill -HUP");
    assert!(hup.success());
    until_logged(&serve_log, &["SIGHUP: reading brmcp.json again"]).await;

    // The Bison Relay client goes away: shown as reconnecting, and logged.
    let devnet = procs.0.first_mut().expect("the devnet");
    devnet.kill().expect("SIGKILL devnet");
    let _ = devnet.wait();
    until_status("serve", &alice_dir, "the lost connection", |s| {
        s["snapshot"]["connection"]["connected"] == false
    })
    .await;
    let (_, text) = status("serve", &alice_dir, false);
    assert!(text.contains("clientrpc: reconnecting since 20"), "{text}");
    until_logged(&serve_log, &["clientrpc connection lost"]).await;
    // Back on the same directory (same ports and credentials): reconnected, and logged.
    let devnet = spawn(
        &mut procs,
        brmcp(&[
            "devnet",
            "--dir",
            dir.to_str().expect("utf-8"),
            "--nodes",
            "2",
        ]),
    );
    wait_for(&devnet, "Ctrl-C stops the devnet.");
    until_logged(&serve_log, &["clientrpc reconnected", "down_ms="]).await;
    until_status("serve", &alice_dir, "the connection back", |s| {
        s["snapshot"]["connection"]["connected"] == true
            && s["snapshot"]["connection"]["connects"].as_u64() >= Some(2)
    })
    .await;

    // devnet's `.conf` says `debug=info`: our lines, not rmcp's per-session ones.
    for log in [&serve_log, &bridge_log] {
        let text = std::fs::read_to_string(log).expect("log");
        let rmcp: Vec<&str> = text.lines().filter(|l| l.contains(" INFO rmcp")).collect();
        assert!(rmcp.is_empty(), "{}: {rmcp:?}", log.display());
    }

    // SIGKILLed, the processes leave snapshots that go stale: "not running".
    for child in procs.0.iter_mut().skip(1) {
        let _ = child.kill();
        let _ = child.wait();
    }
    let stale = brmcp::status::STALE_AFTER_SECS;
    tokio::time::sleep(Duration::from_secs(stale + 3)).await;
    for (role, dir) in [("serve", &alice_dir), ("bridge", &bridge_dir)] {
        let (code, text) = status(role, dir, false);
        assert_eq!(code, 3, "{text}");
        assert!(
            text.contains(&format!("brmcp {role} is not running: its status is stale")),
            "{text}"
        );
        assert_eq!(status_json(role, dir)["state"], "stale");
    }
    drop(procs);
    let never = tempfile::tempdir().expect("temp dir");
    let (code, text) = status("serve", never.path(), false);
    assert_eq!(code, 3, "{text}");
    assert!(text.contains("brmcp serve is not running"), "{text}");
}
