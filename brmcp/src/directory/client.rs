//! The directory as an MCP client: it dials providers over the harness's router to
//! read their catalog and to make paid calls, paying through a [`Payer`].

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use brmcp_adapters::protocol::{
    CALL_KEY_META, PaymentRequired, PriceBounds, ToolPrice, result_text,
};
use brmcp_adapters::{BoxError, PeerId, Router};
use rmcp::ServiceExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
    JsonObject, RequestMetaObject,
};
use rmcp::service::{RoleClient, RunningService};

/// How long opening a session (`initialize`) may take.
pub(crate) const DIAL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a `tools/list` may take.
pub(crate) const CRAWL_TIMEOUT: Duration = Duration::from_secs(120);
/// How long one attempt of a paid call may take (the tool itself may be slow).
pub(crate) const TEST_CALL_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a payment may take to be confirmed; past it the payment is ambiguous.
pub const PAY_WAIT: Duration = Duration::from_secs(180);
/// Retries of a call still refused after paying, while the credit lands.
pub(crate) const CREDIT_POLL_TRIES: u32 = 6;
/// The wait between those retries.
pub(crate) const CREDIT_POLL_DELAY: Duration = Duration::from_secs(3);
/// The longest tool-error text kept as a test error, in bytes.
pub(crate) const RESULT_TEXT_MAX: usize = 512;
/// The version announced when dialing.
pub(crate) const CLIENT_VERSION: &str = "0.1.0";

/// A boxed payment future.
pub type PayFuture<'a> = Pin<Box<dyn Future<Output = Result<(), PayError>> + Send + 'a>>;

/// Why a payment did not confirm.
#[derive(Debug)]
#[non_exhaustive]
pub enum PayError {
    /// It definitively failed: nothing was paid (the directory gives the escrow back).
    Failed(BoxError),
    /// Its outcome is unknown: it may still land (the directory never refunds it).
    Unconfirmed,
}

impl std::fmt::Display for PayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Failed(e) => write!(f, "{e}"),
            Self::Unconfirmed => f.write_str(UNCONFIRMED),
        }
    }
}

impl std::error::Error for PayError {}

/// The reference's text for a payment whose outcome is unknown.
pub(crate) const UNCONFIRMED: &str = "tip not confirmed in time; the attempt keeps running in the background and still credits the payee";

/// How the directory pays providers: a tip to `payee`. Resolves `Ok` once the payment
/// is confirmed, [`PayError::Failed`] when nothing was paid, [`PayError::Unconfirmed`]
/// when it may still land. A payment unresolved after [`PAY_WAIT`] is unconfirmed.
pub trait Payer: Send + Sync + 'static {
    /// Pays `atoms` to `payee`.
    fn pay(&self, payee: PeerId, atoms: u64) -> PayFuture<'_>;
}

/// A session to a provider.
pub(crate) type Session = RunningService<RoleClient, ClientConfig>;

/// Opens a fresh MCP session to `uid`.
pub(crate) async fn dial(router: &Router, uid: PeerId, name: &str) -> Result<Session, String> {
    let short: String = uid.to_string().chars().take(8).collect();
    let transport = router.dial(uid).map_err(|e| e.to_string())?;
    let info = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(name, CLIENT_VERSION),
    );
    match tokio::time::timeout(DIAL_TIMEOUT, info.serve(transport)).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(e)) => Err(format!("connect to {short}: {e}")),
        Err(_) => Err(format!("connect to {short}: initialize timed out")),
    }
}

/// Reads `uid`'s catalog: the `tools` array of the first `tools/list` page.
pub(crate) async fn crawl(
    router: &Router,
    uid: PeerId,
    name: &str,
) -> Result<serde_json::Value, String> {
    let session = dial(router, uid, name).await?;
    let listed = tokio::time::timeout(CRAWL_TIMEOUT, session.list_tools(None)).await;
    let _ = session.cancel().await;
    let page = match listed {
        Ok(Ok(page)) => page,
        Ok(Err(e)) => return Err(format!("list tools: {e}")),
        Err(_) => return Err("list tools: timed out".to_owned()),
    };
    serde_json::to_value(page.tools).map_err(|e| format!("list tools: {e}"))
}

