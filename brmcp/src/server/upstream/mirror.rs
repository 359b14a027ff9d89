//! An upstream's tools as the harness serves them: the ones the configuration exposes,
//! renamed with the upstream's prefix, with their schemas and annotations as the
//! upstream lists them and the configured price in `_meta`; each call forwarded over
//! the current connection, refused (and charged nothing) while the upstream is down.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{JsonObject, Tool};

use super::client::Link;
use super::config::UpstreamConfig;
use crate::server::{CallContext, Price, ToolSpec};

/// Whether an upstream is up: read by each of its tools before a call is charged.
#[derive(Debug)]
pub(crate) struct Health {
    name: String,
    up: AtomicBool,
}

impl Health {
    pub(crate) fn new(name: &str) -> Arc<Self> {
        Arc::new(Self {
            name: name.to_owned(),
            up: AtomicBool::new(false),
        })
    }

    pub(crate) fn set(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
    }

    fn check(&self) -> Result<(), String> {
        if self.up.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err(format!(
                "upstream {} is down (restarting); nothing was charged, retry later",
                self.name
            ))
        }
    }
}

/// The most tools mirrored from one upstream: its listing is held in memory and sent
/// to every caller that lists, and a runaway upstream must not grow it without end.
pub const MAX_TOOLS_PER_UPSTREAM: usize = 1024;

/// The exposed tools of `listed` (at most [`MAX_TOOLS_PER_UPSTREAM`]), forwarding over
/// `link`.
pub(crate) fn mirror_tools(
    config: &UpstreamConfig,
    listed: Vec<Tool>,
    link: &Link,
    health: &Arc<Health>,
) -> Vec<ToolSpec> {
    listed
        .into_iter()
        .filter_map(|tool| {
            let atoms = config.price_of(&tool.name)?;
            let upstream_name: Arc<str> = tool.name.as_ref().into();
            let mut tool = tool;
            tool.name = format!("{}{}", config.prefix, tool.name).into();
            let price = if atoms == 0 {
                Price::Free
            } else {
                Price::Fixed(atoms)
            };
            let link = link.clone();
            let health = health.clone();
            let spec = ToolSpec::from_definition(
                tool,
                price,
                move |call: CallContext, args: JsonObject| {
                    let (link, name) = (link.clone(), upstream_name.clone());
                    async move { link.call(&name, args, &call).await }
                },
            );
            Some(spec.when_available(move || health.check()))
        })
        .take(MAX_TOOLS_PER_UPSTREAM)
        .collect()
}
