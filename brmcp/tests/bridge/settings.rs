//! `mcpclient.json`: Go field names and defaults, fail-closed parsing, atomic writes,
//! minting a token on enable, refusing an invalid uid without changing anything, and
//! named bots persisted across restarts.

use std::sync::Arc;

use crate::common::{PayMode, PayerState, TestPayer, base_config};
use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::bridge::{
    Bridge, BridgeError, DEFAULT_APPROVAL_TIMEOUT_SECS, DEFAULT_TIP_WAIT_SECS, Mode, SETTINGS_FILE,
    Settings, SettingsError,
};
use serde_json::{Value, json};

fn bridge_in(dir: &std::path::Path) -> Result<Bridge, BridgeError> {
    let fabric = Fabric::new(1);
    let router = fabric.router(uid(2), RouterConfig::client());
    let payer = PayerState::new(Arc::default(), uid(2), PayMode::Credit);
    Bridge::new(base_config(dir), router, TestPayer(payer))
}

fn file(dir: &std::path::Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join(SETTINGS_FILE)).unwrap()).unwrap()
}

#[tokio::test]
async fn defaults_mint_and_go_field_names() {
    let dir = tempfile::tempdir().unwrap();
    let bridge = bridge_in(dir.path()).unwrap();
    let s = bridge.settings();
    assert!(!s.enabled);
    assert_eq!(s.mode, Mode::Approval);
    assert_eq!(s.approval_timeout_secs, DEFAULT_APPROVAL_TIMEOUT_SECS);
    assert_eq!(s.tip_wait_secs, DEFAULT_TIP_WAIT_SECS);
    assert_eq!((s.per_call_cap_atoms, s.per_day_cap_atoms), (0, 0));

    let mut enable = s.clone();
    enable.enabled = true;
    let applied = bridge.apply_settings(enable).await.unwrap();
    assert_eq!(applied.token.len(), 32, "a minted 16-byte hex token");
    assert!(applied.token.bytes().all(|b| b.is_ascii_hexdigit()));
    let on_disk = file(dir.path());
    for key in [
        "enabled",
        "token",
        "mode",
        "per_call_cap_atoms",
        "per_day_cap_atoms",
        "allowed_bots",
        "approval_timeout_secs",
        "tip_wait_secs",
    ] {
        assert!(on_disk.get(key).is_some(), "{key} missing from {on_disk}");
    }
    assert_eq!(on_disk["token"], json!(applied.token));
    assert_eq!(on_disk["mode"], json!("approval"));
    // Written atomically: no temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    // A restart reads the same settings.
    drop(bridge);
    assert_eq!(bridge_in(dir.path()).unwrap().settings(), applied);
}

#[tokio::test]
async fn invalid_uid_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let bridge = bridge_in(dir.path()).unwrap();
    let mut good = bridge.settings();
    good.allowed_bots = vec![uid(1).to_string()];
    good.per_call_cap_atoms = 5;
    let good = bridge.apply_settings(good).await.unwrap();
    let before = std::fs::read(dir.path().join(SETTINGS_FILE)).unwrap();
    let mut bad = good.clone();
    bad.allowed_bots.push("not-a-uid".into());
    bad.per_call_cap_atoms = 99;
    let err = bridge.apply_settings(bad).await.unwrap_err();
    assert!(
        matches!(err, BridgeError::Settings(SettingsError::InvalidBot(ref b)) if b == "not-a-uid"),
        "{err}"
    );
    assert_eq!(bridge.settings(), good);
    assert_eq!(
        std::fs::read(dir.path().join(SETTINGS_FILE)).unwrap(),
        before
    );
}

#[tokio::test]
async fn nonsense_is_refused_naming_the_file_and_key_and_nothing_changes() {
    for (text, key) in [
        r#"{"mode": "auto"}"#,
        r#"{"per_day_cap_atoms": -3}"#,
        r#"{"unknown_field": 1}"#,
        r#"{"token": "short"}"#,
        r#"{"enabled": 1}"#,
    ]
    .into_iter()
    .zip([
        "mode",
        "per_day_cap_atoms",
        "unknown_field",
        "token",
        "enabled",
    ]) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SETTINGS_FILE);
        std::fs::write(&path, text).unwrap();
        let err = bridge_in(dir.path()).unwrap_err();
        let shown = err.to_string();
        assert!(
            matches!(err, BridgeError::Settings(SettingsError::Invalid { .. }))
                && shown.contains(&path.display().to_string())
                && shown.contains(&format!("{key}: ")),
            "{text}: {shown}"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "left as it was"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SETTINGS_FILE);
    std::fs::write(&path, "{\"mode\": \"autopay\",").unwrap();
    let shown = bridge_in(dir.path()).unwrap_err().to_string();
    assert!(shown.contains(&path.display().to_string()), "{shown}");
}

#[tokio::test]
async fn broken_files_fail_closed() {
    for text in [
        "{not json".to_owned(),
        r#"{"allowed_bots": ["abc"]}"#.to_owned(),
        format!(
            r#"{{"allowed_bots": [], "bot_names": {{"oracle": "{}"}}}}"#,
            uid(1)
        ),
        r#"{"allowed_bots": "everyone"}"#.to_owned(),
    ] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SETTINGS_FILE), &text).unwrap();
        let err = bridge_in(dir.path()).unwrap_err();
        assert!(matches!(err, BridgeError::Settings(_)), "{text}: {err}");
    }
}

#[tokio::test]
async fn named_bots_are_persisted() {
    let dir = tempfile::tempdir().unwrap();
    let bridge = bridge_in(dir.path()).unwrap();
    bridge.add_bot("oracle", uid(1)).await.unwrap();
    bridge.add_bot("weather", uid(3)).await.unwrap();
    assert!(matches!(
        bridge.add_bot("oracle", uid(4)).await,
        Err(BridgeError::Settings(SettingsError::NameTaken(_)))
    ));
    assert!(matches!(
        bridge.add_bot("bad name", uid(4)).await,
        Err(BridgeError::Settings(SettingsError::InvalidName(_)))
    ));
    drop(bridge);
    let bridge = bridge_in(dir.path()).unwrap();
    let bots = bridge.bots();
    assert_eq!(bots.len(), 2);
    assert_eq!(bots[0].uid, uid(1));
    assert_eq!(bots[0].name.as_deref(), Some("oracle"));
    assert_eq!(bots[1].name.as_deref(), Some("weather"));
    assert_eq!(bridge.settings().resolve("weather"), Some(uid(3)));
    bridge.remove_bot("oracle").await.unwrap();
    bridge.remove_bot(&uid(3).to_string()).await.unwrap();
    assert!(matches!(
        bridge.remove_bot("oracle").await,
        Err(BridgeError::Settings(SettingsError::UnknownBot(_)))
    ));
    drop(bridge);
    let s: Settings = bridge_in(dir.path()).unwrap().settings();
    assert!(s.allowed_bots.is_empty() && s.bot_names.is_empty());
}
