//! The bound of a dynamically priced tool (WIRE.md §10): the most, and optionally the
//! least, a call may be quoted, listed beside `brmcp/pricing: "dynamic"` in the tool's
//! `_meta` as [`PRICE_MAX_META`] and [`PRICE_MIN_META`].
//!
//! Peers that do not know the keys (the Go implementation) read the tool as dynamic
//! and ignore them. Peers that do read them strictly, as the price itself: each is a
//! JSON integer in `0..=`[`MAX_AMOUNT_ATOMS`], the least at most the most, and only
//! beside `brmcp/pricing: "dynamic"`. A listing that breaks a rule is malformed as a
//! whole ([`ToolPrice::from_meta`](super::ToolPrice::from_meta) refuses it too), never
//! read with a bound left out or made up.

use rmcp::model::JsonObject;
use serde_json::Value;

use super::money::{MAX_AMOUNT_ATOMS, PriceMetaError, amount};
use super::{DYNAMIC_PRICING, PRICE_META, PRICING_META};

/// `_meta` key of a dynamically priced tool: the most one call may be quoted, in atoms.
pub const PRICE_MAX_META: &str = "brmcp/priceMaxAtoms";

/// `_meta` key of a dynamically priced tool: the least one call may be quoted, in
/// atoms (optional; 0 when left out).
pub const PRICE_MIN_META: &str = "brmcp/priceMinAtoms";

/// What a dynamically priced tool may be quoted: `min..=max` atoms (no most when the
/// listing gives none). The default bounds nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct PriceBounds {
    min_atoms: u64,
    max_atoms: Option<u64>,
}

impl PriceBounds {
    /// No bound: what a dynamic tool listed without the keys may be quoted.
    pub const NONE: Self = Self {
        min_atoms: 0,
        max_atoms: None,
    };

    /// At least `min_atoms`, at most `max_atoms` (if any).
    ///
    /// # Errors
    /// [`PriceMetaError::BadBound`] for an amount over [`MAX_AMOUNT_ATOMS`],
    /// [`PriceMetaError::MinAboveMax`] when the least is above the most.
    pub const fn new(min_atoms: u64, max_atoms: Option<u64>) -> Result<Self, PriceMetaError> {
        if min_atoms > MAX_AMOUNT_ATOMS {
            return Err(PriceMetaError::BadBound(PRICE_MIN_META));
        }
        if let Some(max) = max_atoms {
            if max > MAX_AMOUNT_ATOMS {
                return Err(PriceMetaError::BadBound(PRICE_MAX_META));
            }
            if min_atoms > max {
                return Err(PriceMetaError::MinAboveMax);
            }
        }
        Ok(Self {
            min_atoms,
            max_atoms,
        })
    }

    /// At most `max_atoms`.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub const fn at_most(max_atoms: u64) -> Result<Self, PriceMetaError> {
        Self::new(0, Some(max_atoms))
    }

    /// The least a call may be quoted (0 when unbounded below).
    pub const fn min_atoms(&self) -> u64 {
        self.min_atoms
    }

    /// The most a call may be quoted, if bounded.
    pub const fn max_atoms(&self) -> Option<u64> {
        self.max_atoms
    }

    /// Whether nothing is bounded.
    pub const fn is_none(&self) -> bool {
        self.min_atoms == 0 && self.max_atoms.is_none()
    }

    /// Whether a price of `atoms` is within the bounds.
    pub const fn admits(&self, atoms: u64) -> bool {
        atoms >= self.min_atoms
            && match self.max_atoms {
                Some(max) => atoms <= max,
                None => true,
            }
    }

    /// The tighter of two bounds (the higher least, the lower most); `None` when they
    /// leave no price.
    pub fn narrowed(&self, other: &Self) -> Option<Self> {
        let max = match (self.max_atoms, other.max_atoms) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Self::new(self.min_atoms.max(other.min_atoms), max).ok()
    }

    /// The bounds a listing's `_meta` gives: [`NONE`](Self::NONE) for a tool listed
    /// without the keys (or with no `_meta`).
    ///
    /// # Errors
    /// [`PriceMetaError`] for a bound that is not an integer in
    /// `0..=`[`MAX_AMOUNT_ATOMS`], a least above the most, or a bound on a tool that
    /// is not listed `brmcp/pricing: "dynamic"` (a fixed-price, free or unpriced tool).
    pub fn from_meta(meta: Option<&JsonObject>) -> Result<Self, PriceMetaError> {
        let Some(meta) = meta else {
            return Ok(Self::NONE);
        };
        let (min, max) = (meta.get(PRICE_MIN_META), meta.get(PRICE_MAX_META));
        if min.is_none() && max.is_none() {
            return Ok(Self::NONE);
        }
        let dynamic = meta.get(PRICE_META).is_none()
            && meta.get(PRICING_META).and_then(Value::as_str) == Some(DYNAMIC_PRICING);
        if !dynamic {
            return Err(PriceMetaError::BoundNotDynamic);
        }
        let read = |value: Option<&Value>, key: &'static str| match value {
            None => Ok(None),
            Some(v) => amount(v).map(Some).ok_or(PriceMetaError::BadBound(key)),
        };
        let min = read(min, PRICE_MIN_META)?.unwrap_or(0);
        let max = read(max, PRICE_MAX_META)?;
        Self::new(min, max)
    }

    /// Writes the keys into a listing's `_meta` (the least only when above 0); removes
    /// them when nothing is bounded.
    pub fn write_meta(&self, meta: &mut JsonObject) {
        meta.remove(PRICE_MIN_META);
        meta.remove(PRICE_MAX_META);
        if self.min_atoms > 0 {
            meta.insert(PRICE_MIN_META.into(), self.min_atoms.into());
        }
        if let Some(max) = self.max_atoms {
            meta.insert(PRICE_MAX_META.into(), max.into());
        }
    }

    /// The bounds in words, for a person or a model: `at most 500 atoms`, `10 to 500
    /// atoms`, `at least 10 atoms`, `no bound`.
    pub fn describe(&self) -> String {
        match (self.min_atoms, self.max_atoms) {
            (0, None) => "no bound".to_owned(),
            (0, Some(max)) => format!("at most {max} atoms"),
            (min, None) => format!("at least {min} atoms"),
            (min, Some(max)) => format!("{min} to {max} atoms"),
        }
    }
}

