//! Directories follow `mcpclient.json` live: one added by an edit of the file is
//! served at once, one removed ends its agents' sessions.

use brmcp::adapters::mem::uid;
use brmcp::bridge::{BridgeError, DIRECTORY_SEARCH, SETTINGS_FILE};
use serde_json::json;

use super::*;
use crate::common::{eventually, text};

/// Rewrites the settings file with `change` applied, as a user's edit.
fn edit(w: &World, change: impl FnOnce(&mut Settings)) {
    let path = w.data_dir.join(SETTINGS_FILE);
    let mut s = Settings::load(&path).unwrap();
    change(&mut s);
    s.save(&path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directories_follow_the_settings_file() {
    let w = world(0, settings(10_000, 100_000)).await;
    let _watch = w.bridge.watch_settings();
    let agent = directory_agent(&w.bridge, None, ()).await;
    let found = tool(&agent, DIRECTORY_SEARCH, json!({})).await;
    assert_ne!(found.is_error, Some(true), "{found:?}");

    edit(&w, |s| s.directories.clear());
    assert!(
        eventually(Duration::from_secs(5), || w
            .bridge
            .settings()
            .directories
            .is_empty())
        .await
    );
    let after = agent.call_tool(params(DIRECTORY_SEARCH, json!({}))).await;
    assert!(
        after.is_err() || after.as_ref().is_ok_and(|r| r.is_error == Some(true)),
        "a removed directory is not served: {after:?}"
    );
    let (end, _) = tokio::io::duplex(64);
    let refused = w.bridge.serve_directory(None, end).await.unwrap_err();
    assert!(
        matches!(refused, BridgeError::UnknownDirectory(_)),
        "{refused}"
    );

    edit(&w, |s| {
        s.directories = vec![DirectoryEntry::new(uid(DIR), Some("again".into()))];
    });
    assert!(
        eventually(Duration::from_secs(5), || !w
            .bridge
            .settings()
            .directories
            .is_empty())
        .await
    );
    let agent = directory_agent(&w.bridge, Some("again"), ()).await;
    let found = tool(&agent, DIRECTORY_SEARCH, json!({"query": "paid"})).await;
    assert!(
        text(&found).contains(&format!("of bot {}", uid(PROVIDER))),
        "{found:?}"
    );
}
