//! `brmcp demo` runs the whole stack on a simulated network and exits 0; with
//! `--directory`, the discovery loop, exiting nonzero when a step fails.

use std::process::Command;

/// Fails unless every one of `expected` is in the demo's `stdout`.
fn assert_all_in(stdout: &str, expected: &[&str]) {
    for expected in expected {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}

/// The demo's line starting with `prefix` and the numbers in it, in order.
fn wallet_line<'a>(stdout: &'a str, prefix: &str) -> (&'a str, Vec<i64>) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .expect("wallet line");
    let numbers = line
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    (line, numbers)
}

#[test]
fn demo_completes_a_free_and_a_paid_call() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["demo", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run brmcp demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    // The transcript is the MCP exchange and the money, not log lines.
    assert!(!stderr.contains(" INFO "), "{stderr}");
    assert_all_in(
        &stdout,
        &[
            "echo     0 atoms",
            "fortune  10000 atoms",
            "<- {\"echo\":\"hello over Bison Relay\"}",
            "the bridge tipped 10000 atoms (Paid) and reissued the call",
            "<- {\"fortune\":",
            "bridge spend log: 1 payment(s), 10000 atoms in the last 24 hours",
            "demo complete",
        ],
    );
    // The tip moved 10000 atoms (10,000,000 matoms) from bob's wallet to alice's.
    let (wallets, numbers) = wallet_line(&stdout, "wallets");
    assert_eq!(numbers.len(), 4, "{wallets}");
    assert_eq!(numbers[1] - numbers[0], 10_000_000, "{wallets}");
    assert_eq!(numbers[2] - numbers[3], 10_000_000, "{wallets}");
}

/// `brmcp demo --upstream` sells any stdio MCP server: here the Python one of the
/// upstream tests, every tool at --price.
#[test]
fn demo_sells_an_upstream_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let workspace = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_owned();
    let python = workspace.join("target/interop/venv/bin/python");
    assert!(python.exists(), "run scripts/test-deps");
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/cli/upstream_server.py");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&state).expect("state dir");
    let out = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["demo", "--price", "1234", "--dir"])
        .arg(dir.path().join("net"))
        .arg("--upstream")
        // The upstream starts with a clean environment: its variable goes through `env`.
        .arg(format!(
            "env UPSTREAM_STATE={} {} {}",
            state.display(),
            python.display(),
            script.display()
        ))
        .output()
        .expect("run brmcp demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert_all_in(
        &stdout,
        &[
            "echo     1234 atoms",
            "secret   1234 atoms",
            // A harmless tool: the echo, never one that could print secrets.
            "agent -> tools/call echo {\"text\":\"hello over Bison Relay\"}",
            "<- {\"result\":\"echo: hello over Bison Relay\"}",
            "the bridge tipped 1234 atoms (Paid) and reissued the call",
            "bridge spend log: 1 payment(s), 1234 atoms in the last 24 hours",
            "demo complete: a paid call to the upstream",
        ],
    );
}

/// `brmcp demo --directory` runs the discovery loop: the provider registers and pays
/// the invoice, the directory crawls and test-pays it, the operator approves, the agent
/// searches through the bridge, adds the bot (confirming) and pays for the found tool.
#[test]
fn demo_directory_runs_the_discovery_loop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["demo", "--directory", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run brmcp demo --directory");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    let alice = stdout
        .lines()
        .find_map(|l| l.strip_prefix("devnet: alice "))
        .and_then(|l| l.split_whitespace().next())
        .expect("alice's uid")
        .to_owned();
    assert_all_in(
        &stdout,
        &[
            "[1] directory devnet-directory up",
            "registration: pending_review",
            "crawled 3 tool(s); paid test of fortune: ok (10000 atoms paid); fee 5000 atoms",
            "\"testOutcome\":\"ok\"",
            "<- {\"expiresAt\":",
            "\"state\":\"listed\"}",
            "1 of 1 matching tools",
            &format!("\"fortune\" of bot {alice}"),
            "10000 atoms",
            "(the user accepts)",
            "<- added bot",
            "<- {\"fortune\":",
            &format!("the bridge tipped 10000 atoms (Paid) to {alice}"),
            "bridge spend log: 1 payment(s), 10000 atoms in the last 24 hours",
            "demo complete",
        ],
    );
    // alice paid fee + budget (15,000 atoms) once, and was paid 10,000 by the
    // directory's test and 10,000 by the agent: 5,000 atoms up.
    let (wallet, numbers) = wallet_line(&stdout, "alice's wallet");
    assert_eq!(numbers.len(), 2, "{wallet}");
    assert_eq!(numbers[1] - numbers[0], 5_000_000, "{wallet}");
}

/// `brmcp demo --announce`: alice's bot announces itself in a post, bob's bridge
/// (subscribed to her posts, not knowing her bot) discovers it, the user adds it and
/// the agent pays for a fortune.
#[test]
fn demo_announce_discovers_adds_and_pays_an_announced_bot() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["demo", "--announce", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run brmcp demo --announce");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert_all_in(
        &stdout,
        &[
            "bridge: bob subscribed to alice's posts",
            "  | ```brmcp-announcement v1",
            "bob's bridge discovered",
            "    fortune: 10000 atoms per call",
            "user -> bots add fortunes",
            "  <- {\"fortune\":",
            "(the bridge tipped 10000 atoms (Paid))",
            "demo complete: an announced bot was discovered, added and paid",
        ],
    );
}

/// A step that fails makes the demo exit nonzero with the reason: here the devnet
/// cannot start, a node's state file being garbage.
#[test]
fn demo_directory_fails_loudly_when_a_step_fails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let alice = dir.path().join("devnet").join("alice");
    std::fs::create_dir_all(&alice).expect("node dir");
    std::fs::write(alice.join("devnet-node.json"), "not json").expect("state file");
    let out = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["demo", "--directory", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run brmcp demo --directory");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "demo succeeded:\n{stdout}\n{stderr}");
    assert!(stderr.contains("devnet-node.json"), "{stderr}");
    assert!(!stdout.contains("demo complete"), "{stdout}");
}