/// The text of a result cut to [`RESULT_TEXT_MAX`] bytes, for an error message.
pub(crate) fn result_text_capped(result: &CallToolResult) -> String {
    let text = result_text(result);
    let mut end = text.len().min(RESULT_TEXT_MAX);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

/// One `tools/call` with the call key in `_meta`.
pub(crate) async fn call_once(
    session: &Session,
    tool: &str,
    args: Option<&JsonObject>,
    call_key: &str,
) -> Result<CallToolResult, String> {
    let mut params = CallToolRequestParams::new(tool.to_owned());
    params.arguments = args.cloned();
    let mut meta = RequestMetaObject::default();
    meta.insert(CALL_KEY_META.into(), call_key.into());
    params.meta = Some(meta);
    match tokio::time::timeout(TEST_CALL_TIMEOUT, session.call_tool(params)).await {
        Ok(Ok(result)) => Ok(result),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("call timed out".to_owned()),
    }
}

/// What to do with a quote: the amount to pay, or the reference's refusal. A shortfall
/// above the price is refused: the price is what a listed bound was checked against,
/// so paying more would pay past the bound (no honest bot lacks more than the price).
pub(crate) fn quote_amount(quote: &PaymentRequired, max_atoms: i64) -> Result<i64, String> {
    if quote.shortfall_atoms > quote.price_atoms {
        return Err(format!(
            "quote shortfall {} atoms is above its price {} atoms",
            quote.shortfall_atoms, quote.price_atoms
        ));
    }
    let amount = if quote.shortfall_atoms > 0 {
        quote.shortfall_atoms
    } else {
        quote.price_atoms
    };
    let amount = i64::try_from(amount).unwrap_or(i64::MAX);
    if amount <= 0 {
        return Err("payment_required without an amount".to_owned());
    }
    if amount > max_atoms {
        return Err(format!(
            "quote {amount} atoms exceeds the {max_atoms} atom budget"
        ));
    }
    Ok(amount)
}

/// The bound `tool` is listed with in `catalog` (a crawled `tools` array): the test
/// call's quote must be within it. [`PriceBounds::NONE`] for a tool not in the catalog
/// or listed without one.
///
/// # Errors
/// The tool's price listing is malformed (a bad bound, or a bound on a tool not priced
/// dynamically): nothing is paid for it.
pub(crate) fn listed_bounds(
    catalog: &serde_json::Value,
    tool: &str,
) -> Result<PriceBounds, String> {
    let Some(listed) = catalog
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == tool))
    else {
        return Ok(PriceBounds::NONE);
    };
    let meta = listed["_meta"].as_object();
    let malformed = |e| format!("the tool's listing is malformed: {e}");
    match ToolPrice::from_meta(meta).map_err(malformed)? {
        Some(ToolPrice::Dynamic) => PriceBounds::from_meta(meta).map_err(malformed),
        _ => Ok(PriceBounds::NONE),
    }
}

/// Whether a quote's price is within the bound its tool is listed with.
pub(crate) fn quote_within(quote: &PaymentRequired, bounds: &PriceBounds) -> Result<(), String> {
    let price = quote.price_atoms;
    if bounds.admits(price) {
        return Ok(());
    }
    Err(match bounds.max_atoms() {
        Some(max) if price > max => {
            format!("quote {price} atoms is above the {max} atoms at most the tool is listed at")
        }
        _ => format!(
            "quote {price} atoms is below the {} atoms at least the tool is listed at",
            bounds.min_atoms()
        ),
    })
}

/// The final answer of a paid call and how long its last attempt took.
pub(crate) struct Answer {
    pub(crate) result: CallToolResult,
    pub(crate) latency_ms: i64,
}

/// Milliseconds since `start`.
pub(crate) fn elapsed_ms(start: Instant) -> i64 {
    i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_test_quote_is_checked_against_the_listed_bound() {
        let catalog = serde_json::json!([
            {"name": "fixed", "_meta": {"brmcp/priceAtoms": 10}},
            {"name": "search", "_meta": {"brmcp/pricing": "dynamic", "brmcp/priceMaxAtoms": 500}},
            {"name": "odd", "_meta": {"brmcp/priceAtoms": 10, "brmcp/priceMaxAtoms": 500}},
        ]);
        let bounds = listed_bounds(&catalog, "search").unwrap();
        assert_eq!(bounds, PriceBounds::at_most(500).unwrap());
        assert_eq!(listed_bounds(&catalog, "fixed"), Ok(PriceBounds::NONE));
        assert_eq!(listed_bounds(&catalog, "gone"), Ok(PriceBounds::NONE));
        assert_eq!(
            listed_bounds(&catalog, "odd").unwrap_err(),
            "the tool's listing is malformed: a price bound on a tool not priced \"dynamic\""
        );
        let q = |price| PaymentRequired::tip("search", price, 0, price);
        assert_eq!(quote_within(&q(500), &bounds), Ok(()));
        assert_eq!(
            quote_within(&q(900), &bounds).unwrap_err(),
            "quote 900 atoms is above the 500 atoms at most the tool is listed at"
        );
    }

    #[test]
    fn quotes_are_checked_against_the_budget() {
        let q = PaymentRequired::tip("t", 500, 0, 500);
        assert_eq!(quote_amount(&q, 2000), Ok(500));
        assert_eq!(
            quote_amount(&q, 100).unwrap_err(),
            "quote 500 atoms exceeds the 100 atom budget"
        );
        let q = PaymentRequired::tip("t", 500, 600, 0);
        assert_eq!(quote_amount(&q, 500), Ok(500), "no shortfall: the price");
        let q = PaymentRequired::tip("t", 40, 0, 1900);
        assert_eq!(
            quote_amount(&q, 2000).unwrap_err(),
            "quote shortfall 1900 atoms is above its price 40 atoms"
        );
        let q = PaymentRequired::tip("t", 0, 0, 0);
        assert_eq!(
            quote_amount(&q, 5).unwrap_err(),
            "payment_required without an amount"
        );
    }
}
