//! What both roles share on top of MCP (WIRE.md §8 and §10): the `_meta` keys of priced
//! tools and call keys, a tool's price and the `payment_required` refusal
//! ([`ToolPrice`], [`PaymentRequired`]), whether a bot reserves credit per call
//! ([`RESERVES_CREDIT_META`]) and what it allows each caller ([`CALLS_PER_MINUTE_META`]),
//! the JSON-RPC error codes a router answers with, and a bot's announcement in a post
//! ([`Announcement`]).
//!
//! This is the one home of these names and numbers, as the Go implementation's root
//! package is for it: the serving harness, the client bridge and the directory read them
//! from here, and this module reads none of them.

use rmcp::model::{CallToolResult, ErrorCode, ErrorData};

mod announcement;
mod bounds;
mod call_key;
mod money;
mod no_outcome;
mod rate;
mod reserves;

pub use announcement::{
    ANNOUNCEMENT_VERSION, AnnouncedTool, Announcement, AnnouncementError,
    MARKER as ANNOUNCEMENT_MARKER, MAX_ANNOUNCED_DESCRIPTION_LEN, MAX_ANNOUNCED_NAME_LEN,
    MAX_ANNOUNCED_TOOL_DESCRIPTION_LEN, MAX_ANNOUNCED_TOOL_NAME_LEN, MAX_ANNOUNCED_TOOLS,
    MAX_ANNOUNCEMENT_AGE_SECS, MAX_ANNOUNCEMENT_BYTES, MAX_ANNOUNCEMENT_SKEW_SECS,
};
pub use bounds::{
    PRICE_MAX_META, PRICE_MIN_META, PriceBounds, bounded_price_note, describe_bounded,
};
pub use call_key::{
    MAX_CALL_KEY_LEN, MIN_CALL_KEY_LEN, OUTCOME_TTL_SECS, canonical_arguments, canonical_value,
};
pub use money::{
    ATOMS_PER_DCR, MATOMS_PER_ATOM, MAX_AMOUNT_ATOMS, MAX_RAILS, PAYMENT_REQUIRED, PaymentRequired,
    PaymentRequiredError, PriceMetaError, TIP_RAIL, ToolPrice,
};
pub use no_outcome::{
    BILLING_UNAVAILABLE, DUPLICATE_IN_PROGRESS, ORIGINAL_CALL_FAILED, is_no_outcome,
};
pub use rate::{
    CALLS_PER_MINUTE_META, CallsPerMinuteError, RATE_LIMITED, advertise_calls_per_minute,
    calls_per_minute,
};
pub use reserves::{
    RESERVES_CREDIT_META, ReservesCreditError, advertise_reserves_credit, reserves_credit,
};

/// `_meta` key of a listed tool: its price per call in atoms (0 for a free tool).
pub const PRICE_META: &str = "brmcp/priceAtoms";

/// `_meta` key of a listed tool whose price is known only when it is called.
pub const PRICING_META: &str = "brmcp/pricing";

/// The value of [`PRICING_META`].
pub const DYNAMIC_PRICING: &str = "dynamic";

/// The most hits one directory search returns (`total` still counts every match); an
/// answer with more is refused by the bridge.
pub const SEARCH_HIT_CAP: usize = 50;

/// The `_meta` key of a `tools/call` request that carries the call key.
pub const CALL_KEY_META: &str = "brmcp/callKey";

// Session error codes. They sit in the JSON-RPC server-error band MCP leaves to
// implementations (-32000..-32019 since the 2026-07-28 allocation policy), clear of every
// code an SDK the agents use reserves: rmcp (-32002, -32020..-32022), go-sdk's jsonrpc2
// (-32000 overloaded, -32001 unknown, -32003 client closing, -32004 server closing, -32005
// rejected; -32002, -32042), the Python SDK (-32000, -32001, -32002, -32020..-32022,
// -32042, -32800) and the TypeScript SDK (-32000, -32001, -32042). go-sdk turns -32003 and
// -32004 into "connection closed", which is why these are not those.

/// JSON-RPC error code a router answers with when a request arrives for a session it
/// does not have and cannot resume, and the request cannot open one (not `initialize`,
/// no inline protocol metadata). A dialed session recovers from it transparently.
pub const SESSION_NOT_FOUND: ErrorCode = ErrorCode(-32010);

/// JSON-RPC error code a router answers with when a peer is at its session cap.
pub const TOO_MANY_SESSIONS: ErrorCode = ErrorCode(-32011);

/// JSON-RPC error code of the answer a serving harness sends, once it has restarted, to
/// a paid call its previous process was running when it died: the call was refunded and
/// its call key released, so the same call with the same key runs afresh. A client
/// still waiting for the call may retry it at once; any other client simply sees the
/// request fail with a clear error.
pub const CALL_INTERRUPTED: ErrorCode = ErrorCode(-32012);

/// JSON-RPC error code a router that tells refused peers
/// ([`RouterConfig::tell_refused`](crate::RouterConfig::tell_refused)) answers a request
/// with when its authorizer refuses the sender (a serving harness: not on its
/// allowlist). The request was not read further; retrying it changes nothing until the
/// operator allows the caller.
pub const NOT_ALLOWED: ErrorCode = ErrorCode(-32013);

/// JSON-RPC error code of a request that got no answer in time (the TypeScript and
/// Python SDKs' `RequestTimeout`). Made up locally for the caller; never sent.
pub const REQUEST_TIMEOUT: ErrorCode = ErrorCode(-32001);

/// The code go-sdk gives a plain Go error, among them its refusal of a request on a
/// session that has not seen `initialize` (see [`is_session_lost`]).
const GO_SDK_PLAIN_ERROR: ErrorCode = ErrorCode(0);

/// The end of go-sdk's refusal text: `method "<m>" is invalid during session
/// initialization`.
const GO_SDK_UNINITIALIZED: &str = "\" is invalid during session initialization";

/// Whether an error answer says the server no longer has the session: ours
/// ([`SESSION_NOT_FOUND`]), or go-sdk's refusal of a request on the fresh, uninitialized
/// session the Go router opens for a session id it has forgotten.
pub fn is_session_lost(error: &ErrorData) -> bool {
    error.code == SESSION_NOT_FOUND
        || (error.code == GO_SDK_PLAIN_ERROR
            && error.message.starts_with("method \"")
            && error.message.ends_with(GO_SDK_UNINITIALIZED))
}

/// The text items of a tool result, in order (images and other content skipped).
pub fn result_texts(result: &CallToolResult) -> impl Iterator<Item = &str> {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
}

/// The text of a tool result: its text items joined with newlines, as Go consumers
/// read it.
pub fn result_text(result: &CallToolResult) -> String {
    result_texts(result).collect::<Vec<_>>().join("\n")
}
