//! The bridge's file-only commands as a new user meets them: `bots add` never moves a
//! name nor renames a bot unless asked, every bot command says what it did, the lists
//! take `--json`, and `--listen` takes a host name that resolves to loopback.

use std::process::{Command, Output};

use serde_json::{Value, json};

const ALICE: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const OTHER: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

fn bridge(data: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["bridge", "--datadir", data])
        .args(args)
        .output()
        .expect("run brmcp")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn names(data: &str) -> Value {
    let out = bridge(data, &["bots", "list", "--json"]);
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"))
}

#[test]
fn bots_add_refuses_to_move_or_rename_unless_asked_and_says_what_it_did() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8");

    let out = bridge(data, &["bots", "add", "alice", ALICE]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), format!("added bot alice ({ALICE})\n"));
    let out = bridge(data, &["bots", "add", "alice", ALICE]);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout(&out).contains("nothing changed"), "{out:?}");

    // The name is alice's: another bot does not get it silently.
    let before = std::fs::read(dir.path().join("mcpclient.json")).expect("settings");
    let out = bridge(data, &["bots", "add", "alice", OTHER]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = stderr(&out);
    assert!(
        said.contains(&format!("bot name \"alice\" is bot {ALICE}'s"))
            && said.contains("--replace"),
        "{said}"
    );
    // Nor is alice renamed silently.
    let out = bridge(data, &["bots", "add", "zed", ALICE]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = stderr(&out);
    assert!(
        said.contains(&format!("bot {ALICE} is named \"alice\"")) && said.contains("--replace"),
        "{said}"
    );
    assert_eq!(
        std::fs::read(dir.path().join("mcpclient.json")).expect("settings"),
        before,
        "a refused add changes nothing"
    );
    assert_eq!(names(data), json!([{"name": "alice", "uid": ALICE}]));

    // Asked: renamed, then the name moved (its old bot stays allowed, unnamed).
    let out = bridge(data, &["bots", "add", "zed", ALICE, "--replace"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        stdout(&out),
        format!("renamed bot {ALICE} from alice to zed\n")
    );
    let out = bridge(data, &["bots", "add", "zed", OTHER, "--replace"]);
    assert!(out.status.success(), "{out:?}");
    let said = stdout(&out);
    assert!(
        said.contains(&format!(
            "moved the name zed from bot {ALICE} to bot {OTHER}"
        )) && said.contains(&format!("added bot zed ({OTHER})")),
        "{said}"
    );
    assert_eq!(
        names(data),
        json!([{"name": null, "uid": ALICE}, {"name": "zed", "uid": OTHER}])
    );
    let out = bridge(data, &["bots", "add", "alice", ALICE]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(stdout(&out), format!("named bot {ALICE} alice\n"));

    // The table, then removal by name and by uid, each said.
    let out = bridge(data, &["bots", "list"]);
    assert_eq!(
        stdout(&out),
        format!("NAME   UID\nalice  {ALICE}\nzed    {OTHER}\n")
    );
    let out = bridge(data, &["bots", "remove", "zed"]);
    assert_eq!(stdout(&out), format!("removed bot zed ({OTHER})\n"));
    let out = bridge(data, &["bots", "remove", ALICE]);
    assert_eq!(stdout(&out), format!("removed bot alice ({ALICE})\n"));
    let out = bridge(data, &["bots", "remove", ALICE]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert_eq!(names(data), json!([]));

    // `directory` is the directory endpoints' path, never a bot's name.
    let out = bridge(data, &["bots", "add", "directory", ALICE]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(stderr(&out).contains("reserved"), "{out:?}");
}

#[test]
fn token_show_takes_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8");
    let plain = stdout(&bridge(data, &["token", "show"])).trim().to_owned();
    let out = bridge(data, &["token", "show", "--json"]);
    assert!(out.status.success(), "{out:?}");
    let shown: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(shown, json!({"token": plain}));
}

#[test]
fn listen_takes_loopback_names_and_refuses_others_naming_the_flag() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().to_str().expect("utf-8");
    // Accepted (the command then needs its client: a fresh directory's template asks
    // for it).
    for (i, listen) in ["localhost:8892", "127.0.0.1:8892", "[::1]:8892"]
        .into_iter()
        .enumerate()
    {
        let fresh = dir.path().join(i.to_string());
        let out = bridge(fresh.to_str().expect("utf-8"), &["--listen", listen]);
        assert_eq!(out.status.code(), Some(1), "{listen}: {out:?}");
        assert!(
            stderr(&out).contains("brmcp-bridge.conf"),
            "{listen}: {out:?}"
        );
    }
    let out = bridge(data, &["--listen", "192.0.2.7:8892"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = stderr(&out);
    assert!(
        said.contains("--listen 192.0.2.7:8892") && said.contains("--allow-remote"),
        "{said}"
    );
    // A name that does not resolve is a usage error naming the flag.
    let out = bridge(data, &["--listen", "no-such-host.invalid:8892"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(stderr(&out).contains("--listen"), "{out:?}");
}
