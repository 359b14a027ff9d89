//! The operator's and the user's file-only commands: first runs, the ledger, bots and
//! the token.

use std::process::{Command, Output};

fn brmcp(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(args)
        .output()
        .expect("run brmcp")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

const UID: &str = "a1b2c3d4e5f60718a1b2c3d4e5f60718a1b2c3d4e5f60718a1b2c3d4e5f60718";

#[test]
fn serve_first_run_writes_its_files_and_says_what_to_edit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("serve");
    let data_arg = data.to_str().expect("utf-8");
    let out = brmcp(&["serve", "--datadir", data_arg]);
    assert!(out.status.success(), "{}", text(&out));
    let said = text(&out);
    assert!(said.contains("brmcp-serve.conf"), "{said}");
    assert!(said.contains("allowed_uids"), "{said}");
    let conf = std::fs::read_to_string(data.join("brmcp-serve.conf")).expect("conf written");
    assert!(conf.contains("brrpcurl=wss://127.0.0.1:7676/ws"), "{conf}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("brmcp.json")).expect("json"))
            .expect("valid json");
    assert_eq!(
        json,
        serde_json::json!({"allowed_uids": [], "calls_per_minute": 30})
    );

    // Second run: the files exist, so it tries the client, which is not there.
    let out = brmcp(&["serve", "--datadir", data_arg]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).starts_with("brmcp: "), "{}", text(&out));
}

#[test]
fn ledger_commands_credit_list_and_refuse_bad_input() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8");
    let out = brmcp(&[
        "serve",
        "--datadir",
        data,
        "credit",
        UID,
        "5",
        "--reason",
        "welcome",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("credited 5 atoms"), "{}", text(&out));
    let out = brmcp(&["serve", "--datadir", data, "balances"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{UID} 5000 matoms (5 atoms)\n")
    );
    let out = brmcp(&["serve", "--datadir", data, "journal"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = brmcp(&["serve", "--datadir", data, "refund", "999", "--reason", "x"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "refunding no call fails: {}",
        text(&out)
    );
    let out = brmcp(&[
        "serve",
        "--datadir",
        data,
        "credit",
        "not-a-uid",
        "5",
        "--reason",
        "x",
    ]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad uid is a usage error: {}",
        text(&out)
    );
}

#[test]
fn bridge_bots_and_token_commands_edit_the_settings_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8");
    let out = brmcp(&["bridge", "--datadir", data, "bots", "add", "fortune", UID]);
    assert!(out.status.success(), "{}", text(&out));
    let out = brmcp(&["bridge", "--datadir", data, "bots", "list"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{UID} fortune\n")
    );
    let out = brmcp(&["bridge", "--datadir", data, "bots", "add", "bad name!", UID]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    let first = brmcp(&["bridge", "--datadir", data, "token", "show"]);
    let first = String::from_utf8_lossy(&first.stdout).trim().to_owned();
    assert_eq!(first.len(), 32, "{first}");
    let again = brmcp(&["bridge", "--datadir", data, "token", "show"]);
    assert_eq!(String::from_utf8_lossy(&again.stdout).trim(), first);
    let rotated = brmcp(&["bridge", "--datadir", data, "token", "rotate"]);
    let rotated = String::from_utf8_lossy(&rotated.stdout).trim().to_owned();
    assert_ne!(rotated, first);
    let settings: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("mcpclient.json")).expect("settings"),
    )
    .expect("json");
    assert_eq!(settings["token"], serde_json::json!(rotated));
    assert_eq!(settings["allowed_bots"], serde_json::json!([UID]));

    let out = brmcp(&["bridge", "--datadir", data, "bots", "remove", "fortune"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = brmcp(&["bridge", "--datadir", data, "bots", "list"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");

    // A broken settings file is an error, never "allow all".
    std::fs::write(dir.path().join("mcpclient.json"), "{not json").expect("write");
    let out = brmcp(&["bridge", "--datadir", data, "bots", "list"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
}
