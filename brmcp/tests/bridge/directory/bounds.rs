//! A listed provider's bounded dynamic tool through the bridge's directory tools: the
//! search hit and the provider's listing show the bound (text and structured), a
//! price ceiling keeps the tool only if its most is within it, the user adding the bot
//! is shown the bound, and the added bot's call is paid its quote, within the bound.

use brmcp::adapters::mem::uid;
use brmcp::bridge::{DIRECTORY_ADD_BOT, DIRECTORY_GET_PROVIDER, DIRECTORY_SEARCH};
use brmcp::server::{Price, PriceBounds, ToolError, schemars};
use rmcp::model::ElicitationAction;
use serde_json::json;

use super::*;
use crate::common::text;

/// The bound `lookup` is listed with.
const LEAST: u64 = 5;
const MOST: u64 = 100;
/// The units (one atom each) the agent's call asks for: inside the bound.
const UNITS: u64 = 40;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Units {
    /// Units of work, one atom each.
    units: u64,
}

/// `lookup`, priced one atom a unit within [`LEAST`]..=[`MOST`].
fn lookup() -> ToolSpec {
    ToolSpec::new(
        "lookup",
        "Look things up, one atom a unit",
        Price::bounded(
            PriceBounds::new(LEAST, Some(MOST)).unwrap(),
            |_, u: &Units| Ok(u.units),
        ),
        |_, u: Units| async move { Ok::<_, ToolError>(format!("looked up {} units", u.units)) },
    )
}

/// The structured JSON a directory tool gave beside its text.
fn json_of(result: &CallToolResult) -> Value {
    result.structured_content.clone().expect("structured JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_dynamic_tool_is_found_shown_and_paid_within_its_bound() {
    let w = world_with(0, settings(10_000, 100_000), vec![lookup()]).await;
    let user = User::answering(ElicitationAction::Accept);
    let agent = directory_agent(&w.bridge, None, user.clone()).await;
    let provider = uid(PROVIDER);
    let bound = format!("dynamic price (quoted per call, {LEAST} to {MOST} atoms)");

    let found = tool(&agent, DIRECTORY_SEARCH, json!({"query": "look"})).await;
    assert_ne!(found.is_error, Some(true), "{found:?}");
    let shown = text(&found);
    assert!(
        shown.contains(&format!("\"lookup\" of bot {provider}: {bound}")),
        "{shown}"
    );
    let hits = json_of(&found);
    assert_eq!(hits["total"], 1, "{hits}");
    assert_eq!(hits["hits"][0]["tool"], "lookup");
    assert_eq!(hits["hits"][0]["pricing"], "dynamic");
    assert_eq!(hits["hits"][0]["priceMaxAtoms"], MOST);
    assert_eq!(hits["hits"][0]["priceMinAtoms"], LEAST);

    // A ceiling below the most leaves it out; one at the most keeps it.
    let below = tool(
        &agent,
        DIRECTORY_SEARCH,
        json!({"query": "look", "maxPriceAtoms": MOST - 1}),
    )
    .await;
    assert_eq!(json_of(&below)["total"], 0, "{below:?}");
    let at = tool(
        &agent,
        DIRECTORY_SEARCH,
        json!({"query": "look", "maxPriceAtoms": MOST}),
    )
    .await;
    assert_eq!(json_of(&at)["total"], 1, "{at:?}");

    let listed = tool(
        &agent,
        DIRECTORY_GET_PROVIDER,
        json!({"uid": provider.to_string()}),
    )
    .await;
    assert_ne!(listed.is_error, Some(true), "{listed:?}");
    let shown = text(&listed);
    assert!(shown.contains(&format!("\"lookup\": {bound}")), "{shown}");

    // The user adding the bot is shown the bound among its tools.
    let added = tool(
        &agent,
        DIRECTORY_ADD_BOT,
        json!({"uid": provider.to_string(), "name": "looker"}),
    )
    .await;
    assert_ne!(added.is_error, Some(true), "{added:?}");
    let asked = user.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].contains("\"lookup\"") && asked[0].contains(&format!("{LEAST} to {MOST} atoms")),
        "{}",
        asked[0]
    );

    // The added bot's call is paid its quote, within the bound, once.
    let bot = crate::common::connect(&w.bridge, provider, ()).await;
    let tools = bot.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "lookup"), "{tools:?}");
    let answered = bot
        .call_tool(params("lookup", json!({"units": UNITS})))
        .await
        .unwrap();
    assert_ne!(answered.is_error, Some(true), "{answered:?}");
    assert_eq!(text(&answered), format!("looked up {UNITS} units"));
    assert_eq!(
        *w.payments.made.lock().unwrap(),
        [(provider, UNITS)],
        "paid the quote once, to the provider"
    );
}
