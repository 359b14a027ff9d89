//! The operator's and the user's file-only commands: first runs, the ledger, bots and
//! the token.

use std::process::{Command, Output};

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::bridge::{Payment, SpendLog, Spender};
use brmcp::server::{CallId, CallRequest, Charge, Ledger};
use serde_json::Value;

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
    let json: Value =
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
    let out = brmcp(&["serve", "--datadir", data, "balances"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("no ledger in {data} (brmcp.sqlite is missing)")),
        "{}",
        text(&out)
    );
    let out = brmcp(&[
        "serve",
        "--datadir",
        data,
        "credit",
        UID,
        "5",
        "--reason",
        "welcome",
        "--create",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("credited 5 atoms"), "{}", text(&out));
    let out = brmcp(&["serve", "--datadir", data, "balances"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "CALLER{}  BALANCE (ATOMS)  RESERVED (ATOMS)\n{UID}  5.000{}  0.000\n",
            " ".repeat(58),
            " ".repeat(10)
        )
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

/// 2026-01-01T00:00:00Z.
const NOW: UnixTime = UnixTime(1_767_225_600);

/// A ledger in `dir` holding one completed `fortune` call of 10 atoms by [`UID`], who
/// was credited 15 atoms first; returns the call.
fn ledger_with_a_call(dir: &std::path::Path) -> CallId {
    let caller: PeerId = UID.parse().expect("uid");
    let ledger = Ledger::open(dir, NOW).expect("ledger").ledger;
    ledger
        .manual_credit(&caller, 15_000, "welcome", NOW)
        .expect("credit");
    let request = CallRequest {
        caller,
        tool: "fortune",
        price_atoms: 10,
        keyed: None,
    };
    let Charge::Run(call) = ledger.charge(&request, NOW).expect("charge") else {
        panic!("the call is charged");
    };
    ledger
        .complete(call, "{}", UnixTime(NOW.0 + 61))
        .expect("complete");
    call
}

fn json_of(out: &Output) -> Value {
    assert!(out.status.success(), "{}", text(out));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(out)))
}

#[test]
fn journal_refund_and_balances_print_tables_and_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let call = ledger_with_a_call(dir.path()).get().to_string();
    let data = dir.path().to_str().expect("utf-8");

    let out = brmcp(&["serve", "--datadir", data, "journal"]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "ID", "STARTED", "FINISHED", "CALLER", "TOOL", "ATOMS", "STATE", "REASON"
        ]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        row,
        [
            call.as_str(),
            "2026-01-01T00:00:00Z",
            "2026-01-01T00:01:01Z",
            UID,
            "fortune",
            "10",
            "completed"
        ],
        "{table}"
    );
    // Aligned: each column starts where its header does.
    assert_eq!(lines[1].find(UID), lines[0].find("CALLER"), "{table}");

    let journal = json_of(&brmcp(&["serve", "--datadir", data, "journal", "--json"]));
    let entry = &journal.as_array().expect("an array")[0];
    assert_eq!(entry["id"].as_i64(), call.parse().ok());
    assert_eq!(entry["caller"], UID);
    assert_eq!(entry["tool"], "fortune");
    assert_eq!(entry["price_atoms"], 10);
    assert_eq!(entry["state"], "completed");
    assert_eq!(entry["started_at"], NOW.0);
    assert_eq!(entry["started_at_rfc3339"], "2026-01-01T00:00:00Z");
    assert_eq!(entry["finished_at"], NOW.0 + 61);
    assert_eq!(entry["finished_at_rfc3339"], "2026-01-01T00:01:01Z");

    // The refund says what it gave back and, separately, the balance it left.
    let out = brmcp(&[
        "serve",
        "--datadir",
        data,
        "refund",
        &call,
        "--reason",
        "bad",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "refunded call {call} (fortune): 10 atoms returned to {UID}; new balance 15.000 atoms\n"
        )
    );
    let out = brmcp(&["serve", "--datadir", data, "journal", "--json"]);
    let entry = &json_of(&out)[0];
    assert_eq!(entry["state"], "refunded");
    assert_eq!(entry["reason"], "bad");
    // Refunded once only: a second refund fails and changes nothing.
    let out = brmcp(&["serve", "--datadir", data, "refund", &call, "--reason", "x"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));

    let balances = json_of(&brmcp(&["serve", "--datadir", data, "balances", "--json"]));
    assert_eq!(
        balances,
        serde_json::json!([{"caller": UID, "balance_matoms": 15_000, "balance_atoms": 15, "reserved_matoms": 0}])
    );
    let credit = json_of(&brmcp(&[
        "serve",
        "--datadir",
        data,
        "credit",
        UID,
        "2",
        "--reason",
        "r",
        "--json",
    ]));
    assert_eq!(
        credit,
        serde_json::json!({"caller": UID, "credited_atoms": 2, "credited_matoms": 2_000, "balance_matoms": 17_000})
    );
}

