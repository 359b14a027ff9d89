//! The README's set-up text, walked through: its commands are read out of README.md
//! and run (the built `brmcp`, never a new build), so an edit that breaks a step fails
//! here. As far as a machine without a real Bison Relay allows:
//!
//! - *Set up*: the two commands of its `sh` block. `cargo run --release -p brmcp --
//!   demo` runs as the built binary; `scripts/test` (which runs this test) is checked,
//!   not run: it parses, every script it calls exists, and `.ci/run` runs it. A new
//!   command there fails the test until it is walked through here too.
//! - *Trying it without Bison Relay*: the devnet command as written, then the `serve`
//!   and `bridge` commands the devnet prints, as printed; then, as the bullets on
//!   calling tools say, the URL the bridge serves the bot at, the token from `token
//!   show`, a free call, a paid call refused while the caps are 0 (the default, which
//!   the bridge says when it starts), and paid once `mcpclient.json` sets a mode and
//!   caps, which the running bridge picks up.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use super::processes::{Procs, assert_devnet_bot_free_call, brmcp, free_port, spawn, wait_for};

/// How long the running bridge may take to apply an edited `mcpclient.json` (the README
/// promises a second).
const RELOAD: Duration = Duration::from_secs(10);

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_owned()
}

fn readme() -> String {
    std::fs::read_to_string(workspace().join("README.md")).expect("README.md")
}

/// The text of the section headed `heading`, up to the next section of its level.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    let body = &text[start + heading.len() + 2..];
    body.find("\n## ").map_or(body, |end| &body[..end])
}

/// The lines of the first fenced block of `lang` in `text`.
fn fenced(text: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    let start = text
        .find(&open)
        .unwrap_or_else(|| panic!("no ```{lang} block"));
    let body = &text[start + open.len()..];
    let end = body.find("```").expect("unclosed block");
    body[..end]
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// Every inline code span of `text`, whitespace (line wraps) collapsed.
fn spans(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// The first span of `text` that starts with `prefix`.
fn span(text: &str, prefix: &str) -> String {
    spans(text)
        .into_iter()
        .find(|s| s.starts_with(prefix))
        .unwrap_or_else(|| panic!("no `{prefix}...` in the README"))
}

/// The bullet of `text` that starts with `**title**`.
fn bullet<'a>(text: &'a str, title: &str) -> &'a str {
    let start = text
        .find(&format!("- **{title}**"))
        .unwrap_or_else(|| panic!("no bullet {title:?}"));
    let body = &text[start..];
    body[2..].find("\n- ").map_or(body, |end| &body[..end + 2])
}

/// `brmcp` run in `cwd` with the words of `line` after its `brmcp`.
fn command_line(line: &str, cwd: &Path) -> Command {
    let mut words = line.split_whitespace();
    assert_eq!(words.next(), Some("brmcp"), "{line}");
    let args: Vec<&str> = words.collect();
    let mut cmd = brmcp(&args);
    cmd.current_dir(cwd);
    cmd
}

fn run_ok(mut cmd: Command) -> String {
    let out = cmd.output().expect("run brmcp");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn readme_setup_commands_run() {
    let text = readme();
    let commands = fenced(section(&text, "## Set up"), "sh");
    assert_eq!(commands.len(), 2, "the two set-up commands: {commands:?}");
    for command in &commands {
        if let Some(rest) = command.strip_prefix("cargo run --release -p brmcp -- ") {
            // The built binary stands in for the release build.
            let tmp = tempfile::tempdir().expect("temp dir");
            let mut cmd = command_line(&format!("brmcp {rest}"), tmp.path());
            cmd.env("TMPDIR", tmp.path());
            let out = run_ok(cmd);
            for expected in ["echo", "fortune", "demo complete"] {
                assert!(
                    out.contains(expected),
                    "{command}: no {expected:?} in:\n{out}"
                );
            }
        } else if command == "scripts/test" {
            check_test_script(command);
        } else {
            panic!("the README's set-up command {command:?} is not walked through here");
        }
    }
}

/// `scripts/test` runs this test, so it is checked instead: it is executable, it
/// parses, every script it runs exists, and CI runs it.
fn check_test_script(command: &str) {
    let root = workspace();
    let script = root.join(command);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&script)
            .expect(command)
            .permissions()
            .mode();
        assert!(mode & 0o111 != 0, "{command} is not executable");
    }
    let parsed = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .expect("bash");
    assert!(parsed.success(), "{command} does not parse");
    let body = std::fs::read_to_string(&script).expect(command);
    let called: Vec<&str> = body
        .split_whitespace()
        .filter(|w| w.starts_with("scripts/"))
        .collect();
    assert!(!called.is_empty(), "{command} runs no helper scripts");
    for helper in called {
        assert!(
            root.join(helper).is_file(),
            "{command} runs {helper}, which is missing"
        );
    }
    assert!(
        body.contains("cargo test --workspace"),
        "{command} runs the tests"
    );
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    assert!(
        ci.lines()
            .map(str::trim)
            .any(|l| l == command || l == format!("bash {command}")),
        ".ci/run does not run {command}"
    );
}

