//! The upstreams' resources and prompts, for those whose configuration offers them, as
//! one [`Catalog`]: listed from each upstream that is up, prompts renamed with the
//! upstream's prefix, each read or get sent to the upstream it belongs to. Each listing
//! is bounded like the tools' ([`listing`](super::listing), [`LIST_TIMEOUT`]).

use std::sync::{Arc, PoisonError, RwLock};

use rmcp::ErrorData;
use rmcp::model::{
    GetPromptRequestParams, GetPromptResult, Prompt, ReadResourceRequestParams, ReadResourceResult,
    Resource, ResourceTemplate,
};
use rmcp::service::ServiceError;
use tokio::sync::watch;

use super::client::Link;
use super::config::UpstreamConfig;
use super::limits::LIST_TIMEOUT;
use super::listing::{self, Listed};
use crate::server::{Catalog, CatalogFuture};

/// The upstreams' resources and prompts. Cheap to clone; clones share the links.
#[derive(Clone)]
pub(crate) struct UpstreamCatalog(Arc<Inner>);

struct Inner {
    entries: Vec<Entry>,
    version: watch::Sender<u64>,
}

struct Entry {
    name: String,
    prefix: String,
    resources: bool,
    prompts: bool,
    /// The live connection, while the upstream is up.
    link: RwLock<Option<Link>>,
}

impl UpstreamCatalog {
    pub(crate) fn new(configs: &[UpstreamConfig]) -> Self {
        Self(Arc::new(Inner {
            entries: configs
                .iter()
                .map(|c| Entry {
                    name: c.name.clone(),
                    prefix: c.prefix.clone(),
                    resources: c.resources,
                    prompts: c.prompts,
                    link: RwLock::new(None),
                })
                .collect(),
            version: watch::Sender::new(0),
        }))
    }

    /// Whether the upstream at `index` offers anything here.
    pub(crate) fn offers_any(&self, index: usize) -> bool {
        self.0
            .entries
            .get(index)
            .is_some_and(|e| e.resources || e.prompts)
    }

    /// The upstream at `index` is up on `link` (`Some`), or down; callers are told.
    pub(crate) fn set_link(&self, index: usize, link: Option<Link>) {
        if let Some(entry) = self.0.entries.get(index) {
            *entry.link.write().unwrap_or_else(PoisonError::into_inner) = link;
            self.changed();
        }
    }

    /// The upstream's resources or prompts may have changed; callers are told.
    pub(crate) fn changed(&self) {
        self.0.version.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// The links of the upstreams up that offer what `offers` selects.
    fn links(&self, offers: impl Fn(&Entry) -> bool) -> Vec<(&Entry, Link)> {
        self.0
            .entries
            .iter()
            .filter(|e| offers(e))
            .filter_map(|e| {
                let link = e
                    .link
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                link.map(|l| (e, l))
            })
            .collect()
    }
}

/// An upstream's protocol error passes as it is; anything else names the upstream.
fn upstream_error(name: &str, e: ServiceError) -> ErrorData {
    match e {
        ServiceError::McpError(e) => e,
        e => ErrorData::internal_error(format!("upstream {name}: {e}"), None),
    }
}

/// One bounded listing of `what`, or why it failed.
async fn bounded<T>(
    what: &str,
    list: impl Future<Output = Result<Listed<T>, ServiceError>>,
) -> Result<Vec<T>, String> {
    match tokio::time::timeout(LIST_TIMEOUT, list).await {
        Err(_) => Err(format!("{what}: no answer in {} s", LIST_TIMEOUT.as_secs())),
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Ok(Ok(listed)) => {
            if let Some(bound) = listed.cut {
                tracing::warn!(%bound, "{what} cut short at its bound");
            }
            Ok(listed.items)
        }
    }
}

fn not_found(what: &str) -> ErrorData {
    ErrorData::invalid_params(format!("unknown {what}"), None)
}

impl Catalog for UpstreamCatalog {
    fn offers(&self) -> (bool, bool) {
        let entries = &self.0.entries;
        (
            entries.iter().any(|e| e.resources),
            entries.iter().any(|e| e.prompts),
        )
    }

    fn list_resources(&self) -> CatalogFuture<'_, Vec<Resource>> {
        Box::pin(async move {
            let mut all = Vec::new();
            for (entry, link) in self.links(|e| e.resources) {
                match bounded("resources/list", listing::resources(link.peer())).await {
                    Ok(listed) => all.extend(listed),
                    Err(e) => {
                        tracing::debug!(upstream = %entry.name, error = %e, "not listed")
                    }
                }
            }
            Ok(all)
        })
    }

    fn list_resource_templates(&self) -> CatalogFuture<'_, Vec<ResourceTemplate>> {
        Box::pin(async move {
            let mut all = Vec::new();
            for (entry, link) in self.links(|e| e.resources) {
                match bounded(
                    "resources/templates/list",
                    listing::resource_templates(link.peer()),
                )
                .await
                {
                    Ok(listed) => all.extend(listed),
                    Err(e) => {
                        tracing::debug!(upstream = %entry.name, error = %e, "not listed")
                    }
                }
            }
            Ok(all)
        })
    }

    fn read_resource(
        &self,
        params: ReadResourceRequestParams,
    ) -> CatalogFuture<'_, ReadResourceResult> {
        Box::pin(async move {
            // URIs carry no upstream name: the first upstream that has it answers.
            let mut last = not_found("resource");
            for (entry, link) in self.links(|e| e.resources) {
                match link.peer().read_resource(params.clone()).await {
                    Ok(result) => return Ok(result),
                    Err(e) => last = upstream_error(&entry.name, e),
                }
            }
            Err(last)
        })
    }

    fn list_prompts(&self) -> CatalogFuture<'_, Vec<Prompt>> {
        Box::pin(async move {
            let mut all = Vec::new();
            for (entry, link) in self.links(|e| e.prompts) {
                match bounded("prompts/list", listing::prompts(link.peer())).await {
                    Ok(listed) => all.extend(listed.into_iter().map(|mut p| {
                        p.name = format!("{}{}", entry.prefix, p.name);
                        p
                    })),
                    Err(e) => {
                        tracing::debug!(upstream = %entry.name, error = %e, "not listed")
                    }
                }
            }
            Ok(all)
        })
    }

    fn get_prompt(&self, params: GetPromptRequestParams) -> CatalogFuture<'_, GetPromptResult> {
        Box::pin(async move {
            for (entry, link) in self.links(|e| e.prompts) {
                let Some(name) = params.name.strip_prefix(entry.prefix.as_str()) else {
                    continue;
                };
                let mut params = params.clone();
                params.name = name.to_owned();
                return link
                    .peer()
                    .get_prompt(params)
                    .await
                    .map_err(|e| upstream_error(&entry.name, e));
            }
            Err(not_found("prompt"))
        })
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.0.version.subscribe()
    }
}
