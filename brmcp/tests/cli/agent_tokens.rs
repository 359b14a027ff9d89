//! `brmcp bridge token add/list/remove`: an agent's token is printed once and kept
//! only as its hash; the list shows names, caps, bots and approvers, never a token; the
//! default agent's `token show` keeps working beside the agents. An agent `add` makes
//! is approved by the user only, unless `--agent-approves`.

use std::process::{Command, Output};

use serde_json::{Value, json};

const ALICE: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

fn bridge(data: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["bridge", "--datadir", data])
        .args(args)
        .output()
        .expect("run brmcp")
}

fn ok(out: Output) -> String {
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn an_agents_token_is_shown_once_and_kept_as_a_hash() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8");
    ok(bridge(data, &["bots", "add", "alice", ALICE]));
    let default = ok(bridge(data, &["token", "show"])).trim().to_owned();

    let ci = ok(bridge(
        data,
        &[
            "token",
            "add",
            "ci",
            "--per-call-cap",
            "500",
            "--per-day-cap",
            "2000",
            "--bot",
            "alice",
        ],
    ))
    .trim()
    .to_owned();
    assert_eq!(ci.len(), 32, "{ci}");
    let made: Value = serde_json::from_str(&ok(bridge(
        data,
        &[
            "token",
            "add",
            "chat",
            "--per-call-cap",
            "1",
            "--per-day-cap",
            "2",
            "--json",
        ],
    )))
    .expect("json");
    let chat = made["token"].as_str().expect("token").to_owned();
    assert_eq!(made["name"], "chat");

    let file = std::fs::read_to_string(dir.path().join("mcpclient.json")).expect("settings");
    assert!(!file.contains(&ci) && !file.contains(&chat), "{file}");
    let settings: Value = serde_json::from_str(&file).expect("settings json");
    assert_eq!(settings["agents"][0]["name"], "ci");
    assert_eq!(settings["agents"][0]["bots"], json!([ALICE]));
    assert_eq!(
        settings["agents"][0]["token_sha256"].as_str().map(str::len),
        Some(64)
    );
    assert_eq!(
        settings["token"],
        default.as_str(),
        "the default agent's token stays"
    );

    let listed = ok(bridge(data, &["token", "list"]));
    assert!(!listed.contains(&ci) && !listed.contains(&chat), "{listed}");
    assert!(
        listed.contains("ci") && listed.contains("alice") && listed.contains("2000"),
        "{listed}"
    );
    let listed: Value =
        serde_json::from_str(&ok(bridge(data, &["token", "list", "--json"]))).expect("json");
    assert_eq!(
        listed,
        json!([
            {"name": "ci", "per_call_cap_atoms": 500, "per_day_cap_atoms": 2000, "bots": [ALICE], "approver": "user"},
            {"name": "chat", "per_call_cap_atoms": 1, "per_day_cap_atoms": 2, "bots": [], "approver": "user"},
        ])
    );

    // Refusals say why and change nothing.
    let before = std::fs::read(dir.path().join("mcpclient.json")).expect("settings");
    for (args, said) in [
        (
            vec![
                "token",
                "add",
                "ci",
                "--per-call-cap",
                "1",
                "--per-day-cap",
                "1",
            ],
            "exists",
        ),
        (
            vec![
                "token",
                "add",
                "x",
                "--per-call-cap",
                "1",
                "--per-day-cap",
                "1",
                "--bot",
                "bob",
            ],
            "no allowed bot \"bob\"",
        ),
        (
            vec![
                "token",
                "add",
                "default",
                "--per-call-cap",
                "1",
                "--per-day-cap",
                "1",
            ],
            "the name of the file's `token`",
        ),
        (
            vec!["token", "remove", "nobody"],
            "no agent named \"nobody\"",
        ),
    ] {
        let out = bridge(data, &args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {out:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(said),
            "{out:?}"
        );
    }
    assert_eq!(
        std::fs::read(dir.path().join("mcpclient.json")).expect("settings"),
        before
    );

    ok(bridge(data, &["token", "remove", "ci"]));
    let listed: Value =
        serde_json::from_str(&ok(bridge(data, &["token", "list", "--json"]))).expect("json");
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(ok(bridge(data, &["token", "show"])).trim(), default);
}

#[test]
fn an_added_agent_is_approved_by_the_user_unless_told_otherwise() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8");
    let add = |name: &str, extra: &[&str]| {
        let mut args = vec![
            "token",
            "add",
            name,
            "--per-call-cap",
            "1",
            "--per-day-cap",
            "1",
        ];
        args.extend_from_slice(extra);
        let out = bridge(data, &args);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let said = add("ci", &[]);
    assert!(said.contains("only you approve its payments"), "{said}");
    let said = add("chat", &["--agent-approves"]);
    assert!(said.contains("its own client may approve"), "{said}");

    let file = std::fs::read_to_string(dir.path().join("mcpclient.json")).expect("settings");
    let settings: Value = serde_json::from_str(&file).expect("settings json");
    assert_eq!(settings["agents"][0]["approver"], "user", "{file}");
    assert_eq!(settings["agents"][1]["approver"], "agent", "{file}");
    assert!(settings.get("approver").is_none(), "{file}");

    let listed = ok(bridge(data, &["token", "list"]));
    let row = |name: &str| {
        listed
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_default()
            .split_whitespace()
            .last()
            .map(str::to_owned)
    };
    assert!(
        listed
            .lines()
            .next()
            .unwrap_or_default()
            .contains("APPROVER"),
        "{listed}"
    );
    assert_eq!(row("ci").as_deref(), Some("user"), "{listed}");
    assert_eq!(row("chat").as_deref(), Some("agent"), "{listed}");

    // A hand edit naming an approver this version does not know is refused, naming the
    // file and the key.
    let edited = file.replace("\"agent\"", "\"robot\"");
    std::fs::write(dir.path().join("mcpclient.json"), edited).expect("edit");
    let out = bridge(data, &["token", "list"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("mcpclient.json: agents[1].approver: unknown variant `robot`"),
        "{err}"
    );
}
