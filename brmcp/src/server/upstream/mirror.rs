//! An upstream's tools as the harness serves them: the ones the configuration exposes,
//! renamed with the upstream's prefix, with their schemas and annotations as the
//! upstream lists them and the configured price in `_meta`; each call forwarded over
//! the current connection, refused (and charged nothing) while the upstream is down.
//! The tools reach the connection through the upstream's [`Health`], so a reconnection
//! changes nothing callers see.

use std::sync::{Arc, PoisonError, RwLock};

use rmcp::model::{JsonObject, Tool};

use super::client::Link;
use super::config::UpstreamConfig;
use crate::server::{CallContext, Price, ToolError, ToolSpec};

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
            let atoms = config.price_of(&tool.name)?;
            let upstream_name: Arc<str> = tool.name.as_ref().into();
            let mut tool = tool;
            tool.name = format!("{}{}", config.prefix, tool.name).into();
            if config.price_in_description && atoms > 0 {
                tool.description =
                    Some(priced_description(tool.description.as_deref(), atoms).into());
            }
            let price = if atoms == 0 {
                Price::Free
            } else {
                Price::Fixed(atoms)
            };
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
