//! The commands as separate processes, as a user runs them: `brmcp devnet`, then
//! `brmcp serve` on one node and `brmcp bridge` on the other, then an MCP client makes a
//! free and a paid call through the bridge's HTTP endpoint.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use rmcp::RoleClient;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, ServerResult};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::json;

/// How long any one process may take to report it is ready.
pub(super) const READY: Duration = Duration::from_secs(60);

/// Children killed when the test ends, however it ends.
pub(super) struct Procs(pub(super) Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub(super) fn brmcp(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_brmcp"));
    cmd.args(args);
    cmd
}

/// `brmcp bridge` on the data directory `bridge_dir` with its client's config `rpc`,
/// its endpoints at `listen`.
pub(super) fn http_bridge(bridge_dir: &str, rpc: &Path, listen: &str) -> Command {
    brmcp(&[
        "bridge",
        "--datadir",
        bridge_dir,
        "--rpc-config",
        rpc.to_str().expect("utf-8"),
        "--listen",
        listen,
    ])
}

/// Sends `child` the signal named `signal` (`KILL`, `TERM`) and waits for it to end.
pub(super) fn kill_with(child: &mut Child, signal: &str) {
    let killed = Command::new("kill")
        .args([format!("-{signal}"), child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success(), "kill -{signal}");
    let _ = child.wait();
}

/// What `brmcp args` printed as JSON, checked that it succeeded.
pub(super) fn brmcp_json(args: &[&str]) -> serde_json::Value {
    let out = brmcp(args).output().expect("brmcp");
    assert!(out.status.success(), "{args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).expect("json")
}

/// Starts `cmd` and returns its lines (stdout and stderr) as they come.
pub(super) fn spawn(procs: &mut Procs, mut cmd: Command) -> mpsc::Receiver<String> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn brmcp");
    let (tx, rx) = mpsc::channel();
    for stream in [
        Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().expect("stderr")),
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    procs.0.push(child);
    rx
}

/// Lines until one contains `marker`; all of them, for parsing and for error messages.
pub(super) fn wait_for(lines: &mpsc::Receiver<String>, marker: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + READY;
    while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
        match lines.recv_timeout(left) {
            Ok(line) => {
                let done = line.contains(marker);
                seen.push(line);
                if done {
                    return seen;
                }
            }
            Err(_) => break,
        }
    }
    panic!(
        "no {marker:?} within {READY:?}; output:\n{}",
        seen.join("\n")
    );
}

pub(super) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Sets the bridge's spending mode, with caps that allow a fortune.
fn set_mode(bridge_dir: &Path, mode: &str) {
    let path = bridge_dir.join("mcpclient.json");
    let mut settings: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("mcpclient.json"))
            .expect("json");
    settings["mode"] = json!(mode);
    settings["per_call_cap_atoms"] = json!(100_000);
    settings["per_day_cap_atoms"] = json!(1_000_000);
    settings["approval_timeout_secs"] = json!(60);
    std::fs::write(&path, settings.to_string()).expect("write settings");
}

/// A devnet, `brmcp serve` on alice and `brmcp bridge` on bob, each its own process.
struct Stack {
    _procs: Procs,
    devnet_out: Vec<String>,
    bridge_out: Vec<String>,
    dir: std::path::PathBuf,
    alice: String,
    bob: String,
    bridge_dir: String,
    listen: String,
    token: String,
}

/// A devnet of two nodes: the process and the uids of alice and bob.
pub(super) fn start_devnet(dir: &Path) -> (Procs, String, String) {
    let (procs, alice, bob, _) = devnet_printing(dir);
    (procs, alice, bob)
}

/// The uid the devnet printed for node `nick` in `out`.
pub(super) fn uid_in(out: &[String], nick: &str) -> String {
    out.iter()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some(nick)).then(|| words.next().map(str::to_owned))
        })
        .flatten()
        .unwrap_or_else(|| panic!("no {nick} in:\n{}", out.join("\n")))
}

/// The tool result `answer` is, checked not an error; `case` prefixes what a failed
/// check says.
pub(super) fn tool_result(case: &str, answer: ServerResult) -> CallToolResult {
    let ServerResult::CallToolResult(result) = answer else {
        panic!("{case}: {answer:?}");
    };
    assert_ne!(result.is_error, Some(true), "{case}: {result:?}");
    result
}

