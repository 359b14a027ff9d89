//! `brmcp directory`: the first run writes its templates; a bad policy file is named
//! with its key and nothing starts.

use std::process::{Command, Output};

fn directory(dir: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["directory", "--datadir"])
        .arg(dir)
        .output()
        .expect("run brmcp directory")
}

#[test]
fn the_first_run_writes_templates_and_a_bad_policy_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let out = directory(&data);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("add operator uids to admin_uids"),
        "{stderr}"
    );
    let policy: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(data.join("brmcpdir.json")).unwrap())
            .unwrap();
    assert_eq!(policy["admin_uids"], serde_json::json!([]));
    assert_eq!(
        policy["listing_fee_atoms"], 0,
        "the template leaves defaults to the code"
    );
    assert!(data.join("brmcpdir.conf").exists());

    std::fs::write(data.join("brmcpdir.json"), r#"{"listing_fee": 5}"#).unwrap();
    let out = directory(&data);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("brmcpdir.json") && stderr.contains("listing_fee"),
        "{stderr}"
    );
}
