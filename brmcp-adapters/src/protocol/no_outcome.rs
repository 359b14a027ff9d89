//! What a keyed `tools/call` may be answered that is no outcome of its call (WIRE.md
//! §10): a refusal that says to ask again, or go-sdk's empty success. A client that
//! sends a call again under its key to get an answer it lost (the bridge's re-ask)
//! waits on for the first answer such a refusal stands in for.

use rmcp::model::CallToolResult;

use super::{RATE_LIMITED, result_texts};

/// The refusal of a keyed call whose original is still running where the serving
/// harness cannot wait for it (the ledger holds the key from before a restart).
pub const DUPLICATE_IN_PROGRESS: &str = "duplicate call: still in progress; retry later";

/// The refusal a waiting duplicate gets when the original call with its key ended
/// without an outcome (a graceful stop took it).
pub const ORIGINAL_CALL_FAILED: &str = "the original call with this key failed; retry";

/// The refusal of a call the serving harness's ledger could not be read or written for.
pub const BILLING_UNAVAILABLE: &str = "server error: billing unavailable; retry later";

/// The serving harnesses' refusals that say to ask again, each the whole text of an
/// error result.
const ASK_AGAIN: [&str; 4] = [
    DUPLICATE_IN_PROGRESS,
    ORIGINAL_CALL_FAILED,
    BILLING_UNAVAILABLE,
    RATE_LIMITED,
];

/// Whether `result`, the answer to a keyed call, is no outcome of the call: one of the
/// refusals that say to ask again, or a success with neither content nor structured
/// content. The Go harness answers a duplicate that waited for an original refused
/// before it ran (for payment, say) so, not with the refusal (its waiters wake with no
/// result). A tool may answer so too; a re-ask that gets its replay then only waits
/// on, as a client that never asked again does.
pub fn is_no_outcome(result: &CallToolResult) -> bool {
    if result.is_error == Some(true) {
        let mut texts = result_texts(result);
        return match (texts.next(), texts.next()) {
            (Some(text), None) => ASK_AGAIN.contains(&text),
            _ => false,
        };
    }
    result.content.is_empty() && result.structured_content.is_none()
}

#[cfg(test)]
mod tests {
    use rmcp::model::ContentBlock;
    use serde_json::json;

    use super::*;

    fn error(text: &str) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(text)])
    }

    #[test]
    fn refusals_that_say_to_ask_again_are_no_outcome() {
        for text in ASK_AGAIN {
            assert!(is_no_outcome(&error(text)), "{text}");
        }
    }

    #[test]
    fn an_empty_success_is_no_outcome() {
        let empty: CallToolResult =
            serde_json::from_value(json!({"content": [], "isError": false})).unwrap();
        assert!(is_no_outcome(&empty));
        let bare: CallToolResult = serde_json::from_value(json!({"content": []})).unwrap();
        assert!(is_no_outcome(&bare));
    }

    #[test]
    fn outcomes_are_outcomes() {
        let outcomes = [
            CallToolResult::success(vec![ContentBlock::text("fortune #1")]),
            CallToolResult::structured(json!({"sum": 3})),
            // A handler's error, even one that quotes a refusal.
            error(&format!("handler error: {DUPLICATE_IN_PROGRESS}")),
            error("duplicate call: outcome not retained across a restart"),
            error(r#"{"error":"payment_required","amountAtoms":500}"#),
            // Two texts: not a harness's refusal.
            CallToolResult::error(vec![
                ContentBlock::text(RATE_LIMITED),
                ContentBlock::text("and more"),
            ]),
            // An error with nothing in it is the handler's, not a refusal.
            CallToolResult::error(vec![]),
        ];
        for outcome in outcomes {
            assert!(!is_no_outcome(&outcome), "{outcome:?}");
        }
    }
}
