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