#[test]
fn a_refund_as_json_names_the_amount_and_the_balance_apart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let call = ledger_with_a_call(dir.path()).get().to_string();
    let data = dir.path().to_str().expect("utf-8");
    let refund = json_of(&brmcp(&[
        "serve",
        "--datadir",
        data,
        "refund",
        &call,
        "--reason",
        "r",
        "--json",
    ]));
    assert_eq!(refund["refunded_atoms"], 10);
    assert_eq!(refund["balance_matoms"], 15_000);
    assert_eq!(refund["caller"], UID);
    assert_eq!(refund["call"].as_i64(), call.parse().ok());
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn is_rfc3339_utc(text: &str) -> bool {
    let shape = "dddd-dd-ddTdd:dd:ddZ";
    text.len() == shape.len()
        && text.chars().zip(shape.chars()).all(|(c, s)| match s {
            'd' => c.is_ascii_digit(),
            _ => c == s,
        })
}

#[test]
fn spend_prints_a_table_and_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let bot: PeerId = UID.parse().expect("uid");
    // Recent, as the log drops settled payments once they are old.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let now = UnixTime(i64::try_from(secs).expect("in range") - 7_200);
    {
        let log = SpendLog::open(dir.path(), now).expect("spend log");
        let paid = log
            .reserve_as(
                now,
                &Spender::agent("ci", Some(50)),
                Payment::new(&bot, "fortune", 10),
                100,
                0,
            )
            .expect("sqlite")
            .expect("fits");
        assert!(log.settle(paid, Ok(())).expect("settle"));
        log.reserve(UnixTime(now.0 + 3_600), &bot, "echo", 20, 100, 0)
            .expect("sqlite")
            .expect("fits");
    }
    let data = dir.path().to_str().expect("utf-8");
    let out = brmcp(&["bridge", "--datadir", data, "spend"]);
    assert!(out.status.success(), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "ID", "TIME", "AGENT", "BOT", "TOOL", "ATOMS", "STATUS", "NOTE"
        ],
        "{table}"
    );
    let rows: Vec<Vec<&str>> = lines[1..3]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let fortune = rows.iter().find(|r| r[4] == "fortune").expect("{table}");
    assert!(is_rfc3339_utc(fortune[1]), "{table}");
    assert_eq!(
        fortune[2..],
        ["ci", UID, "fortune", "10", "paid"],
        "{table}"
    );
    let echo = rows.iter().find(|r| r[4] == "echo").expect("{table}");
    assert!(is_rfc3339_utc(echo[1]), "{table}");
    assert_eq!(
        echo[2..],
        ["default", UID, "echo", "20", "pending"],
        "{table}"
    );
    assert!(lines[3].starts_with("last 24 hours: 30 atoms"), "{table}");

    let spend = json_of(&brmcp(&["bridge", "--datadir", data, "spend", "--json"]));
    let rows = spend.as_array().expect("an array");
    assert_eq!(rows.len(), 2, "{spend}");
    let fortune = rows
        .iter()
        .find(|r| r["tool"] == "fortune")
        .expect("fortune");
    assert_eq!(fortune["ts"], now.0);
    assert!(
        is_rfc3339_utc(fortune["ts_rfc3339"].as_str().expect("a string")),
        "{spend}"
    );
    assert_eq!(fortune["bot"], UID);
    assert_eq!(fortune["atoms"], 10);
    assert_eq!(fortune["status"], "paid");
    assert_eq!(fortune["rail"], "tip");
    assert!(fortune["id"].is_i64(), "{spend}");
    assert_eq!(fortune["bot_name"], Value::Null);
    assert_eq!(fortune["agent"], "ci");
    let echo = rows.iter().find(|r| r["tool"] == "echo").expect("echo");
    assert_eq!(echo["status"], "pending");
    assert_eq!(echo["unconfirmed"], false);

    // Named by the user, a bot is shown by its name.
    let out = brmcp(&["bridge", "--datadir", data, "bots", "add", "oracle", UID]);
    assert!(out.status.success(), "{}", text(&out));
    let out = brmcp(&["bridge", "--datadir", data, "spend"]);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let fortune: Vec<&str> = table
        .lines()
        .find(|l| l.contains("fortune"))
        .expect("{table}")
        .split_whitespace()
        .collect();
    assert_eq!(fortune[2..6], ["ci", "oracle", "fortune", "10"], "{table}");
    let spend = json_of(&brmcp(&["bridge", "--datadir", data, "spend", "--json"]));
    assert!(
        spend
            .as_array()
            .expect("an array")
            .iter()
            .all(|r| r["bot_name"] == "oracle" && r["bot"] == UID),
        "{spend}"
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
        format!("NAME     UID\nfortune  {UID}\n")
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
    let settings: Value = serde_json::from_str(
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

#[test]
fn a_mistyped_data_directory_is_refused_not_given_a_new_ledger() {
    let dir = tempfile::tempdir().expect("temp dir");
    ledger_with_a_call(dir.path());
    let typo = dir.path().join("alicee");
    let typo_arg = typo.to_str().expect("utf-8");
    for args in [
        &["credit", UID, "5000", "--reason", "x"][..],
        &["balances"],
        &["journal"],
        &["refund", "1", "--reason", "x"],
    ] {
        let mut all = vec!["serve", "--datadir", typo_arg];
        all.extend_from_slice(args);
        let out = brmcp(&all);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        let said = text(&out);
        assert!(said.contains(&format!("no ledger in {typo_arg}")), "{said}");
        assert!(!said.contains("credited"), "{said}");
        assert!(
            !typo.join("brmcp.sqlite").exists(),
            "{args:?} made a ledger"
        );
    }
    let said = text(&brmcp(&[
        "serve",
        "--datadir",
        typo_arg,
        "credit",
        UID,
        "5",
        "--reason",
        "x",
    ]));
    assert!(said.contains("Add --create"), "{said}");
}

#[test]
fn nothing_is_credited_or_refunded_for_zero_atoms() {
    let dir = tempfile::tempdir().expect("temp dir");
    let caller: PeerId = UID.parse().expect("uid");
    let ledger = Ledger::open(dir.path(), NOW).expect("ledger").ledger;
    ledger
        .manual_credit(&caller, 5_000, "welcome", NOW)
        .expect("credit");
    let request = CallRequest {
        caller,
        tool: "echo",
        price_atoms: 0,
        keyed: None,
    };
    let Charge::Run(free) = ledger.charge(&request, NOW).expect("charge") else {
        panic!("a free call runs");
    };
    ledger.complete(free, "{}", NOW).expect("complete");
    drop(ledger);
    let data = dir.path().to_str().expect("utf-8");

    let out = brmcp(&[
        "serve",
        "--datadir",
        data,
        "credit",
        UID,
        "0",
        "--reason",
        "x",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains("atoms must be at least 1"),
        "{}",
        text(&out)
    );
    let id = free.get().to_string();
    let out = brmcp(&["serve", "--datadir", data, "refund", &id, "--reason", "x"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("call {id} was free, there is nothing to refund")),
        "{}",
        text(&out)
    );
    let balances = json_of(&brmcp(&["serve", "--datadir", data, "balances", "--json"]));
    assert_eq!(
        balances,
        serde_json::json!([{"caller": UID, "balance_matoms": 5_000, "balance_atoms": 5, "reserved_matoms": 0}])
    );
}

#[test]
fn a_closed_pipe_ends_a_listing_quietly() {
    let dir = tempfile::tempdir().expect("temp dir");
    ledger_with_a_call(dir.path());
    let data = dir.path().to_str().expect("utf-8");
    for args in [&["journal"][..], &["balances"], &["status"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_brmcp"))
            .args(["serve", "--datadir", data])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run brmcp");
        // `| head -0`: the reader is gone before anything is written.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!said.contains("panicked"), "{args:?}: {said}");
        assert!(
            matches!(out.status.code(), Some(141 | 3)),
            "{args:?}: {:?} {said}",
            out.status
        );
    }
}
