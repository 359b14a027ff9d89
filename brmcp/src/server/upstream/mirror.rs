//! An upstream's tools as the harness serves them: the ones the configuration exposes,
//! renamed with the upstream's prefix, with their schemas and annotations as the
//! upstream lists them and the configured price in `_meta` (a tool priced by its
//! companion: dynamic, with its bound, each price asked of the companion); each call
//! forwarded over the current connection, refused (and charged nothing) while the
//! upstream is down.
//! The tools reach the connection through the upstream's [`Health`], so a reconnection
//! changes nothing callers see.

use std::sync::{Arc, PoisonError, RwLock};

use brmcp_adapters::protocol::{describe_bounded, result_text};
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde_json::Value;

use super::client::Link;
use super::config::{MAX_PRICE_ATOMS, ToolPrice, UpstreamConfig};
use crate::server::{CallContext, Price, PriceBounds, ToolError, ToolSpec};

/// An upstream's live connection, while it is up: read by each of its tools before a
/// call is charged, and the call forwarded over it.
pub(crate) struct Health {
    name: String,
    link: RwLock<Option<Link>>,
}

impl Health {
    pub(crate) fn new(name: &str) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            link: RwLock::new(None),
        })
    }

    /// Up on `link`, or down (`None`).
    pub(crate) fn set(&self, link: Option<Link>) {
        *self.link.write().unwrap_or_else(PoisonError::into_inner) = link;
    }

    fn link(&self) -> Result<Link, String> {
        self.link
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                format!(
                    "upstream {} is down (restarting); nothing was charged, retry later",
                    self.name
                )
            })
    }
}

/// `description` with the price of a call at its end, for the model to see.
fn priced_description(description: Option<&str>, atoms: u64) -> String {
    match description.map(str::trim_end).filter(|d| !d.is_empty()) {
        Some(text) => format!("{text} (costs {atoms} atoms per call)"),
        None => format!("Costs {atoms} atoms per call."),
    }
}

/// Each call's price asked of the upstream's tool `companion` (free, with the call's
/// arguments) and read strictly ([`read_price`]); a failure or a malformed answer
/// refuses the call before anything is charged, and the harness refuses a price
/// outside `bounds` the same way.
fn asked_price(
    health: &Arc<Health>,
    companion: Arc<str>,
    bounds: PriceBounds,
) -> Price<JsonObject> {
    let health = health.clone();
    Price::Asked(
        bounds,
        Arc::new(move |_, args: &JsonObject| {
            let (link, companion, args) = (health.link(), companion.clone(), args.clone());
            let upstream = health.name.clone();
            Box::pin(async move {
                let refused = |why: String| {
                    format!(
                        "upstream {upstream}: the price tool {companion:?} {why}; nothing was charged"
                    )
                };
                let answer = link?
                    .price(&companion, args)
                    .await
                    .map_err(|e| refused(format!("failed: {e}")))?;
                read_price(&answer).map_err(refused)
            })
        }),
    )
}

/// The most of a companion's answer quoted back in a refusal, in characters.
const MAX_QUOTED_ANSWER: usize = 64;

/// A companion's answer: a result that is not an error, whose text is a JSON integer
/// in `0..=`[`MAX_PRICE_ATOMS`] (`1500`; not `1500.0`, `"1500"`, `-1` or words).
fn read_price(result: &CallToolResult) -> Result<u64, String> {
    let text = result_text(result);
    let quoted: String = text.chars().take(MAX_QUOTED_ANSWER).collect();
    if result.is_error == Some(true) {
        return Err(format!("failed: {quoted:?}"));
    }
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Number(n)) => n.as_u64(),
        _ => None,
    }
    .filter(|atoms| *atoms <= MAX_PRICE_ATOMS)
    .ok_or_else(|| format!("answered {quoted:?}, not a whole number of atoms"))
}

/// The most tools mirrored from one upstream: its listing is held in memory and sent
/// to every caller that lists, and a runaway upstream must not grow it without end.
pub const MAX_TOOLS_PER_UPSTREAM: usize = 1024;

/// The exposed tools of `listed` (at most [`MAX_TOOLS_PER_UPSTREAM`]), forwarding over
/// the connection `health` holds.
pub(crate) fn mirror_tools(
    config: &UpstreamConfig,
    listed: Vec<Tool>,
    health: &Arc<Health>,
) -> Vec<ToolSpec> {
    listed
        .into_iter()
        .filter_map(|tool| {
            let pricing = config.pricing_of(&tool.name)?;
            let upstream_name: Arc<str> = tool.name.as_ref().into();
            let mut tool = tool;
            tool.name = format!("{}{}", config.prefix, tool.name).into();
            let (price, description) = match pricing {
                ToolPrice::Off => return None,
                ToolPrice::Atoms(0) => (Price::Free, None),
                ToolPrice::Atoms(atoms) => (
                    Price::Fixed(atoms),
                    Some(priced_description(tool.description.as_deref(), atoms)),
                ),
                ToolPrice::PricedBy { priced_by, bounds } => (
                    asked_price(health, priced_by.into(), bounds),
                    describe_bounded(tool.description.as_deref(), &bounds),
                ),
            };
            if config.price_in_description
                && let Some(description) = description
            {
                tool.description = Some(description.into());
            }
            let (calls, health) = (health.clone(), health.clone());
            let spec = ToolSpec::from_definition(
                tool,
                price,
                move |call: CallContext, args: JsonObject| {
                    let (link, name) = (calls.link(), upstream_name.clone());
                    async move { link.map_err(ToolError::new)?.call(&name, args, &call).await }
                },
            );
            Some(spec.when_available(move || health.link().map(drop)))
        })
        .take(MAX_TOOLS_PER_UPSTREAM)
        .collect()
}
