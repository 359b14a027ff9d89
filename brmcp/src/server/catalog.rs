//! Resources and prompts served beside the tools: a [`Catalog`] the harness consults
//! for `resources/*` and `prompts/*` (say, mirrored from upstream MCP servers). They are
//! free; the allow gate admits the callers and the rate limit counts each request, as
//! for calls.

use std::future::Future;
use std::pin::Pin;

use rmcp::ErrorData;
use rmcp::model::{
    GetPromptRequestParams, GetPromptResult, Prompt, ReadResourceRequestParams, ReadResourceResult,
    Resource, ResourceTemplate,
};
use tokio::sync::watch;

/// A boxed catalog answer.
pub type CatalogFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, ErrorData>> + Send + 'a>>;

/// Resources and prompts the harness serves. The harness announces the `resources`
/// and `prompts` capabilities (with `listChanged`) as [`offers`](Self::offers) says.
pub trait Catalog: Send + Sync + 'static {
    /// Whether resources, and whether prompts, are offered at all.
    fn offers(&self) -> (bool, bool);

    /// Every resource.
    fn list_resources(&self) -> CatalogFuture<'_, Vec<Resource>>;

    /// Every resource template.
    fn list_resource_templates(&self) -> CatalogFuture<'_, Vec<ResourceTemplate>>;

    /// One resource's contents.
    fn read_resource(
        &self,
        params: ReadResourceRequestParams,
    ) -> CatalogFuture<'_, ReadResourceResult>;

    /// Every prompt.
    fn list_prompts(&self) -> CatalogFuture<'_, Vec<Prompt>>;

    /// One prompt, filled in.
    fn get_prompt(&self, params: GetPromptRequestParams) -> CatalogFuture<'_, GetPromptResult>;

    /// Bumped whenever the resources or prompts may have changed: callers are told
    /// (`notifications/resources/list_changed`, `notifications/prompts/list_changed`).
    fn changes(&self) -> watch::Receiver<u64>;
}
