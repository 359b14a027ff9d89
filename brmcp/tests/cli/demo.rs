//! `brmcp demo` runs the whole stack on a simulated network and exits 0.

use std::process::Command;

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
    for expected in [
        "echo     0 atoms",
        "fortune  10000 atoms",
        "<- {\"echo\":\"hello over Bison Relay\"}",
        "the bridge tipped 10000 atoms (Paid) and reissued the call",
        "<- {\"fortune\":",
        "bridge spend log: 1 payment(s), 10000 atoms in the last 24 hours",
        "demo complete",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
    // The tip moved 10000 atoms (10,000,000 matoms) from bob's wallet to alice's.
    let wallets = stdout
        .lines()
        .find(|l| l.starts_with("wallets"))
        .expect("wallet line");
    let numbers: Vec<i64> = wallets
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
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
        .arg(format!("{} {}", python.display(), script.display()))
        .env("UPSTREAM_STATE", &state)
        .output()
        .expect("run brmcp demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    for expected in [
        "echo     1234 atoms",
        "secret   1234 atoms",
        "agent -> tools/call pricey {}",
        "the bridge tipped 1234 atoms (Paid) and reissued the call",
        "<- {\"result\":\"never paid for\"}",
        "bridge spend log: 1 payment(s), 1234 atoms in the last 24 hours",
        "demo complete: a paid call to the upstream",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}
