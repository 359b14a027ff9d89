//! `directory_search` and `directory_get_provider` through the bridge: hits show the
//! provider's uid and each tool's price; a priced `search` is paid under the caps like
//! any bot's tool, and refused past them; the HTTP endpoint serves the same tools.

use brmcp::adapters::mem::uid;
use brmcp::bridge::{
    DIRECTORY_ADD_BOT, DIRECTORY_GET_PROVIDER, DIRECTORY_INTRODUCE, DIRECTORY_SEARCH,
};
use rmcp::ServiceExt;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};

use super::*;
use crate::common::text;

/// The JSON the tool gave after its text rendering.
fn json_of(result: &CallToolResult) -> Value {
    result.structured_content.clone().expect("structured JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_shows_uids_and_prices() {
    let w = world(0, settings(10_000, 100_000)).await;
    let agent = directory_agent(&w.bridge, None, ()).await;
    let names: Vec<String> = agent
        .list_all_tools()
        .await
        .unwrap()
        .iter()
        .map(|t| t.name.to_string())
        .collect();
    assert_eq!(
        names,
        [
            DIRECTORY_SEARCH,
            DIRECTORY_GET_PROVIDER,
            DIRECTORY_INTRODUCE,
            DIRECTORY_ADD_BOT
        ]
    );
    let provider = uid(PROVIDER).to_string();
    let found = tool(&agent, DIRECTORY_SEARCH, json!({"query": "echo"})).await;
    assert_ne!(found.is_error, Some(true), "{found:?}");
    let shown = text(&found);
    assert!(shown.contains("2 of 2 matching tools"), "{shown}");
    assert!(
        shown.contains(&format!("\"echo\" of bot {provider}: free")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!(
            "\"paid_echo\" of bot {provider}: {PAID_ECHO} atoms"
        )),
        "{shown}"
    );
    let hits = json_of(&found)["hits"].as_array().unwrap().clone();
    assert_eq!(hits.len(), 2);
    assert!(hits.iter().all(|h| h["providerUid"] == provider));

    let cheap = tool(&agent, DIRECTORY_SEARCH, json!({"maxPriceAtoms": 100})).await;
    assert_eq!(json_of(&cheap)["total"], 1, "{cheap:?}");

    let listed = tool(&agent, DIRECTORY_GET_PROVIDER, json!({"uid": provider})).await;
    assert_ne!(listed.is_error, Some(true), "{listed:?}");
    let shown = text(&listed);
    assert!(
        shown.contains(&format!("bot {provider}: \"An echo service\"")),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("\"paid_echo\": {PAID_ECHO} atoms")),
        "{shown}"
    );
    assert_eq!(json_of(&listed)["uid"], provider);

    let unlisted = tool(
        &agent,
        DIRECTORY_GET_PROVIDER,
        json!({"uid": uid(99).to_string()}),
    )
    .await;
    assert_eq!(unlisted.is_error, Some(true));
    assert!(
        text(&unlisted).contains("no listing for that uid"),
        "{unlisted:?}"
    );

    let intro = tool(&agent, DIRECTORY_INTRODUCE, json!({"uid": provider})).await;
    assert_eq!(intro.is_error, Some(true));
    assert!(
        text(&intro).contains("this directory does not support introductions"),
        "{intro:?}"
    );
    assert!(
        w.payments.made.lock().unwrap().is_empty(),
        "a free search pays nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priced_search_is_paid_within_the_caps_and_refused_past_them() {
    const PRICE: i64 = 40;
    // Per call 50 allows one search; the day's 100 allows two.
    let w = world(PRICE, settings(50, 100)).await;
    let agent = directory_agent(&w.bridge, Some("dir"), ()).await;
    for round in 1..=2 {
        let found = tool(&agent, DIRECTORY_SEARCH, json!({"query": "paid"})).await;
        assert_ne!(found.is_error, Some(true), "search {round}: {found:?}");
        assert_eq!(json_of(&found)["total"], 1);
        let made = w.payments.made.lock().unwrap().clone();
        assert_eq!(made.len(), round, "one payment per search");
        assert!(
            made.iter()
                .all(|&(to, atoms)| to == uid(DIR) && atoms == 40)
        );
    }
    let (entries, today) = w.bridge.spend_log().unwrap();
    assert_eq!(today, 80);
    assert!(
        entries
            .iter()
            .all(|e| e.tool == "search" && e.bot == uid(DIR).to_string())
    );

    let refused = tool(&agent, DIRECTORY_SEARCH, json!({"query": "paid"})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    let shown = text(&refused);
    assert!(shown.contains("payment not made"), "{shown}");
    assert!(shown.contains("daily"), "the day's cap is named: {shown}");
    assert_eq!(
        w.payments.made.lock().unwrap().len(),
        2,
        "nothing paid past the cap"
    );

    // A per-call cap below the price refuses at once.
    let mut tight = w.bridge.settings();
    tight.per_call_cap_atoms = 10;
    tight.per_day_cap_atoms = 100_000;
    w.bridge.apply_settings(tight).await.unwrap();
    let refused = tool(&agent, DIRECTORY_SEARCH, json!({})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(text(&refused).contains("payment not made"), "{refused:?}");
    assert_eq!(w.payments.made.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_serves_the_directory_tools() {
    let mut s = settings(10_000, 100_000);
    s.enabled = true;
    let w = world(0, s).await;
    w.bridge.start().await.unwrap();
    let addr = w.bridge.listen_addr().unwrap();
    let token = w.bridge.settings().token;
    for path in [
        "/mcp/directory",
        "/mcp/directory/dir",
        &format!("/mcp/directory/{}", uid(DIR)),
    ] {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}{path}"))
                .auth_header(token.clone()),
        );
        let agent = ().serve(transport).await.unwrap();
        let found = agent
            .call_tool(params(DIRECTORY_SEARCH, json!({"query": "paid"})))
            .await
            .unwrap();
        assert!(
            text(&found).contains(&format!("of bot {}: {PAID_ECHO} atoms", uid(PROVIDER))),
            "{path}: {found:?}"
        );
        let _ = agent.cancel().await;
    }
    let auth = format!("Bearer {token}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let (status, _, _) = crate::common::http(
        addr,
        "POST",
        "/mcp/directory/elsewhere",
        &headers,
        crate::common::INITIALIZE,
    )
    .await;
    assert_eq!(status, 404, "an unknown directory");
    let (status, _, _) = crate::common::http(
        addr,
        "POST",
        "/mcp/directory",
        &[],
        crate::common::INITIALIZE,
    )
    .await;
    assert_eq!(status, 401, "the token is required");
    // The directory is not a bot of the user's: its own uid path is not served.
    let (status, _, _) = crate::common::http(
        addr,
        "POST",
        &format!("/mcp/{}", uid(DIR)),
        &headers,
        crate::common::INITIALIZE,
    )
    .await;
    assert_eq!(status, 404);
    w.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priced_search_in_approval_mode_asks_the_user() {
    let mut s = settings(100, 1000);
    s.mode = Mode::Approval;
    let w = world(40, s).await;
    let declining = User::answering(ElicitationAction::Decline);
    let agent = directory_agent(&w.bridge, None, declining.clone()).await;
    let refused = tool(&agent, DIRECTORY_SEARCH, json!({})).await;
    assert_eq!(refused.is_error, Some(true), "{refused:?}");
    assert!(
        text(&refused).contains("payment not made: payment declined by the user"),
        "{refused:?}"
    );
    let asked = declining.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0].contains(&format!(
            "pay 40 atoms to bot {} for tool \"search\"",
            uid(DIR)
        )),
        "{}",
        asked[0]
    );
    assert!(w.payments.made.lock().unwrap().is_empty());

    let accepting = User::answering(ElicitationAction::Accept);
    let agent = directory_agent(&w.bridge, None, accepting).await;
    let found = tool(&agent, DIRECTORY_SEARCH, json!({})).await;
    assert_ne!(found.is_error, Some(true), "{found:?}");
    assert_eq!(*w.payments.made.lock().unwrap(), [(uid(DIR), 40)]);
}