/// `brmcp devnet` in `dir` with `flags`, one of `procs`, once it is up: what it
/// printed.
pub(super) fn devnet_up(procs: &mut Procs, dir: &Path, flags: &[&str]) -> Vec<String> {
    let mut args = vec!["devnet", "--dir", dir.to_str().expect("utf-8 path")];
    args.extend_from_slice(flags);
    let devnet = spawn(procs, brmcp(&args));
    wait_for(&devnet, "Ctrl-C stops the devnet.")
}

/// `brmcp serve` on the devnet's node alice in `dir`, one of `procs`, once it serves.
pub(super) fn serve_alice(procs: &mut Procs, dir: &Path) {
    let serve = spawn(
        procs,
        brmcp(&[
            "serve",
            "--datadir",
            dir.join("alice").to_str().expect("utf-8"),
        ]),
    );
    wait_for(&serve, "serving echo and fortune");
}

/// [`start_devnet`], with what the devnet printed.
fn devnet_printing(dir: &Path) -> (Procs, String, String, Vec<String>) {
    let mut procs = Procs(Vec::new());
    let out = devnet_up(&mut procs, dir, &["--nodes", "2"]);
    let uid = |nick: &str| uid_in(&out, nick);
    let (alice, bob) = (uid("alice"), uid("bob"));
    (procs, alice, bob, out)
}

/// A devnet and `brmcp serve` on alice: the processes, the uids of alice and bob, and
/// what the devnet printed.
pub(super) fn serving(dir: &Path) -> (Procs, String, String, Vec<String>) {
    let (mut procs, alice, bob, out) = devnet_printing(dir);
    serve_alice(&mut procs, dir);
    (procs, alice, bob, out)
}

/// Allows alice in bob's bridge directory with the given spending mode.
pub(super) fn bridge_settings(dir: &Path, alice: &str, mode: &str) -> String {
    let bridge_dir = dir.join("bob-bridge");
    let bridge_arg = bridge_dir.to_str().expect("utf-8").to_owned();
    let added = brmcp(&[
        "bridge",
        "--datadir",
        &bridge_arg,
        "bots",
        "add",
        "alice",
        alice,
    ])
    .output()
    .expect("bots add");
    assert!(added.status.success(), "{added:?}");
    set_mode(&bridge_dir, mode);
    bridge_arg
}

/// `brmcp bridge` on bob, serving alice over HTTP: its data directory, listen
/// address and bearer token.
pub(super) fn start_bridge(
    procs: &mut Procs,
    dir: &Path,
    alice: &str,
    mode: &str,
) -> (String, String, String) {
    let (bridge_arg, listen, token, _) = bridge_printing(procs, dir, alice, mode);
    (bridge_arg, listen, token)
}

/// [`start_bridge`], with what the bridge printed.
fn bridge_printing(
    procs: &mut Procs,
    dir: &Path,
    alice: &str,
    mode: &str,
) -> (String, String, String, Vec<String>) {
    let bridge_arg = bridge_settings(dir, alice, mode);
    let rpc = dir.join("bob").join("brmcp-serve.conf");
    let listen = format!("127.0.0.1:{}", free_port());
    let bridge = spawn(procs, http_bridge(&bridge_arg, &rpc, &listen));
    let out = wait_for(&bridge, "Ctrl-C stops the bridge.");
    // Printed only when made: `token show` has it on every run.
    let shown = brmcp(&["bridge", "--datadir", &bridge_arg, "token", "show"])
        .output()
        .expect("token show");
    let token = String::from_utf8_lossy(&shown.stdout).trim().to_owned();
    assert_eq!(token.len(), 32, "{shown:?}");
    let url = format!("http://{listen}/mcp/{alice}");
    assert!(
        out.iter().any(|l| l.contains(&url)),
        "the bridge lists {url}:\n{}",
        out.join("\n")
    );
    (bridge_arg, listen, token, out)
}

impl Stack {
    fn start(dir: &Path, mode: &str) -> Self {
        let (mut procs, alice, bob, devnet_out) = serving(dir);
        let (bridge_arg, listen, token, bridge_out) =
            bridge_printing(&mut procs, dir, &alice, mode);
        Self {
            _procs: procs,
            devnet_out,
            bridge_out,
            dir: dir.to_owned(),
            alice,
            bob,
            bridge_dir: bridge_arg,
            listen,
            token,
        }
    }