impl std::fmt::Display for PriceBounds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

/// The sentence a tool's description ends with when it is dynamically priced within
/// `bounds`, for the model, which rarely sees `_meta`: `(price quoted per call, at
/// most 500 atoms)`. Both roles write it, so neither appends it twice.
pub fn bounded_price_note(bounds: &PriceBounds) -> String {
    format!("(price quoted per call, {bounds})")
}

/// `description` ending with [`bounded_price_note`] (once: a description that already
/// ends with it is kept as it is); `None` for unbounded `bounds` (nothing to add).
pub fn describe_bounded(description: Option<&str>, bounds: &PriceBounds) -> Option<String> {
    if bounds.is_none() {
        return None;
    }
    let note = bounded_price_note(bounds);
    Some(
        match description.map(str::trim_end).filter(|d| !d.is_empty()) {
            Some(text) if text.ends_with(&note) => text.to_owned(),
            Some(text) => format!("{text} {note}"),
            None => {
                let mut sentence = note[1..note.len() - 1].to_owned();
                sentence[..1].make_ascii_uppercase();
                format!("{sentence}.")
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::ToolPrice;
    use serde_json::json;

    fn meta(v: Value) -> JsonObject {
        serde_json::from_value(v).unwrap()
    }

    fn both(
        v: Value,
    ) -> (
        Result<Option<ToolPrice>, PriceMetaError>,
        Result<PriceBounds, PriceMetaError>,
    ) {
        let m = meta(v);
        (
            ToolPrice::from_meta(Some(&m)),
            PriceBounds::from_meta(Some(&m)),
        )
    }

    #[test]
    fn bounds_are_read_beside_dynamic_pricing() {
        let (price, bounds) = both(json!({"brmcp/pricing": "dynamic", "brmcp/priceMaxAtoms": 500}));
        assert_eq!(price, Ok(Some(ToolPrice::Dynamic)));
        assert_eq!(bounds, PriceBounds::at_most(500));
        let (_, bounds) = both(
            json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 10, "brmcp/priceMaxAtoms": 500}),
        );
        let bounds = bounds.unwrap();
        assert_eq!((bounds.min_atoms(), bounds.max_atoms()), (10, Some(500)));
        assert!(bounds.admits(10) && bounds.admits(500));
        assert!(!bounds.admits(9) && !bounds.admits(501));
        assert_eq!(
            both(json!({"brmcp/pricing": "dynamic"})).1,
            Ok(PriceBounds::NONE)
        );
        assert_eq!(PriceBounds::from_meta(None), Ok(PriceBounds::NONE));
    }

    #[test]
    fn a_malformed_bound_makes_the_listing_malformed() {
        for bad in [
            json!(1.5),
            json!("500"),
            json!(-1),
            json!(u64::MAX),
            json!(null),
        ] {
            let (price, bounds) =
                both(json!({"brmcp/pricing": "dynamic", "brmcp/priceMaxAtoms": bad}));
            assert_eq!(
                price,
                Err(PriceMetaError::BadBound(PRICE_MAX_META)),
                "{bad}"
            );
            assert_eq!(bounds, Err(PriceMetaError::BadBound(PRICE_MAX_META)));
        }
        let (price, _) = both(
            json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 7, "brmcp/priceMaxAtoms": 6}),
        );
        assert_eq!(price, Err(PriceMetaError::MinAboveMax));
        for listing in [
            json!({"brmcp/priceAtoms": 10, "brmcp/priceMaxAtoms": 20}),
            json!({"brmcp/priceAtoms": 0, "brmcp/priceMinAtoms": 0}),
            json!({"brmcp/priceMaxAtoms": 20}),
        ] {
            let (price, bounds) = both(listing.clone());
            assert_eq!(price, Err(PriceMetaError::BoundNotDynamic), "{listing}");
            assert_eq!(bounds, Err(PriceMetaError::BoundNotDynamic));
        }
    }

    #[test]
    fn bounds_write_what_they_read_and_describe_once() {
        let bounds = PriceBounds::new(10, Some(500)).unwrap();
        let mut m = meta(json!({"brmcp/pricing": "dynamic"}));
        bounds.write_meta(&mut m);
        assert_eq!(PriceBounds::from_meta(Some(&m)), Ok(bounds));
        assert_eq!(
            describe_bounded(Some("Search"), &bounds).unwrap(),
            "Search (price quoted per call, 10 to 500 atoms)"
        );
        let once = describe_bounded(Some("Search"), &bounds).unwrap();
        assert_eq!(describe_bounded(Some(&once), &bounds).unwrap(), once);
        assert_eq!(
            describe_bounded(None, &PriceBounds::at_most(5).unwrap()).unwrap(),
            "Price quoted per call, at most 5 atoms."
        );
        assert_eq!(describe_bounded(Some("x"), &PriceBounds::NONE), None);
        assert_eq!(
            PriceBounds::at_most(5)
                .unwrap()
                .narrowed(&PriceBounds::new(2, Some(9)).unwrap()),
            PriceBounds::new(2, Some(5)).ok()
        );
    }
}
