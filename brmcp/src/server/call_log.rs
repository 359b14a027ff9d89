//! The harness's one log line per tool call: caller, tool, price, outcome, duration.

use std::time::Duration;

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol::result_texts;
use rmcp::model::CallToolResult;

/// What became of a call, as the log shows it.
fn outcome(result: &CallToolResult) -> &'static str {
    if result.is_error != Some(true) {
        return "ok";
    }
    let payment_required = result_texts(result).any(|t| t.contains("\"payment_required\""));
    if payment_required {
        "payment required"
    } else {
        "error"
    }
}

/// Logs one finished call at info. `price` is `None` when the tool could not price it.
pub(crate) fn log_call(
    caller: &PeerId,
    tool: &str,
    price: Option<u64>,
    result: &CallToolResult,
    took: Duration,
) {
    let price = price.map_or_else(|| "?".to_owned(), |p| p.to_string());
    tracing::info!(
        %caller,
        tool,
        price_atoms = %price,
        outcome = outcome(result),
        ms = took.as_millis(),
        "call"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;

    #[test]
    fn outcomes() {
        assert_eq!(outcome(&CallToolResult::success(vec![])), "ok");
        assert_eq!(
            outcome(&CallToolResult::error(vec![ContentBlock::text(
                r#"{"error":"payment_required","priceAtoms":5}"#
            )])),
            "payment required"
        );
        assert_eq!(
            outcome(&CallToolResult::error(vec![ContentBlock::text("boom")])),
            "error"
        );
    }
}
