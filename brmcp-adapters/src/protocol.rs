//! What both roles share on top of MCP (WIRE.md §8 and §10): the `_meta` keys of priced
//! tools and call keys, a tool's price and the `payment_required` refusal
//! ([`ToolPrice`], [`PaymentRequired`]), and the JSON-RPC error codes a router answers
//! with.
//!
//! This is the one home of these names and numbers, as the Go implementation's root
//! package is for it: the serving harness, the client bridge and the directory read them
//! from here, and this module reads none of them.

use rmcp::model::ErrorCode;

mod money;

pub use money::{
    MAX_AMOUNT_ATOMS, MAX_RAILS, PAYMENT_REQUIRED, PaymentRequired, PaymentRequiredError,
    PriceMetaError, TIP_RAIL, ToolPrice,
};

/// `_meta` key of a listed tool: its price per call in atoms (0 for a free tool).
pub const PRICE_META: &str = "brmcp/priceAtoms";

/// `_meta` key of a listed tool whose price is known only when it is called.
pub const PRICING_META: &str = "brmcp/pricing";

/// The value of [`PRICING_META`].
pub const DYNAMIC_PRICING: &str = "dynamic";

/// The `_meta` key of a `tools/call` request that carries the call key.
pub const CALL_KEY_META: &str = "brmcp/callKey";

/// JSON-RPC error code a router answers with when a request arrives for a session it
/// does not have and the request cannot open one (not `initialize`, no inline
/// protocol metadata). A dialed session recovers from it transparently.
pub const SESSION_NOT_FOUND: ErrorCode = ErrorCode(-32003);

/// JSON-RPC error code of a request that got no answer in time (the TypeScript SDK's
/// `RequestTimeout` code).
pub const REQUEST_TIMEOUT: ErrorCode = ErrorCode(-32001);

/// JSON-RPC error code a router answers with when a peer is at its session cap.
pub const TOO_MANY_SESSIONS: ErrorCode = ErrorCode(-32004);
