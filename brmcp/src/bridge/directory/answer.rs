//! What a directory answers, read as an untrusted peer's words: the JSON of its
//! `search`, `get_provider` and `introduce` results (the Go shapes, from the text
//! content), bounded, with every provider uid checked, and rendered as text an agent
//! can read. Prices shown are the directory's word; the provider's own listing and
//! quotes decide what is paid.

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol::{PriceBounds, ToolPrice, result_text, result_texts};
use rmcp::model::CallToolResult;
use serde::Deserialize;
use serde_json::{Map, Value};

use brmcp_adapters::protocol::SEARCH_HIT_CAP;

/// Most bytes of a directory's answer the bridge reads: 256 KiB. A full search (50
/// hits) or a provider's catalog with its input schemas fits many times over; more
/// is a directory trying to flood the agent's context.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// Why a directory's answer was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AnswerError {
    /// Longer than [`MAX_ANSWER_BYTES`].
    #[error("answer too large ({0} bytes, at most {MAX_ANSWER_BYTES})")]
    TooLarge(usize),
    /// Not the JSON object the tool answers with.
    #[error("answer is not the expected JSON")]
    Malformed,
    /// More hits than a directory returns.
    #[error("more than {SEARCH_HIT_CAP} hits")]
    TooManyHits,
    /// A provider uid that is not 64 hex characters.
    #[error("a provider uid is not 64 hex characters")]
    BadUid,
    /// `get_provider` answered about another provider.
    #[error("answered about another provider")]
    WrongProvider,
    /// A tool name outside the MCP tool-name rule.
    #[error("a tool name is not 1 to {MAX_TOOL_NAME_LEN} characters of A-Z a-z 0-9 _ . -")]
    BadToolName,
}

/// Longest tool name taken: 128 characters, the MCP tool-name rule.
pub(crate) const MAX_TOOL_NAME_LEN: usize = 128;

/// Most tools of a provider named in the question asked before adding it: 20. The
/// user reads the question; a longer catalog is summed up as "... and N more".
pub(crate) const MAX_LISTED_TOOLS: usize = 20;

/// The first [`MAX_LISTED_TOOLS`] of `tools` (name, price) as `"name" (price)`,
/// comma-separated, then how many more there are.
pub(crate) fn listed_tools<'a>(tools: impl ExactSizeIterator<Item = (&'a str, String)>) -> String {
    let total = tools.len();
    let mut list = tools
        .take(MAX_LISTED_TOOLS)
        .map(|(name, price)| format!("{name:?} ({price})"))
        .collect::<Vec<_>>()
        .join(", ");
    if let Some(more) = total.checked_sub(MAX_LISTED_TOOLS).filter(|n| *n > 0) {
        list.push_str(&format!(", ... and {more} more"));
    }
    list
}

/// Whether `name` follows the MCP tool-name rule: 1 to [`MAX_TOOL_NAME_LEN`]
/// characters of `A-Z a-z 0-9 _ . -`. A name outside it could carry text (line
/// breaks, prices) meant to pass for the bridge's words.
fn is_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Most bytes of a directory's refusal shown to the agent, for its own words and
/// again for the bridge's note after them: 2 KiB. A refusal is a sentence or a small
/// quote; a longer one is cut, so a directory cannot flood through its errors.
pub(crate) const MAX_REFUSAL_BYTES: usize = 2048;

/// `text` cut to `max` bytes on a character boundary, marked when cut.
pub(crate) fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… (cut)", &text[..end])
}

/// The text of a refused call, bounded by [`MAX_REFUSAL_BYTES`]: the directory's
/// words, then the last item apart (where the bridge puts its own note on a payment
/// not made).
pub(crate) fn refusal_text(result: &CallToolResult) -> String {
    let items: Vec<&str> = result_texts(result).collect();
    match items.split_last() {
        None => "refused without a reason".into(),
        Some((last, [])) => cut(last, MAX_REFUSAL_BYTES),
        Some((last, rest)) => {
            let words = cut(&rest.join("\n"), MAX_REFUSAL_BYTES);
            format!("{words}\n{}", cut(last, MAX_REFUSAL_BYTES))
        }
    }
}

