//! Bots that announced themselves in posts, found through the agent's directory tools
//! beside the directory's own answer: `directory_search` shows them marked as
//! announced, and `directory_add_bot` adds one no directory lists only after the user
//! accepted a question naming it as announced, with its tools and prices. A post that
//! named another bot was skipped when received and is found nowhere.

use brmcp::adapters::mem::uid;
use brmcp::adapters::protocol::{AnnouncedTool, Announcement, PriceBounds, ToolPrice};
use brmcp::bridge::announcements::{Announcements, Offered};
use brmcp::bridge::{DIRECTORY_ADD_BOT, DIRECTORY_SEARCH};
use rmcp::model::ElicitationAction;
use serde_json::json;

use super::*;
use crate::common::text;

/// The bot that announces itself; no directory lists it.
const ANNOUNCER: u32 = 40;
/// A hostile author whose post carries the announcer's announcement.
const HOSTILE: u32 = 41;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The bridge received the announcer's post, and the hostile author's copy of it.
fn received(w: &World) {
    let body = Announcement {
        uid: uid(ANNOUNCER),
        name: "weather".into(),
        description: "forecasts for any city".into(),
        issued_secs: now(),
        tools: vec![AnnouncedTool {
            name: "forecast".into(),
            description: "tomorrow's forecast".into(),
            price: ToolPrice::Fixed(1000),
            bounds: PriceBounds::NONE,
        }],
    }
    .render()
    .unwrap();
    let mut store = Announcements::default();
    assert_eq!(
        store.offer(uid(ANNOUNCER), &[1], &body, now()),
        Offered::Kept
    );
    assert!(matches!(
        store.offer(uid(HOSTILE), &[2], &body, now()),
        Offered::Skipped(_)
    ));
    store.save(&w.data_dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_announced_bot_is_found_beside_the_directory_and_added_with_consent() {
    let w = world(0, settings(10_000, 100_000)).await;
    received(&w);
    let user = User::answering(ElicitationAction::Accept);
    let agent = directory_agent(&w.bridge, None, user.clone()).await;
    let announcer = uid(ANNOUNCER).to_string();

    let found = tool(&agent, DIRECTORY_SEARCH, json!({"query": "forecast"})).await;
    assert_ne!(found.is_error, Some(true), "{found:?}");
    let shown = text(&found);
    assert!(
        shown.contains(&format!("announced bot {announcer} \"weather\"")),
        "{shown}"
    );
    assert!(
        shown.contains("\"forecast\" (1000 atoms per call)"),
        "{shown}"
    );
    assert!(!shown.contains(&uid(HOSTILE).to_string()), "{shown}");
    let json = found.structured_content.clone().expect("JSON");
    assert_eq!(json["announced"][0]["uid"], announcer.as_str());
    assert_eq!(json["announced"][0]["announced"], true);
    assert_eq!(json["announced"][0]["added"], false);
    // The directory's hits are its own: none for this query.
    assert_eq!(json["hits"].as_array().map(Vec::len), Some(0), "{json}");

    // The directory's answer alone where no announcement matches.
    let echo = tool(&agent, DIRECTORY_SEARCH, json!({"query": "echo"})).await;
    assert!(!text(&echo).contains("announced"), "{echo:?}");

    // The hostile author is listed nowhere and announced nothing: not added, not asked.
    let hostile = tool(
        &agent,
        DIRECTORY_ADD_BOT,
        json!({"uid": uid(HOSTILE).to_string()}),
    )
    .await;
    assert_eq!(hostile.is_error, Some(true), "{hostile:?}");
    assert!(user.asked.lock().unwrap().is_empty());

    let added = tool(
        &agent,
        DIRECTORY_ADD_BOT,
        json!({"uid": announcer, "name": "weather"}),
    )
    .await;
    assert_ne!(added.is_error, Some(true), "{added:?}");
    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "one question");
    assert!(
        asked[0].contains("announced itself") && asked[0].contains(&announcer),
        "{}",
        asked[0]
    );
    assert!(
        asked[0].contains("\"forecast\" (1000 atoms per call)"),
        "{}",
        asked[0]
    );
    let bots = w.bridge.bots();
    assert_eq!(bots.len(), 1);
    assert_eq!(bots[0].uid, uid(ANNOUNCER));
    let again = tool(&agent, DIRECTORY_SEARCH, json!({"query": "weather"})).await;
    assert_eq!(
        again.structured_content.expect("JSON")["announced"][0]["added"],
        true
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_announced_bot_is_not_added() {
    let w = world(0, settings(10_000, 100_000)).await;
    received(&w);
    let user = User::answering(ElicitationAction::Decline);
    let agent = directory_agent(&w.bridge, None, user.clone()).await;
    let added = tool(
        &agent,
        DIRECTORY_ADD_BOT,
        json!({"uid": uid(ANNOUNCER).to_string()}),
    )
    .await;
    assert_eq!(added.is_error, Some(true), "{added:?}");
    assert!(text(&added).contains("declined"), "{added:?}");
    assert_eq!(user.asked.lock().unwrap().len(), 1);
    assert!(w.bridge.bots().is_empty());
}
