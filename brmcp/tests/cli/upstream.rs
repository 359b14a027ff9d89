//! `brmcp serve` selling real upstream MCP servers (installed by `scripts/test-deps`): a
//! Python server on the `mcp` SDK and `@modelcontextprotocol/server-everything`, each
//! spawned over stdio (and server-everything over streamable HTTP too), named in
//! `brmcp.json` with prices. Devnet, serve and the bridge
//! run as processes; the Python `mcp` SDK is the agent. Shows: the listing with prices
//! and the upstream's annotations, tools the file does not name neither listed nor
//! callable, free and paid calls (payment_required, the bridge's tip, the ledger),
//! progress relayed (coalesced), cancellation passed on, an upstream error refunded, a list change
//! reaching the agent, resources and prompts mirrored where offered, and an upstream
//! killed mid-call: refunded, restarted, and the
//! next paid call served, with nothing charged while it was down.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use crate::processes::{brmcp, free_port, spawn, start_bridge, start_devnet, wait_for};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

/// A file `scripts/test-deps` installs.
fn installed(relative: &str) -> PathBuf {
    let path = workspace().join("target/interop").join(relative);
    assert!(
        path.exists(),
        "{} is missing: run scripts/test-deps",
        path.display()
    );
    path
}

fn here(file: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cli")
        .join(file)
        .display()
        .to_string()
}

fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps
        .iter()
        .find(|s| s["step"] == name)
        .unwrap_or_else(|| panic!("no step {name} in {steps:?}"))
}