/// `result`'s JSON as `T`, within [`MAX_ANSWER_BYTES`].
fn parse<T: serde::de::DeserializeOwned>(result: &CallToolResult) -> Result<T, AnswerError> {
    let len: usize = result_texts(result).map(|t| t.len() + 1).sum();
    if len > MAX_ANSWER_BYTES {
        return Err(AnswerError::TooLarge(len));
    }
    serde_json::from_str(&result_text(result)).map_err(|_| AnswerError::Malformed)
}

fn check_uid(uid: &str) -> Result<PeerId, AnswerError> {
    // `PeerId` parsing takes either case; a directory answers lowercase.
    let lower = uid.len() == 64 && uid.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    lower
        .then(|| uid.parse().ok())
        .flatten()
        .ok_or(AnswerError::BadUid)
}

/// A tool's price as a directory reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Price {
    /// No price, or 0.
    Free,
    /// Atoms per call.
    Fixed(u64),
    /// Quoted per call, within the bound listed (if any).
    Dynamic(PriceBounds),
}

impl std::fmt::Display for Price {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Free => f.write_str("free"),
            Self::Fixed(atoms) => write!(f, "{atoms} atoms"),
            Self::Dynamic(bounds) if bounds.is_none() => {
                f.write_str("dynamic price (quoted per call)")
            }
            Self::Dynamic(bounds) => write!(f, "dynamic price (quoted per call, {bounds})"),
        }
    }
}

/// One search hit.
#[derive(Debug, Clone, Deserialize)]
struct Hit {
    #[serde(rename = "providerUid")]
    provider_uid: String,
    tool: String,
    #[serde(default)]
    description: String,
    #[serde(rename = "priceAtoms", default)]
    price_atoms: i64,
    #[serde(default)]
    pricing: String,
    #[serde(rename = "priceMaxAtoms", default)]
    price_max_atoms: Option<u64>,
    #[serde(rename = "priceMinAtoms", default)]
    price_min_atoms: u64,
    #[serde(default)]
    tags: Vec<String>,
}

impl Hit {
    fn price(&self) -> Price {
        match u64::try_from(self.price_atoms) {
            // A bound that does not hold together is shown as none: the bridge pays
            // by the bot's own listing, never by the directory's word.
            Ok(0) | Err(_) if self.pricing == "dynamic" => Price::Dynamic(
                PriceBounds::new(self.price_min_atoms, self.price_max_atoms).unwrap_or_default(),
            ),
            Ok(atoms) if atoms > 0 => Price::Fixed(atoms),
            _ => Price::Free,
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct SearchAnswer {
    hits: Vec<Hit>,
    total: i64,
}

/// A checked `search` answer: its JSON and its text rendering.
#[derive(Debug, Clone)]
pub(crate) struct Search {
    /// The answer as the directory gave it.
    pub(crate) json: Value,
    /// One line per hit, with the provider's uid and the price.
    pub(crate) text: String,
}

/// Reads a `search` result.
///
/// # Errors
/// [`AnswerError`].
pub(crate) fn search(result: &CallToolResult) -> Result<Search, AnswerError> {
    let json: Value = parse(result)?;
    let answer: SearchAnswer =
        serde_json::from_value(json.clone()).map_err(|_| AnswerError::Malformed)?;
    if answer.hits.len() > SEARCH_HIT_CAP {
        return Err(AnswerError::TooManyHits);
    }
    let mut text = format!(
        "{} of {} matching tools:",
        answer.hits.len(),
        answer.total.max(0)
    );
    for hit in &answer.hits {
        let uid = check_uid(&hit.provider_uid)?;
        text.push_str(&format!("\n- {:?} of bot {uid}: {}", hit.tool, hit.price()));
        if !hit.description.is_empty() {
            text.push_str(&format!(" — {:?}", hit.description));
        }
        if !hit.tags.is_empty() {
            text.push_str(&format!(" {:?}", hit.tags));
        }
    }
    if !answer.hits.is_empty() {
        text.push_str("\nAdd a bot with directory_add_bot {\"uid\": ...} to call its tools.");
    }
    Ok(Search { json, text })
}

#[derive(Debug, Clone, Deserialize)]
struct CatalogTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(rename = "_meta", default)]
    meta: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize)]
