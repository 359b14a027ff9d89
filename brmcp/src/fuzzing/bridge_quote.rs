//! A client's reading of a bot's answers and the payment it decides on them.

use crate::bridge::quote::{Decision, Listed, Paid, decide};
use brmcp_adapters::protocol::{MAX_AMOUNT_ATOMS, PaymentRequired, PriceBounds, ToolPrice};
use rmcp::model::{CallToolResult, ListToolsResult};

/// Separates the input's pieces: the called tool's name, the bot's `tools/list`
/// result, its first `tools/call` result, and the result of the reissue after a
/// payment.
const SEPARATOR: u8 = 0;

/// The bridge's reading of a bot's answers and the payment it decides on them.
///
/// The input is four pieces separated by NUL bytes: a tool name, a `tools/list`
/// result, a `tools/call` result and a second `tools/call` result (JSON; anything
/// unreadable stands for an empty listing or a result that is not a refusal). Asserts:
/// - reading never panics;
/// - a payment is decided only for a well-formed quote of the called tool that
///   accepts tips, for a tool listed at exactly the quoted price or dynamically
///   priced within the bound it is listed with, and is the quoted shortfall: positive, at most the price, and the price
///   less the reported balance; amounts are within [`MAX_AMOUNT_ATOMS`];
/// - a free, unlisted, unpriced or malformed listing, and a malformed quote, are never
///   paid;
/// - an accepted quote written back ([`PaymentRequired::to_json`]) reads the same;
/// - after a payment, the reissue's answer is never paid again, and is waited on only
///   when it keeps the price and does not raise the shortfall.
pub fn bridge_quote(data: &[u8]) {
    let mut pieces = data.splitn(4, |b| *b == SEPARATOR);
    let tool = String::from_utf8_lossy(pieces.next().unwrap_or_default()).into_owned();
    let tools: Option<ListToolsResult> = pieces.next().and_then(|p| serde_json::from_slice(p).ok());
    let first: Option<CallToolResult> = pieces.next().and_then(|p| serde_json::from_slice(p).ok());
    let second: Option<CallToolResult> = pieces.next().and_then(|p| serde_json::from_slice(p).ok());

    let listing = tools
        .as_ref()
        .and_then(|l| l.tools.iter().find(|t| t.name == tool));
    let listed = listing.map_or(Listed::Unknown, |t| {
        Listed::Tool(ToolPrice::from_meta(t.meta.as_deref()))
    });
    let bounds = listing
        .and_then(|t| PriceBounds::from_meta(t.meta.as_deref()).ok())
        .unwrap_or_default();
    let Some(first) = first else { return };
    let Some(quote) = PaymentRequired::from_result(&first).transpose() else {
        return;
    };
    if let Ok(q) = &quote {
        let again = PaymentRequired::from_json(&q.to_json());
        assert_eq!(
            again.as_ref(),
            Ok(&Some(q.clone())),
            "written back, read the same"
        );
        assert!(q.price_atoms <= MAX_AMOUNT_ATOMS && q.shortfall_atoms <= MAX_AMOUNT_ATOMS);
    }
    let decision = decide(&tool, listed, bounds, &quote, None);
    let Decision::Pay { atoms, price_atoms } = decision else {
        return;
    };
    let q = quote.as_ref().expect("a malformed quote is never paid");
    assert_eq!(q.tool, tool, "paid for another tool");
    assert!(q.accepts_tip(), "paid a bot that takes no tips");
    match listed {
        Listed::Tool(Ok(Some(ToolPrice::Fixed(listed)))) => {
            assert_eq!(
                listed, price_atoms,
                "paid against a price the listing does not show"
            );
        }
        Listed::Tool(Ok(Some(ToolPrice::Dynamic))) => {
            assert!(
                bounds.admits(price_atoms),
                "paid {price_atoms} outside the listed bound {bounds}"
            );
        }
        other => panic!("paid for a tool listed as {other:?}"),
    }
    assert_eq!(price_atoms, q.price_atoms);
    assert_eq!(atoms, q.shortfall_atoms, "paid other than the shortfall");
    assert!(
        atoms > 0 && atoms <= price_atoms,
        "paid {atoms} of {price_atoms}"
    );
    assert_eq!(q.balance_atoms.checked_add(atoms), Some(price_atoms));

    let Some(second) = second else { return };
    let Some(quote) = PaymentRequired::from_result(&second).transpose() else {
        return;
    };
    let paid = Paid { price_atoms, atoms };
    match decide(&tool, listed, bounds, &quote, Some(paid)) {
        Decision::Pay { .. } => panic!("paid twice for one call"),
        Decision::Wait => {
            let q = quote.as_ref().expect("waited on a malformed quote");
            assert_eq!(q.price_atoms, price_atoms, "waited on a changed price");
            assert!(q.shortfall_atoms <= atoms, "waited on a raised shortfall");
        }
        Decision::Refuse(_) => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn bridge_quote_corpus_passes() {
        let corpus = super::super::corpus("bridge_quote");
        let mut paid = 0;
        for (path, data) in &corpus {
            eprintln!("bridge_quote: {}", path.display());
            super::bridge_quote(data);
            paid += usize::from(data.windows(14).any(|w| w == b"shortfallAtoms"));
        }
        assert!(paid > 0, "the corpus holds quotes");
    }

    #[test]
    fn bridge_quote_survives_edge_inputs() {
        for input in [
            &b""[..],
            b"\0",
            b"\0\0\0",
            b"t\0{\0{\0{",
            b"\xff\0[]\0null\0",
        ] {
            super::bridge_quote(input);
        }
    }
}