/// Kills the Python upstream's process once it is inside `hang`; returns its pid.
async fn kill_when_hanging(state: &Path) -> String {
    let pid_file = state.join("hang.pid");
    for _ in 0..1200 {
        if let Ok(pid) = std::fs::read_to_string(&pid_file)
            && !pid.trim().is_empty()
        {
            let pid = pid.trim().to_owned();
            let killed = std::process::Command::new("kill")
                .args(["-9", &pid])
                .status()
                .expect("kill");
            assert!(killed.success(), "kill -9 {pid}");
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the upstream never entered hang");
}

fn serve_command(alice_dir: &Path, args: &[&str]) -> String {
    let mut all = vec!["serve", "--datadir", alice_dir.to_str().expect("utf-8")];
    all.extend_from_slice(args);
    let out = brmcp(&all).output().expect("brmcp serve");
    assert!(out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `brmcp serve ... <command> --json`, parsed.
fn serve_json(alice_dir: &Path, command: &str) -> Value {
    let out = serve_command(alice_dir, &[command, "--json"]);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{command} --json: {e}: {out}"))
}

/// `caller`'s balance in milliatoms, from `balances --json`.
fn balance_matoms(alice_dir: &Path, caller: &str) -> u64 {
    let balances = serve_json(alice_dir, "balances");
    balances
        .as_array()
        .expect("an array")
        .iter()
        .find(|b| b["caller"] == caller)
        .and_then(|b| b["balance_matoms"].as_u64())
        .unwrap_or_else(|| panic!("no balance of {caller} in {balances}"))
}

/// Polls `brmcp serve status` until every line says `up`.
pub(super) async fn wait_until_up(alice_dir: &Path, count: usize) -> String {
    let mut last = String::new();
    for _ in 0..600 {
        let mut all = vec!["serve", "--datadir", alice_dir.to_str().expect("utf-8")];
        all.push("status");
        let out = brmcp(&all).output().expect("brmcp serve status");
        // The upstreams' lines of the status: `name (command|url): state`.
        last = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.contains(" (command): ") || l.contains(" (url): "))
            .collect::<Vec<_>>()
            .join("\n");
        if out.status.success()
            && last.lines().count() == count
            && last.lines().all(|l| l.contains(": up"))
        {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the upstreams did not come up:\n{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_servers_are_sold_through_devnet_serve_and_bridge() {
    let python = installed("venv/bin/python");
    let node = installed("node/node_modules/.bin/node");
    let everything =
        installed("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let (mut procs, alice, bob) = start_devnet(dir);
    let state = dir.join("py-state");
    std::fs::create_dir_all(&state).expect("state dir");
    // server-everything over streamable HTTP too, for a url upstream.
    let web_port = free_port();
    let mut web = std::process::Command::new(&node);
    web.args([everything.as_os_str(), "streamableHttp".as_ref()])
        .env("PORT", web_port.to_string());
    spawn(&mut procs, web);

    // alice's brmcp.json (devnet wrote it, allowing bob) gets the two upstreams.
    let alice_dir = dir.join("alice");
    let config_path = alice_dir.join("brmcp.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).expect("brmcp.json"))
            .expect("json");
    config["upstreams"] = json!([
        {
            "name": "py",
            "command": python,
            "args": [here("upstream_server.py")],
            "env": {"UPSTREAM_STATE": state},
            "tools": {
                "echo": 0, "add": 500, "pricey": 150_000, "steps": 0, "wait": 0,
                "fail": 700, "hang": 700, "grow": 0, "extra": 0
            }
        },
        {
            "name": "everything",
            "command": node,
            "args": [everything, "stdio"],
            "tools": {"echo": 0, "get-sum": 400, "trigger-long-running-operation": 0},
            "resources": true,
            "prompts": true
        },
        {
            "name": "web",
            "url": format!("http://127.0.0.1:{web_port}/mcp"),
            "headers": {"X-Brmcp-Test": "1"},
            "bearer_env": "WEB_TOKEN",
            "tools": {"get-sum": 300}
        }
    ]);
    std::fs::write(&config_path, config.to_string()).expect("write brmcp.json");

    let mut serve = brmcp(&["serve", "--datadir", alice_dir.to_str().expect("utf-8")]);
    serve.env("WEB_TOKEN", "web-s3cret");
    let serve = spawn(&mut procs, serve);
    wait_for(&serve, "serving upstream(s) py, everything, web");
    let status = wait_until_up(&alice_dir, 3).await;
    assert!(
        status.contains("py (command): up, 8 tool(s), pid"),
        "{status}"
    );
    // `extra` is priced but appears only once `grow` runs.
    assert!(status.contains("; not listed by it: extra"), "{status}");
    assert!(
        status.contains("everything (command): up, 3 tool(s)"),
        "{status}"
    );
    // (The HTTP server may have started after serve's first tries.)
    let web = status.lines().find(|l| l.starts_with("web (url): up"));
    assert!(web.is_some_and(|l| l.ends_with(" 1 tool(s)")), "{status}");
    let (bridge_dir, listen, token) = start_bridge(&mut procs, dir, &alice, "autopay");

    let url = format!("http://{listen}/mcp/{alice}");
    let mut client = tokio::process::Command::new(&python);
    client
        .arg(here("upstream_client.py"))
        .args([&url, &token])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let client = client.spawn().expect("spawn the Python client");
    let killed = kill_when_hanging(&state).await;
    let output = tokio::time::timeout(Duration::from_secs(180), client.wait_with_output())
        .await
        .expect("the Python client took over 180 s")
        .expect("python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let steps: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        output.status.success() && steps.iter().any(|s| s["step"] == "done"),
        "python failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );

    // The listing: exposed tools only, prefixed, priced, with the upstream's schemas and
    // annotations.
    let tools = step(&steps, "tools");
    let mut names: Vec<&str> = tools["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "everything_echo",
            "everything_get-sum",
            "everything_trigger-long-running-operation",
            "py_add",
            "py_echo",
            "py_fail",
            "py_grow",
            "py_hang",
            "py_pricey",
            "py_steps",
            "py_wait",
            "web_get-sum",
        ]
    );
    let meta = &tools["meta"];
    assert_eq!(meta["py_echo"]["brmcp/priceAtoms"], json!(0));
    assert_eq!(meta["py_add"]["brmcp/priceAtoms"], json!(500));
    assert_eq!(meta["everything_get-sum"]["brmcp/priceAtoms"], json!(400));
    assert_eq!(
        tools["annotations"]["py_echo"]["readOnlyHint"],
        json!(true),
        "{tools}"
    );
    assert_eq!(
        tools["annotations"]["everything_get-sum"]["idempotentHint"],
        json!(true)
    );
    assert_eq!(
        tools["schemas"]["py_add"]["required"],
        json!(["a", "b"]),
        "{tools}"
    );

    // Free and paid calls, on both upstreams.
    let texts = |name: &str| step(&steps, name)["texts"].clone();
    assert_eq!(texts("echo"), json!(["echo: hi"]));
    assert_eq!(texts("add"), json!(["5"]));
    assert_eq!(step(&steps, "add")["is_error"], json!(false));
    assert_eq!(texts("everything_echo"), json!(["Echo: hello"]));
    let sum = step(&steps, "everything_sum");
    assert_eq!(sum["is_error"], json!(false), "{sum}");
    assert!(
        sum["texts"][0].as_str().is_some_and(|t| t.contains("42")),
        "{sum}"
    );
    let sum = step(&steps, "web_sum");
    assert_eq!(sum["is_error"], json!(false), "{sum}");
    assert!(
        sum["texts"][0].as_str().is_some_and(|t| t.contains("7")),
        "{sum}"
    );
    // Above the bridge's per-call cap, the call is not sent: the bridge's refusal alone
    // reaches the agent, never the bot's raw payment_required.
    let pricey = step(&steps, "pricey");
    assert_eq!(pricey["is_error"], json!(true), "{pricey}");
    assert_eq!(
        pricey["texts"].as_array().map(Vec::len),
        Some(1),
        "{pricey}"
    );
    assert!(
        pricey["texts"][0].as_str().is_some_and(|t| t.contains(
            "\"py_pricey\" not sent, payment not made: 150000 atoms exceeds the per-call cap"
        )),
        "{pricey}"
    );

    // Progress, relayed in order and before the answer, coalesced: the first at once,
    // then at most one a second (the steps come faster), so the later ones may give way
    // to the answer.
    let progress = step(&steps, "steps");
    assert_eq!(progress["texts"], json!(["done 3"]));
    let seen = progress["seen"].as_array().expect("seen");
    assert_eq!(seen[0], json!([1.0, 3.0, "step 1"]), "{progress}");
    let values: Vec<f64> = seen.iter().filter_map(|p| p[0].as_f64()).collect();
    assert!(
        values.len() <= 3 && values.windows(2).all(|w| w[0] < w[1]),
        "{progress}"
    );
    let progress = step(&steps, "everything_progress");
    assert_eq!(progress["is_error"], json!(false), "{progress}");
    let seen: Vec<f64> = progress["seen"]
        .as_array()
        .expect("seen")
        .iter()
        .filter_map(|p| p[0].as_f64())
        .collect();
    assert!(
        seen.first() == Some(&1.0) && seen.len() <= 3 && seen.windows(2).all(|w| w[0] < w[1]),
        "{progress}"
    );

    // Cancellation reaches the upstream's handler.
    assert_eq!(step(&steps, "cancel")["cancelled"], json!(true));
    let cancelled = std::fs::read_to_string(state.join("cancelled")).unwrap_or_default();
    assert_eq!(
        cancelled, "wait\n",
        "the upstream never saw the cancellation"
    );

    // Tools the file does not name: not listed, not callable.
    for name in ["secret", "get_env"] {
        let refused = step(&steps, name);
        assert!(
            refused["error"]
                .as_str()
                .is_some_and(|e| e.contains("unknown tool")),
            "{refused}"
        );
    }

    // An upstream error is the call's error (and is refunded, below).
    let fail = step(&steps, "fail");
    assert_eq!(fail["is_error"], json!(true));
    assert!(
        fail["texts"][0]
            .as_str()
            .is_some_and(|t| t.contains("Error executing tool fail")),
        "{fail}"
    );

    // The upstream's list change reaches the agent; the new tool is sold.
    let grown = step(&steps, "grown");
    assert!(grown["changes"].as_u64().unwrap_or(0) >= 1, "{grown}");
    assert!(
        grown["names"]
            .as_array()
            .expect("names")
            .contains(&json!("py_extra")),
        "{grown}"
    );
    assert_eq!(texts("extra"), json!(["extra!"]));

    // Resources and prompts of the upstream that offers them (free), prompts prefixed;
    // none of the one that does not.
    let resources = step(&steps, "resources");
    let uris: Vec<&str> = resources["uris"]
        .as_array()
        .expect("uris")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        uris.contains(&"demo://resource/static/document/features.md"),
        "{resources}"
    );
    assert!(!uris.iter().any(|u| u.starts_with("py://")), "{resources}");
    assert!(
        resources["read"][0].as_str().is_some_and(|t| !t.is_empty()),
        "{resources}"
    );
    let prompts = step(&steps, "prompts");
    let names: Vec<&str> = prompts["names"]
        .as_array()
        .expect("names")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(names.contains(&"everything_simple-prompt"), "{prompts}");
    assert!(
        names.iter().all(|n| n.starts_with("everything_")),
        "{prompts}"
    );
    assert_eq!(
        prompts["got"],
        json!(["This is a simple prompt without arguments."])
    );

    // Killed mid-call: the call fails, the supervisor restarts it, the next call works;
    // while it was down, calls were refused before any charge.
    let hang = step(&steps, "hang");
    assert_eq!(hang["is_error"], json!(true), "{hang}");
    let after = step(&steps, "after_restart");
    assert_eq!(after["texts"], json!(["2"]), "{after}");
    let starts = std::fs::read_to_string(state.join("starts")).expect("starts");
    let starts: Vec<&str> = starts.lines().collect();
    assert_eq!(starts.len(), 2, "started once, restarted once: {starts:?}");
    assert_eq!(starts[0], killed);
    let status = wait_until_up(&alice_dir, 3).await;
    assert!(
        status.contains("py (command): up again after 1 restart(s), 8 tool(s)"),
        "{status}"
    );

    // The money: tips for add (500), the get-sums (400, 300) and fail (700); fail and hang
    // refunded; the add after the restart paid from that credit: 700 - 500 left.
    assert_eq!(balance_matoms(&alice_dir, &bob), 200_000);
    let spend = brmcp(&[
        "bridge",
        "--datadir",
        &bridge_dir,
        "--listen",
        &listen,
        "spend",
    ])
    .output()
    .expect("brmcp bridge spend");
    let spend = String::from_utf8_lossy(&spend.stdout);
    assert!(spend.contains("last 24 hours: 1900 atoms"), "{spend}");
    // One journal entry per call that ran (the bridge keys every call, so free ones
    // too): the adds and get-sum completed, fail and hang refunded. The refused calls
    // (pricey, the unnamed tools, those while the upstream was down) left none.
    let journal = serve_json(&alice_dir, "journal");
    let calls = journal.as_array().expect("an array");
    let entries = |tool: &str, state: &str| {
        calls
            .iter()
            .filter(|c| c["tool"] == tool)
            .map(|c| assert_eq!(c["state"], state, "{c}"))
            .count()
    };
    assert_eq!(entries("py_add", "completed"), 2, "{journal}");
    assert_eq!(entries("everything_get-sum", "completed"), 1, "{journal}");
    assert_eq!(entries("web_get-sum", "completed"), 1, "{journal}");
    assert_eq!(entries("py_fail", "refunded"), 1, "{journal}");
    assert_eq!(entries("py_hang", "refunded"), 1, "{journal}");
    assert_eq!(calls.len(), 13, "{journal}");
    let down_errors = after["errors"].as_array().expect("errors");
    assert!(
        down_errors.iter().any(|e| e[0]
            .as_str()
            .is_some_and(|t| t.contains("upstream py is down (restarting); nothing was charged"))),
        "no call was refused while the upstream was down: {after}"
    );

    // The logs said when the upstream failed and came back.
    let mut log = Vec::new();
    while let Ok(line) = serve.try_recv() {
        log.push(line);
    }
    let log = log.join("\n");
    assert!(log.contains("upstream py (command): down:"), "{log}");
    assert!(
        log.contains("upstream py (command): up again after 1 restart(s)"),
        "{log}"
    );
}

/// `brmcp serve` killed (SIGKILL) while a paid forwarded call runs: the charge stays
/// pending in the ledger, and the next opening refunds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_killed_mid_forward_refunds_at_the_next_open() {
    use rmcp::ServiceExt;
    use rmcp::model::CallToolRequestParams;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let python = installed("venv/bin/python");
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let (mut procs, alice, bob) = start_devnet(dir);
    let state = dir.join("py-state");
    std::fs::create_dir_all(&state).expect("state dir");
    let alice_dir = dir.join("alice");
    let config_path = alice_dir.join("brmcp.json");
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(&config_path).expect("brmcp.json"))
            .expect("json");
    config["upstreams"] = json!([{
        "name": "py",
        "command": python,
        "args": [here("upstream_server.py")],
        "env": {"UPSTREAM_STATE": state},
        "tools": {"hang": 700}
    }]);
    std::fs::write(&config_path, config.to_string()).expect("write brmcp.json");
    let serve = spawn(
        &mut procs,
        brmcp(&["serve", "--datadir", alice_dir.to_str().expect("utf-8")]),
    );
    wait_for(&serve, "serving upstream(s) py");
    wait_until_up(&alice_dir, 1).await;
    let serve_index = procs.0.len() - 1;
    let (_bridge_dir, listen, token) = start_bridge(&mut procs, dir, &alice, "autopay");

    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("http://{listen}/mcp/{alice}"))
            .auth_header(token),
    );
    let client = ().serve(transport).await.expect("MCP session through the bridge");
    let call = tokio::spawn(async move {
        let _ = client.call_tool(CallToolRequestParams::new("hang")).await;
        client
    });
    // Inside the upstream's handler, the call is charged and pending: kill the server.
    // (One upstream: its tools keep their names.)
    let pid_file = state.join("hang.pid");
    for _ in 0..1200 {
        if pid_file.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(pid_file.exists(), "the upstream never entered hang");
    let serve_child = &mut procs.0[serve_index];
    serve_child.kill().expect("SIGKILL serve");
    let _ = serve_child.wait();
    call.abort();

    // Opening the ledger refunds the call the dead server left pending.
    let mut all = vec!["serve", "--datadir", alice_dir.to_str().expect("utf-8")];
    all.push("journal");
    let out = brmcp(&all).output().expect("brmcp serve journal");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refunded 1 interrupted call(s)"),
        "{stderr}"
    );
    let journal = serve_json(&alice_dir, "journal");
    let hang = journal
        .as_array()
        .expect("an array")
        .iter()
        .find(|c| c["tool"] == "hang")
        .unwrap_or_else(|| panic!("no hang entry in\n{journal}"));
    assert_eq!(hang["state"], "refunded", "{hang}");
    assert_eq!(balance_matoms(&alice_dir, &bob), 700_000);
}