    /// An MCP client, as an agent connects to the bridge.
    async fn client(&self) -> RunningService<RoleClient, ()> {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!(
                "http://{}/mcp/{}",
                self.listen, self.alice
            ))
            .auth_header(self.token.clone()),
        );
        ().serve(transport)
            .await
            .expect("MCP session through the bridge")
    }

    /// `brmcp serve --datadir <alice> <args>`, beside the running server.
    fn serve_command(&self, args: &[&str]) -> String {
        let datadir = self.dir.join("alice");
        let mut all = vec!["serve", "--datadir", datadir.to_str().expect("utf-8")];
        all.extend_from_slice(args);
        let out = brmcp(&all).output().expect("brmcp serve");
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn bridge_command(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec![
            "bridge",
            "--datadir",
            &self.bridge_dir,
            "--listen",
            &self.listen,
        ];
        all.extend_from_slice(args);
        brmcp(&all).output().expect("brmcp bridge")
    }
}

/// The devnet's bot as an agent sees it: `echo` and `fortune` listed, and a free `echo`
/// answered with its structured result.
pub(super) async fn assert_devnet_bot_free_call(client: &RunningService<RoleClient, ()>) {
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["echo", "fortune"]);
    let echo = client
        .call_tool(
            CallToolRequestParams::new("echo").with_arguments(
                json!({"text": "hi"})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            ),
        )
        .await
        .expect("echo");
    assert_eq!(echo.structured_content, Some(json!({"echo": "hi"})));
}

pub(super) fn assert_fortune(result: &CallToolResult) {
    assert_ne!(result.is_error, Some(true), "{result:?}");
    assert!(
        result
            .structured_content
            .as_ref()
            .is_some_and(|v| v.get("fortune").is_some()),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_and_bridge_processes_make_a_paid_call_through_devnet() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stack = Stack::start(dir.path(), "autopay");
    let client = stack.client().await;
    assert_devnet_bot_free_call(&client).await;
    let fortune = client
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .expect("fortune");
    assert_fortune(&fortune);

    // The bridge recorded the tip it paid.
    let spend = stack.bridge_command(&["spend"]);
    let text = String::from_utf8_lossy(&spend.stdout);
    let paid = text.lines().nth(1).unwrap_or_default();
    assert!(
        paid.contains("fortune") && paid.contains("  10000  ") && paid.contains("paid"),
        "{text}"
    );
    assert!(text.contains("last 24 hours: 10000 atoms"), "{text}");

    // The operator's ledger commands work while the server runs, and the server sees
    // their effect: a hand credit pays for the next fortune, so no tip is sent.
    let journal = stack.serve_command(&["journal"]);
    assert!(journal.contains("fortune"), "{journal}");
    let credited = stack.serve_command(&["credit", &stack.bob, "10000", "--reason", "goodwill"]);
    assert!(credited.contains("credited 10000 atoms"), "{credited}");
    let balances = stack.serve_command(&["balances", "--json"]);
    assert!(
        balances.contains(&format!("\"caller\": \"{}\"", stack.bob))
            && balances.contains("\"balance_matoms\": 10000000"),
        "{balances}"
    );
    let fortune = client
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .expect("fortune");
    assert_fortune(&fortune);
    let spend = stack.bridge_command(&["spend"]);
    let text = String::from_utf8_lossy(&spend.stdout);
    assert!(text.contains("last 24 hours: 10000 atoms"), "{text}");
    let balances = stack.serve_command(&["balances", "--json"]);
    assert!(
        balances.contains(&format!("\"caller\": \"{}\"", stack.bob))
            && balances.contains("\"balance_matoms\": 0"),
        "{balances}"
    );
    let _ = client.cancel().await;

    // The .conf's `debug=info` and `logfile` keys: one line per call on the server,
    // one per payment on the bridge, in the files the .conf names.
    let log = |node: &str| {
        std::fs::read_to_string(stack.dir.join(node).join("logs/brmcp-serve.log"))
            .unwrap_or_else(|e| panic!("{node}'s log file: {e}"))
    };
    let served = log("alice");
    let calls: Vec<&str> = served
        .lines()
        .filter(|l| l.contains(" call ") && l.contains("fortune"))
        .collect();
    assert!(
        calls.iter().any(|l| l.contains("price_atoms=10000")
            && l.contains("outcome=\"ok\"")
            && l.contains(&stack.bob)
            && l.contains("ms=")),
        "{served}"
    );
    assert!(served.contains("clientrpc connected"), "{served}");
    // Every file the running processes made is the owner's only.
    for sub in ["alice", "bob", "bob-bridge"] {
        for entry in std::fs::read_dir(stack.dir.join(sub)).expect("node dir") {
            let path = entry.expect("entry").path();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777;
            let want = if meta.is_dir() { 0o700 } else { 0o600 };
            assert_eq!(mode, want, "{}", path.display());
        }
    }
    let bridged = log("bob");
    assert!(
        bridged
            .lines()
            .any(|l| l.contains("paid") && l.contains("amount=10000")),
        "{bridged}"
    );
}

/// In approval mode a paid call waits until `brmcp bridge approvals approve` pays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_command_decides_a_waiting_payment() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stack = Stack::start(dir.path(), "approval");
    let client = stack.client().await;
    let call = tokio::spawn(async move {
        let result = client
            .call_tool(CallToolRequestParams::new("fortune"))
            .await;
        let _ = client.cancel().await;
        result
    });

    let mut waiting = None;
    for _ in 0..200 {
        let listed = stack.bridge_command(&["approvals", "list", "--json"]);
        assert!(listed.status.success(), "{listed:?}");
        let list: Vec<serde_json::Value> =
            serde_json::from_slice(&listed.stdout).unwrap_or_else(|e| panic!("{e}: {listed:?}"));
        if let Some(p) = list.iter().find(|p| p["atoms"] == json!(10000)) {
            assert_eq!(p["bot_name"], json!("alice"), "{p}");
            waiting = p["id"].as_str().map(str::to_owned);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = waiting.expect("a payment waits for approval");
    let decided = stack.bridge_command(&["approvals", "approve", &id]);
    assert!(decided.status.success(), "{decided:?}");
    let again = stack.bridge_command(&["approvals", "approve", &id]);
    assert!(
        !again.status.success(),
        "a decided payment is no longer waiting"
    );

    let fortune = call.await.expect("join").expect("fortune");
    assert_fortune(&fortune);
}

/// `brmcp bridge stdio` serves one bot to an agent host that spawns it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bridge_stdio_serves_one_bot_to_a_spawning_host() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_procs, alice, _bob, _) = serving(dir.path());
    let bridge_arg = bridge_settings(dir.path(), &alice, "autopay");
    let rpc = dir.path().join("bob").join("brmcp-serve.conf");
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_brmcp"));
    cmd.args([
        "bridge",
        "--datadir",
        &bridge_arg,
        "--rpc-config",
        rpc.to_str().expect("utf-8"),
        "stdio",
        "--bot",
        "alice",
    ]);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).expect("spawn the bridge");
    let client = ().serve(transport).await.expect("MCP over the bridge's stdio");
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(tools.len(), 2);
    let fortune = client
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .expect("fortune");
    assert_fortune(&fortune);
    let _ = client.cancel().await;
}

