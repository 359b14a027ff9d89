//! Selling other MCP servers: `brmcp serve` in front of upstream MCP servers (stdio
//! commands and streamable-HTTP endpoints) named in `brmcp.json`.
//!
//! - [`UpstreamConfig`]: the `upstreams` section, parsed strictly; per tool a price
//!   in atoms, `"off"`, or a companion tool that answers each call's price within a
//!   bound, an optional default price, resources and prompts offered or
//!   not, tool name prefixes when there are several upstreams.
//! - [`Upstreams`]: the supervisor. Each upstream is connected as an MCP client, its
//!   exposed tools mirrored into the harness's [`DynamicTools`](crate::server::DynamicTools)
//!   (schemas and annotations as listed, the price in `_meta`), each call forwarded
//!   through the harness's one billing path (allowlist, rate limit, price, ledger,
//!   call key), an upstream error or a crash mid-call refunded. Each upstream is
//!   bounded ([`UpstreamLimits`]): its listings in pages, items, bytes and time, its
//!   messages in size, its list changes and progress coalesced, its environment clean.
//!   A failed upstream is
//!   restarted with backoff; while it is down its tools answer an error before any
//!   charge. [`UpstreamStatus`] is each one's state, also written to [`STATUS_FILE`].
//!   The resources and prompts of the upstreams that offer them are one
//!   [`Catalog`](crate::server::Catalog) ([`Upstreams::catalog`]).

mod catalog;
pub(crate) mod child;
pub(crate) mod client;
mod config;
mod limits;
mod listing;
mod mirror;
pub(crate) mod progress;
mod supervisor;

pub(crate) use config::parse_upstreams;
pub use config::{
    BASE_ENV, Endpoint, MAX_NAME_LEN, MAX_PRICE_ATOMS, MAX_UPSTREAMS, ToolPrice, UpstreamConfig,
};
pub use limits::{
    CALL_IDLE_TIMEOUT, CALL_MAX_TIMEOUT, LIST_TIMEOUT, PRICE_TIMEOUT, PROGRESS_INTERVAL,
    RELIST_WINDOW, UpstreamLimits, max_upstream_message,
};
pub use listing::{MAX_LIST_BYTES, MAX_LIST_ITEMS, MAX_LIST_PAGES};
pub use mirror::MAX_TOOLS_PER_UPSTREAM;
pub use supervisor::{
    BACKOFF_MAX, BACKOFF_MIN, BACKOFF_RESET_AFTER, START_TIMEOUT, STATUS_FILE, StatusHook,
    UpstreamState, UpstreamStatus, Upstreams, read_status,
};
