//! Reading a tool's price: a whole number of atoms the ledger can hold, or the
//! companion tool that answers each call's price and the bound that answer must keep.

use serde_json::{Map, Value};

use super::{Bad, MAX_PRICE_ATOMS, ToolPrice};
use crate::server::PriceBounds;

/// The keys of a tool priced by its companion.
const PRICED_BY_KEYS: [&str; 3] = ["priced_by", "max_price_atoms", "min_price_atoms"];

/// `{"priced_by": "<tool>", "max_price_atoms": N, "min_price_atoms": M}` at `at`.
pub(super) fn priced_by(
    at: &str,
    tool: &str,
    entry: &Map<String, Value>,
) -> Result<ToolPrice, Bad> {
    if let Some(unknown) = entry.keys().find(|k| !PRICED_BY_KEYS.contains(&k.as_str())) {
        return Err((format!("{at}.{unknown}"), "unknown key".into()));
    }
    let priced_by = match entry.get("priced_by") {
        Some(Value::String(name)) if !name.is_empty() && name != tool => name.clone(),
        Some(Value::String(_)) => {
            return Err((
                format!("{at}.priced_by"),
                "expected the name of another tool of the upstream".into(),
            ));
        }
        Some(_) => return Err((format!("{at}.priced_by"), "expected a string".into())),
        None => return Err((format!("{at}.priced_by"), "missing".into())),
    };
    let bound = |field: &str| match entry.get(field) {
        None => Ok(None),
        Some(v) => atoms(v).map(Some).ok_or_else(|| {
            (
                format!("{at}.{field}"),
                format!("expected a price in atoms (0 to {MAX_PRICE_ATOMS})"),
            )
        }),
    };
    let max = bound("max_price_atoms")?.ok_or_else(|| {
        (
            format!("{at}.max_price_atoms"),
            "missing: the most one call may be charged".to_owned(),
        )
    })?;
    let min = bound("min_price_atoms")?.unwrap_or(0);
    let bounds = PriceBounds::new(min, Some(max)).map_err(|_| {
        (
            format!("{at}.min_price_atoms"),
            "above max_price_atoms".to_owned(),
        )
    })?;
    Ok(ToolPrice::PricedBy { priced_by, bounds })
}

pub(super) fn atoms(value: &Value) -> Option<u64> {
    value.as_u64().filter(|atoms| *atoms <= MAX_PRICE_ATOMS)
}

#[cfg(test)]
mod tests {
    use super::super::parse_upstreams;
    use super::*;
    use serde_json::json;

    #[test]
    fn a_tool_priced_by_its_companion_has_a_bound_and_hides_the_companion() {
        let parsed = parse_upstreams(&json!([{"name": "s", "command": "x",
            "tools": {"search": {"priced_by": "search-price", "max_price_atoms": 5000, "min_price_atoms": 10}},
            "default_price_atoms": 7}]))
        .unwrap();
        let s = &parsed[0];
        assert_eq!(
            s.pricing_of("search"),
            Some(ToolPrice::PricedBy {
                priced_by: "search-price".into(),
                bounds: PriceBounds::new(10, Some(5000)).unwrap()
            })
        );
        assert_eq!(s.price_of("search"), None, "no fixed price");
        assert_eq!(
            s.pricing_of("search-price"),
            None,
            "the companion is hidden, even with a default price"
        );
        assert_eq!(s.price_of("other"), Some(7));
        let bad = |tools: Value| {
            let (key, reason) =
                parse_upstreams(&json!([{"name": "s", "command": "x", "tools": tools}]))
                    .unwrap_err();
            format!("{key}: {reason}")
        };
        let cases = [
            (
                json!({"t": {"priced_by": "p"}}),
                "upstreams[0].tools.t.max_price_atoms: missing: the most one call may be charged",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": -1}}),
                "upstreams[0].tools.t.max_price_atoms: expected a price in atoms (0 to 9223372036854775)",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": 1.5}}),
                "upstreams[0].tools.t.max_price_atoms: expected a price in atoms (0 to 9223372036854775)",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": "10"}}),
                "upstreams[0].tools.t.max_price_atoms: expected a price in atoms (0 to 9223372036854775)",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": 10, "min_price_atoms": 11}}),
                "upstreams[0].tools.t.min_price_atoms: above max_price_atoms",
            ),
            (
                json!({"t": {"max_price_atoms": 10}}),
                "upstreams[0].tools.t.priced_by: missing",
            ),
            (
                json!({"t": {"priced_by": "t", "max_price_atoms": 10}}),
                "upstreams[0].tools.t.priced_by: expected the name of another tool of the upstream",
            ),
            (
                json!({"t": {"priced_by": 5, "max_price_atoms": 10}}),
                "upstreams[0].tools.t.priced_by: expected a string",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": 10, "max": 1}}),
                "upstreams[0].tools.t.max: unknown key",
            ),
            (
                json!({"t": {"priced_by": "p", "max_price_atoms": 10}, "p": 5}),
                "upstreams[0].tools.p: prices \"t\", so it is hidden: give it no price (or \"off\")",
            ),
        ];
        for (tools, want) in cases {
            assert_eq!(bad(tools.clone()), want, "{tools}");
        }
    }
}