/// The `mcpclient.json` keys the README names for spending.
fn set_spending(bridge_dir: &Path, text: &str) {
    let calling = bullet(text, "Calling tools (the agent's user).");
    let named = spans(calling);
    for key in ["mode", "per_call_cap_atoms", "per_day_cap_atoms", "autopay"] {
        assert!(named.iter().any(|s| s == key), "the README names `{key}`");
    }
    let path = bridge_dir.join("mcpclient.json");
    let mut settings: Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("mcpclient.json"))
            .expect("mcpclient.json is JSON");
    settings["mode"] = json!("autopay");
    settings["per_call_cap_atoms"] = json!(100_000);
    settings["per_day_cap_atoms"] = json!(1_000_000);
    std::fs::write(&path, settings.to_string()).expect("write mcpclient.json");
}

/// The value after `flag` in a printed command line.
fn flag<'a>(line: &'a str, flag: &str) -> &'a str {
    let mut words = line.split_whitespace();
    words.find(|w| *w == flag);
    words
        .next()
        .unwrap_or_else(|| panic!("no {flag} in {line}"))
}

fn is_paid(result: &rmcp::model::CallToolResult) -> bool {
    result.is_error != Some(true)
        && result
            .structured_content
            .as_ref()
            .is_some_and(|v| v.get("fortune").is_some())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_devnet_walkthrough_runs() {
    let text = readme();
    let using = section(&text, "## Using it with a real Bison Relay client");
    let cwd = tempfile::tempdir().expect("temp dir");
    let mut procs = Procs(Vec::new());

    // The devnet, as the README writes it.
    let trying = bullet(using, "Trying it without Bison Relay.");
    let devnet = span(trying, "brmcp devnet");
    let lines = spawn(&mut procs, command_line(&devnet, cwd.path()));
    let printed = wait_for(&lines, "Ctrl-C stops the devnet.");
    let commands: Vec<&str> = printed
        .iter()
        .map(|l| l.trim())
        .filter(|l| l.starts_with("brmcp "))
        .collect();
    let serve = commands
        .iter()
        .find(|c| c.starts_with("brmcp serve "))
        .unwrap_or_else(|| panic!("no serve command in:\n{}", printed.join("\n")));
    let bridges: Vec<&&str> = commands
        .iter()
        .filter(|c| c.starts_with("brmcp bridge "))
        .collect();
    assert!(
        !bridges.is_empty(),
        "no bridge commands in:\n{}",
        printed.join("\n")
    );

    // The printed commands, as printed; the bridge on a free port (8891 may be taken).
    let served = spawn(&mut procs, command_line(serve, cwd.path()));
    wait_for(&served, "serving echo and fortune");
    let mut bridge_out = None;
    let mut bot = None;
    let listen = format!("127.0.0.1:{}", free_port());
    for command in &bridges {
        if command.contains(" bots add ") {
            bot = command.split_whitespace().last().map(str::to_owned);
            run_ok(command_line(command, cwd.path()));
        } else {
            let mut cmd = command_line(command, cwd.path());
            cmd.args(["--listen", &listen]);
            let lines = spawn(&mut procs, cmd);
            bridge_out = Some((command, wait_for(&lines, "Ctrl-C stops the bridge.")));
        }
    }
    let (bridge_command, bridge_out) = bridge_out.expect("a command that starts the bridge");
    let bot = bot.expect("a `bots add` command");
    let bridge_dir = cwd.path().join(flag(bridge_command, "--datadir"));

    // Where the README says the bot is served, on the default port `--help` shows.
    let calling = bullet(using, "Calling tools (the agent's user).");
    let url = span(calling, "http://127.0.0.1:");
    let default = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port")
        .to_owned();
    let help = run_ok(command_line("brmcp bridge --help", cwd.path()));
    assert!(
        help.contains(&format!("[default: {default}]")),
        "the README's {default} is not the default --listen:\n{help}"
    );
    let served_at = url.replace(&default, &listen).replace("<bot uid>", &bot);
    let said = bridge_out.join("\n");
    assert!(said.contains(&served_at), "no {served_at} in:\n{said}");
    assert!(
        said.contains("never pay"),
        "the bridge says the caps are 0 when it starts:\n{said}"
    );

    // The token from `token show`, as an agent is given it.
    assert!(
        spans(calling).iter().any(|s| s.contains("token show")),
        "the README names `token show`"
    );
    let datadir = bridge_dir.to_str().expect("utf-8");
    let token = run_ok(command_line(
        &format!("brmcp bridge --datadir {datadir} token show"),
        cwd.path(),
    ))
    .trim()
    .to_owned();
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(served_at).auth_header(token),
    );
    let client = ().serve(transport).await.expect("MCP session through the bridge");
    assert_devnet_bot_free_call(&client).await;

    // Both caps default to 0, which means never pay.
    let refused = client
        .call_tool(CallToolRequestParams::new("fortune"))
        .await
        .expect("fortune");
    assert!(!is_paid(&refused), "paid with caps of 0: {refused:?}");

    // A mode and caps in mcpclient.json, picked up by the running bridge.
    set_spending(&bridge_dir, &text);
    let deadline = std::time::Instant::now() + RELOAD;
    loop {
        let result = client
            .call_tool(CallToolRequestParams::new("fortune"))
            .await
            .expect("fortune");
        if is_paid(&result) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not paid {RELOAD:?} after the caps were set: {result:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = client.cancel().await;
}
