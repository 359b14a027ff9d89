//! Properties of the price-bound reader (`brmcp/priceMaxAtoms`, `brmcp/priceMinAtoms`):
//! whatever JSON a hostile listing carries, the reader never panics, takes exactly the
//! integers in `0..=i64::MAX` with the least at most the most and only beside
//! `brmcp/pricing: "dynamic"`, and reads back what it wrote.

use brmcp_adapters::protocol::{
    MAX_AMOUNT_ATOMS, PRICE_MAX_META, PRICE_MIN_META, PriceBounds, PriceMetaError, ToolPrice,
};
use proptest::prelude::*;
use rmcp::model::JsonObject;
use serde_json::{Value, json};

/// Any JSON value, nested a little: numbers of every kind, strings that look like
/// numbers, objects and lists.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::from)),
        (0u64..1000).prop_map(|n| Value::from(n as f64)),
        any::<u64>().prop_map(|n| Value::from(n.to_string())),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::from),
            prop::collection::btree_map(".{0,4}", inner, 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// What the reader must make of one bound value: an integer in range, or malformed.
fn amount(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) if n.is_u64() => n.as_u64().filter(|n| *n <= MAX_AMOUNT_ATOMS),
        _ => None,
    }
}

fn meta(v: Value) -> JsonObject {
    serde_json::from_value(v).expect("an object")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Beside dynamic pricing, a bound is taken iff both values are integers in range
    /// and the least is at most the most; the listing's price is malformed otherwise.
    #[test]
    fn bounds_are_taken_exactly_when_well_formed(min in proptest::option::of(any_json()), max in proptest::option::of(any_json())) {
        let mut m = meta(json!({"brmcp/pricing": "dynamic"}));
        if let Some(v) = &min { m.insert(PRICE_MIN_META.into(), v.clone()); }
        if let Some(v) = &max { m.insert(PRICE_MAX_META.into(), v.clone()); }
        let bounds = PriceBounds::from_meta(Some(&m));
        let price = ToolPrice::from_meta(Some(&m));
        let want_min = min.as_ref().map(amount);
        let want_max = max.as_ref().map(amount);
        match (want_min, want_max) {
            (Some(None), _) => prop_assert_eq!(bounds, Err(PriceMetaError::BadBound(PRICE_MIN_META))),
            (_, Some(None)) => prop_assert_eq!(bounds, Err(PriceMetaError::BadBound(PRICE_MAX_META))),
            (lo, hi) => {
                let lo = lo.flatten().unwrap_or(0);
                let hi = hi.flatten();
                if hi.is_some_and(|hi| lo > hi) {
                    prop_assert_eq!(bounds, Err(PriceMetaError::MinAboveMax));
                } else {
                    let b = bounds.expect("well formed");
                    prop_assert_eq!((b.min_atoms(), b.max_atoms()), (lo, hi));
                }
            }
        }
        match bounds {
            Ok(_) => prop_assert_eq!(price, Ok(Some(ToolPrice::Dynamic))),
            Err(e) => prop_assert_eq!(price, Err(e)),
        }
    }

    /// A bound on anything but a dynamic tool is malformed, whatever its value.
    #[test]
    fn a_bound_is_only_for_dynamic_tools(fixed in any_json(), bound in any_json(), which in any::<bool>()) {
        let key = if which { PRICE_MAX_META } else { PRICE_MIN_META };
        let mut m = meta(json!({"brmcp/priceAtoms": fixed}));
        m.insert(key.into(), bound.clone());
        prop_assert_eq!(PriceBounds::from_meta(Some(&m)), Err(PriceMetaError::BoundNotDynamic));
        prop_assert!(ToolPrice::from_meta(Some(&m)).is_err());
        let mut plain = JsonObject::new();
        plain.insert(key.into(), bound);
        prop_assert_eq!(PriceBounds::from_meta(Some(&plain)), Err(PriceMetaError::BoundNotDynamic));
    }

    /// What is written reads back the same, and admits exactly the prices within.
    #[test]
    fn written_bounds_read_back(a in 0..=MAX_AMOUNT_ATOMS, b in 0..=MAX_AMOUNT_ATOMS, bounded in any::<bool>(), price in any::<u64>()) {
        let (lo, hi) = (a.min(b), a.max(b));
        let bounds = PriceBounds::new(lo, bounded.then_some(hi)).expect("in range");
        let mut m = meta(json!({"brmcp/pricing": "dynamic"}));
        bounds.write_meta(&mut m);
        prop_assert_eq!(PriceBounds::from_meta(Some(&m)), Ok(bounds));
        prop_assert_eq!(bounds.admits(price), price >= lo && (!bounded || price <= hi));
        prop_assert_eq!(PriceBounds::new(hi, Some(lo)).is_err(), hi > lo);
    }
}