/// A devnet restarted on its directory (killed, not stopped) keeps its identities,
/// ports and passwords: it prints the same commands, and they work again, paid calls
/// included (the new run's tip ids are not taken for the old run's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devnet_restart_keeps_the_printed_commands_working() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = Stack::start(dir.path(), "autopay");
    let client = first.client().await;
    assert_fortune(
        &client
            .call_tool(CallToolRequestParams::new("fortune"))
            .await
            .expect("fortune"),
    );
    let _ = client.cancel().await;
    let printed = first.devnet_out.clone();
    // The token is printed when made, and never again (logs keep what stderr says).
    assert!(first.bridge_out.iter().any(|l| l.contains(&first.token)));
    let (alice, bob) = (first.alice.clone(), first.bob.clone());
    drop(first);

    let second = Stack::start(dir.path(), "autopay");
    assert_eq!(second.devnet_out, printed, "the same commands");
    assert!(
        !second.bridge_out.iter().any(|l| l.contains(&second.token)),
        "{:?}",
        second.bridge_out
    );
    assert!(second.bridge_out.iter().any(|l| l.contains("token show")));
    assert_eq!(
        (second.alice.as_str(), second.bob.as_str()),
        (alice.as_str(), bob.as_str())
    );
    let client = second.client().await;
    assert_fortune(
        &client
            .call_tool(CallToolRequestParams::new("fortune"))
            .await
            .expect("fortune after the restart"),
    );
    let spend = second.bridge_command(&["spend"]);
    let text = String::from_utf8_lossy(&spend.stdout);
    assert!(text.contains("last 24 hours: 20000 atoms"), "{text}");
    let _ = client.cancel().await;
}