struct ProviderAnswer {
    uid: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    tags: Vec<String>,
    catalog: Vec<CatalogTool>,
}

/// One tool of a provider's catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProviderTool {
    /// Its name.
    pub(crate) name: String,
    /// Its description.
    pub(crate) description: String,
    /// Its price as listed (a price the bridge could not read counts as dynamic:
    /// it is not known).
    pub(crate) price: Price,
}

/// A checked `get_provider` answer.
#[derive(Debug, Clone)]
pub(crate) struct Provider {
    /// The provider.
    pub(crate) uid: PeerId,
    /// Its description.
    pub(crate) description: String,
    /// Its tags.
    pub(crate) tags: Vec<String>,
    /// Its tools with their prices.
    pub(crate) tools: Vec<ProviderTool>,
    /// The answer as the directory gave it.
    pub(crate) json: Value,
}

impl Provider {
    /// The first [`MAX_LISTED_TOOLS`] tools as `"name" (price)`, comma-separated,
    /// then how many more there are.
    pub(crate) fn tool_list(&self) -> String {
        if self.tools.is_empty() {
            return "no tools".into();
        }
        listed_tools(
            self.tools
                .iter()
                .map(|t| (t.name.as_str(), t.price.to_string())),
        )
    }

    /// The provider, one line per tool; the directory's words quoted.
    pub(crate) fn text(&self) -> String {
        let mut text = format!("bot {}: {:?}", self.uid, self.description);
        if !self.tags.is_empty() {
            text.push_str(&format!(" {:?}", self.tags));
        }
        for tool in &self.tools {
            text.push_str(&format!("\n- {:?}: {}", tool.name, tool.price));
            if !tool.description.is_empty() {
                text.push_str(&format!(" — {:?}", tool.description));
            }
        }
        text
    }
}

/// Reads a `get_provider` result about `uid`.
///
/// # Errors
/// [`AnswerError`].
pub(crate) fn provider(result: &CallToolResult, uid: &PeerId) -> Result<Provider, AnswerError> {
    let json: Value = parse(result)?;
    let answer: ProviderAnswer =
        serde_json::from_value(json.clone()).map_err(|_| AnswerError::Malformed)?;
    if check_uid(&answer.uid)? != *uid {
        return Err(AnswerError::WrongProvider);
    }
    if !answer.catalog.iter().all(|t| is_tool_name(&t.name)) {
        return Err(AnswerError::BadToolName);
    }
    let tools = answer
        .catalog
        .iter()
        .map(|t| ProviderTool {
            name: t.name.clone(),
            description: t.description.clone().unwrap_or_default(),
            price: match ToolPrice::from_meta(t.meta.as_ref()) {
                Ok(None | Some(ToolPrice::Free)) => Price::Free,
                Ok(Some(ToolPrice::Fixed(atoms))) => Price::Fixed(atoms),
                Ok(Some(_)) | Err(_) => {
                    Price::Dynamic(PriceBounds::from_meta(t.meta.as_ref()).unwrap_or_default())
                }
            },
        })
        .collect();
    Ok(Provider {
        uid: *uid,
        description: answer.description,
        tags: answer.tags,
        tools,
        json,
    })
}

#[derive(Debug, Clone, Deserialize)]
struct IntroduceAnswer {
    suggested: bool,
    #[serde(default)]
    note: String,
}

