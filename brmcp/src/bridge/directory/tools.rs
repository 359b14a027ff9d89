//! The directory tools the bridge serves to the agent: names, input schemas and the
//! arguments they take.

use rmcp::model::Tool;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Searches the directory's listed tools (the directory's `search`, paid under the
/// user's caps when the directory prices it).
pub const DIRECTORY_SEARCH: &str = "directory_search";
/// One listed provider with its tools and prices (the directory's `get_provider`).
pub const DIRECTORY_GET_PROVIDER: &str = "directory_get_provider";
/// Asks the directory to suggest a key exchange with a provider (`introduce`).
pub const DIRECTORY_INTRODUCE: &str = "directory_introduce";
/// Adds a listed provider to the user's bots, once the user confirms.
pub const DIRECTORY_ADD_BOT: &str = "directory_add_bot";

/// The arguments of [`DIRECTORY_SEARCH`], forwarded to `search` as they are.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SearchArgs {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) query: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tags: Option<Vec<String>>,
    #[serde(
        default,
        rename = "maxPriceAtoms",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) max_price_atoms: Option<i64>,
}

/// The arguments of [`DIRECTORY_GET_PROVIDER`] and [`DIRECTORY_INTRODUCE`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UidArgs {
    pub(crate) uid: String,
}

/// The arguments of [`DIRECTORY_ADD_BOT`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddArgs {
    pub(crate) uid: String,
    #[serde(default)]
    pub(crate) name: Option<String>,
}

fn uid_schema() -> Value {
    json!({
        "type": "string",
        "pattern": "^[0-9a-f]{64}$",
        "description": "The provider's Bison Relay user id (64 hex characters)"
    })
}

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Tool {
    let value = json!({
        "name": name,
        "description": description,
        "inputSchema": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        }
    });
    serde_json::from_value(value).expect("a static tool definition")
}

/// The tools, for `tools/list`; `directory` names the directory in the descriptions.
pub(crate) fn list(directory: &str) -> Vec<Tool> {
    vec![
        tool(
            DIRECTORY_SEARCH,
            &format!(
                "Search the tools of the Bison Relay bots listed by directory {directory}. \
                 Each hit shows the bot's uid and the tool's price in atoms."
            ),
            json!({
                "query": {"type": "string", "description": "A word of the tool's name or description"},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags the bot must all carry"},
                "maxPriceAtoms": {"type": "integer", "description": "Highest price per call to show, in atoms; 0: any"}
            }),
            &[],
        ),
        tool(
            DIRECTORY_GET_PROVIDER,
            &format!("Show one bot listed by directory {directory}: its tools and their prices."),
            json!({"uid": uid_schema()}),
            &["uid"],
        ),
        tool(
            DIRECTORY_INTRODUCE,
            &format!(
                "Ask directory {directory} to suggest a key exchange between the user and a listed bot."
            ),
            json!({"uid": uid_schema()}),
            &["uid"],
        ),
        tool(
            DIRECTORY_ADD_BOT,
            &format!(
                "Add a bot listed by directory {directory} to the user's bots, after the user confirms; \
                 its tools are then served by this bridge."
            ),
            json!({
                "uid": uid_schema(),
                "name": {"type": "string", "description": "The name to give the bot (letters, digits, '.', '_', '-')"}
            }),
            &["uid"],
        ),
    ]
}
