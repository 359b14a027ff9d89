//! The serving harness: MCP tools published over Bison Relay, paid per call with tips.
//!
//! - [`Harness`] / [`HarnessBuilder`]: the operator's tools ([`ToolSpec`], each free,
//!   fixed-price or dynamically priced, see [`Price`]) served to the callers an
//!   [`AllowGate`] admits, rate limited per caller, charged per call from their balance
//!   and idempotent per call key. Runs with any host: a [`PmSender`](brmcp_adapters::PmSender)
//!   plus [`Harness::handle_pm`] for every PM and [`Harness::record_tip`] for every tip.
//! - [`DynamicTools`]: tools known only at run time (say, mirrored from another MCP
//!   server), served and billed like the fixed ones.
//! - [`Catalog`]: resources and prompts served beside the tools.
//! - [`ServeConfig`]: the operator's `brmcp.json` (Go field names), read fail-closed.
//! - [`Billing`]: what the harness calls for every paid (or keyed) tool call and every
//!   tip; synchronous, run on `spawn_blocking`, but for its `try_` calls, made on the
//!   harness's task when the store can answer them at once.
//! - [`Ledger`]: the default [`Billing`], one crash-safe SQLite file per data
//!   directory ([`FILE_NAME`]), plus the operator's calls (balances, manual credit and
//!   refund with an audit trail, the journal).
//! - [`Shortfall`]: the numbers of a `payment_required` refusal and its exact JSON.
//! - [`CallKey`], [`ArgsHash`]: what makes a retried call run and pay at most once.
//! - [`Clock`]: the one source of time (rate limits, replay windows, the chat
//!   throttle); [`ManualClock`] for tests.
//!
//! Balances are milliatoms (tips arrive in milliatoms); prices are atoms.
//!
//! # Example
//!
//! ```no_run
//! use brmcp::server::{CallContext, Harness, NoArgs, ServeConfig, ToolError, ToolSpec};
//!
//! async fn fortune(call: CallContext, _: NoArgs) -> Result<String, ToolError> {
//!     Ok(format!("{} will be lucky", call.caller()))
//! }
//!
//! async fn serve(host: impl brmcp::adapters::PmSender) -> Result<(), Box<dyn std::error::Error>> {
//!     let config = ServeConfig::load("brmcp.json".as_ref())?;
//!     let harness = Harness::builder()
//!         .data_dir("data")
//!         .config(&config)
//!         .tool(ToolSpec::fixed("fortune", "A fortune for 10000 atoms", 10_000, fortune))
//!         .build()?;
//!     harness.start(host)?;
//!     // The host now calls `harness.handle_pm(from, text)` for every PM and
//!     // `harness.record_tip(tip)` for every tip, acknowledging it once that returns.
//!     Ok(())
//! }
//! # fn main() {}
//! ```

mod billing;
mod call_key;
mod call_log;
mod calls;
mod catalog;
mod chat;
mod config;
mod dynamic;
mod gate;
mod harness;
mod ledger;
mod listeners;
mod money;
mod rate_limit;
mod reload;
mod tools;
pub mod upstream;

pub use billing::{
    Billing, BillingError, CallId, CallRequest, Charge, Commit, Interrupted, KeyConflict, Keyed,
    MAX_REQUEST_ID_BYTES, NOTICE_WINDOW_SECS, Origin, Tip, TipOutcome,
};
pub use brmcp_adapters::{Clock, ManualClock, SystemClock};
pub use call_key::{
    ArgsHash, CALL_KEY_META, CallKey, CallKeyError, MAX_CALL_KEY_LEN, MAX_OUTCOME_BYTES,
    MIN_CALL_KEY_LEN, OUTCOME_TTL_SECS,
};
pub use catalog::{Catalog, CatalogFuture};
pub use chat::{AutoReply, DEFAULT_AUTO_REPLY, DEFAULT_AUTO_REPLY_INTERVAL};
pub use config::{CONFIG_FILE, CONFIG_KEYS, CONFIG_TEMPLATE, ConfigError, ServeConfig};
pub use dynamic::DynamicTools;
pub use gate::{AllowGate, GateChange};
pub use harness::{
    ANSWER_TOO_LARGE, ANSWER_WRAPPER_BYTES, ChatHook, DEFAULT_PARK_AFTER, FREE_STOPPED_NOTICE,
    Harness, HarnessBuilder, HarnessError, HarnessStats, INTERRUPTED_NOTICE, LISTENED_PARK_AFTER,
    STOPPED_NOTICE, STOPPING, Stopped, TipEvent, TipHook, Visibility, max_answer_bytes,
    max_message_bytes,
};
pub use ledger::{
    APPLICATION_ID, AuditAction, AuditEntry, Balance, CHECKPOINT_PAGES, CallState, DailyRevenue,
    FILE_NAME, INTERRUPTED, JournalEntry, LOCK_FILE_NAME, Ledger, LedgerError, LedgerTotals,
    MAX_JOURNAL_ROWS_PER_CALLER, MAX_OUTCOME_BYTES_PER_CALLER, MAX_WAITING_PER_CALLER, Opened,
    PRUNE_EVERY, PrunedCalls, RESERVATION_WAIT_SECS, SCHEMA_VERSION, STOPPING_REFUSAL,
    TIP_REPLAY_ROWS, TIP_REPLAY_WINDOW_SECS, TOTALS_WINDOW_SECS, TipRecord, VACUUM_FREE_PAGES,
};
pub use money::{
    ATOMS_PER_DCR, MATOMS_PER_ATOM, MAX_MATOMS, Shortfall, atoms_to_matoms, matoms_as_atoms,
};
pub use rate_limit::{DEFAULT_CALLS_PER_MINUTE, RATE_LIMITED, RateLimiter};
pub use reload::{CONFIG_POLL, ConfigWatch, Reconfigured, follow_config};
/// The JSON-schema crate tool input types derive `JsonSchema` from (rmcp's): with
/// `use brmcp::server::schemars;` in scope, `#[derive(schemars::JsonSchema)]` works
/// without a direct dependency.
pub use rmcp::schemars;
pub use tools::{
    AskPriceFn, Availability, CallContext, DYNAMIC_PRICING, IntoToolResult, NoArgs, PRICE_META,
    PRICING_META, Price, PriceBounds, PriceFn, PriceFuture, ToolError, ToolSpec,
};