/// Reads an `introduce` result: its text rendering and its JSON.
///
/// # Errors
/// [`AnswerError`].
pub(crate) fn introduce(
    result: &CallToolResult,
    uid: &PeerId,
) -> Result<(String, Value), AnswerError> {
    let json: Value = parse(result)?;
    let answer: IntroduceAnswer =
        serde_json::from_value(json.clone()).map_err(|_| AnswerError::Malformed)?;
    let mut text = if answer.suggested {
        format!("the directory suggested a key exchange with bot {uid}")
    } else {
        format!("the directory did not suggest a key exchange with bot {uid}")
    };
    // Quoted, as every other word of the directory: a line break in the note must not
    // pass for the bridge's own text.
    if !answer.note.is_empty() {
        text.push_str(&format!(": {:?}", answer.note));
    }
    Ok((text, json))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    fn result(text: &str) -> CallToolResult {
        CallToolResult::success(vec![ContentBlock::text(text)])
    }

    #[test]
    fn hits_show_uids_and_prices() {
        let uid = "ab".repeat(32);
        let json = format!(
            r#"{{"hits":[{{"providerUid":"{uid}","tool":"echo","catalogCheckedAt":1,"lastVerifiedExecution":1}},{{"providerUid":"{uid}","tool":"paid","priceAtoms":500,"catalogCheckedAt":1,"lastVerifiedExecution":1}},{{"providerUid":"{uid}","tool":"dyn","pricing":"dynamic","catalogCheckedAt":1,"lastVerifiedExecution":1}}],"total":3}}"#
        );
        let found = search(&result(&json)).unwrap();
        assert!(found.text.starts_with("3 of 3 matching tools:"));
        assert!(found.text.contains(&format!("\"echo\" of bot {uid}: free")));
        assert!(
            found
                .text
                .contains(&format!("\"paid\" of bot {uid}: 500 atoms"))
        );
        assert!(found.text.contains("\"dyn\" of bot") && found.text.contains("dynamic"));
    }

    #[test]
    fn a_hit_shows_a_dynamic_tool_s_bound() {
        let uid = "ab".repeat(32);
        let json = format!(
            r#"{{"hits":[{{"providerUid":"{uid}","tool":"search","pricing":"dynamic","priceMaxAtoms":400,"priceMinAtoms":5,"catalogCheckedAt":1,"lastVerifiedExecution":1}},{{"providerUid":"{uid}","tool":"odd","pricing":"dynamic","priceMaxAtoms":4,"priceMinAtoms":5,"catalogCheckedAt":1,"lastVerifiedExecution":1}}],"total":2}}"#
        );
        let found = search(&result(&json)).unwrap();
        assert!(
            found.text.contains(&format!(
                "\"search\" of bot {uid}: dynamic price (quoted per call, 5 to 400 atoms)"
            )),
            "{}",
            found.text
        );
        assert!(
            found.text.contains(&format!(
                "\"odd\" of bot {uid}: dynamic price (quoted per call)"
            )),
            "{}",
            found.text
        );
    }

    #[test]
    fn hostile_answers_are_refused() {
        let bad = format!(
            r#"{{"hits":[{{"providerUid":"{}","tool":"x"}}],"total":1}}"#,
            "AB".repeat(32)
        );
        assert_eq!(search(&result(&bad)).unwrap_err(), AnswerError::BadUid);
        assert_eq!(
            search(&result(
                r#"{"hits":[{"providerUid":"zz","tool":"x"}],"total":1}"#
            ))
            .unwrap_err(),
            AnswerError::BadUid
        );
        assert_eq!(
            search(&result("{\"hits\": [")).unwrap_err(),
            AnswerError::Malformed
        );
        assert_eq!(
            search(&result(r#"{"hits":{},"total":1}"#)).unwrap_err(),
            AnswerError::Malformed
        );
        let huge = "x".repeat(MAX_ANSWER_BYTES + 1);
        assert!(matches!(
            search(&result(&huge)),
            Err(AnswerError::TooLarge(_))
        ));
        let uid: PeerId = "cd".repeat(32).parse().unwrap();
        let other = format!(r#"{{"uid":"{}","catalog":[]}}"#, "ef".repeat(32));
        assert_eq!(
            provider(&result(&other), &uid).unwrap_err(),
            AnswerError::WrongProvider
        );
    }
}
