//! The money part of the protocol (WIRE.md §10): a tool's listed price and the
//! `payment_required` refusal, read strictly and written in one place.
//!
//! Both readers refuse rather than guess: an amount is a JSON integer in
//! `0..=`[`MAX_AMOUNT_ATOMS`] (the Go side's `int64`), never `5.0`, `"5"` or a
//! negative number, and a body with a missing, extra or mistyped field is an error,
//! never a zero. "Not a refusal" (another error, plain text, a successful result) is
//! `Ok(None)`, not an error.

use rmcp::model::{CallToolResult, JsonObject};
use serde_json::{Map, Value};

use super::bounds::{PRICE_MAX_META, PRICE_MIN_META, PriceBounds};
use super::{DYNAMIC_PRICING, PRICE_META, PRICING_META};

/// The largest amount, in atoms, either role reads or writes: `i64::MAX`, because the
/// Go implementation keeps amounts in `int64`.
pub const MAX_AMOUNT_ATOMS: u64 = i64::MAX as u64;

/// Atoms in one DCR: Bison Relay's tip call takes DCR, everything else here counts atoms.
pub const ATOMS_PER_DCR: u64 = 100_000_000;

/// Milliatoms in one atom: Bison Relay reports tips in milliatoms; prices, quotes and
/// payments are whole atoms.
pub const MATOMS_PER_ATOM: u64 = 1000;

/// The `error` value that marks a `payment_required` body.
pub const PAYMENT_REQUIRED: &str = "payment_required";

/// The rail a bot names in `acceptedRails` to take Bison Relay tips: the only one
/// there is.
pub const TIP_RAIL: &str = "tip";

/// The fields of a `payment_required` body, in the order WIRE.md §10 fixes.
const FIELDS: [&str; 6] = [
    "error",
    "tool",
    "priceAtoms",
    "balanceAtoms",
    "shortfallAtoms",
    "acceptedRails",
];

/// Rails read at most from one body: a bound on a hostile bot's list.
pub const MAX_RAILS: usize = 16;

/// A tool's price as its listing's `_meta` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ToolPrice {
    /// `brmcp/priceAtoms: 0`: never paid for.
    Free,
    /// `brmcp/priceAtoms: n` with `n > 0`: exactly `n` atoms per call.
    Fixed(u64),
    /// `brmcp/pricing: "dynamic"`: the price is known only from the call's refusal
    /// (within the bounds [`PriceBounds::from_meta`] reads, when listed).
    Dynamic,
}

impl ToolPrice {
    /// The price of a tool listed with `meta`, `Ok(None)` for a tool listed with no
    /// price at all (a plain MCP tool).
    ///
    /// # Errors
    /// [`PriceMetaError`] for a price that is not an integer in
    /// `0..=`[`MAX_AMOUNT_ATOMS`], a `brmcp/pricing` other than `"dynamic"`, both
    /// keys at once, or a price bound ([`PriceBounds::from_meta`]) that is malformed
    /// or not beside `brmcp/pricing: "dynamic"`.
    pub fn from_meta(meta: Option<&JsonObject>) -> Result<Option<Self>, PriceMetaError> {
        let Some(meta) = meta else { return Ok(None) };
        let price = Self::price_from_meta(meta)?;
        if meta.contains_key(PRICE_MAX_META) || meta.contains_key(PRICE_MIN_META) {
            PriceBounds::from_meta(Some(meta))?;
        }
        Ok(price)
    }

    fn price_from_meta(meta: &JsonObject) -> Result<Option<Self>, PriceMetaError> {
        let price = meta.get(PRICE_META);
        let pricing = meta.get(PRICING_META);
        match (price, pricing) {
            (None, None) => Ok(None),
            (Some(_), Some(_)) => Err(PriceMetaError::Contradictory),
            (Some(price), None) => match amount(price) {
                Some(0) => Ok(Some(Self::Free)),
                Some(atoms) => Ok(Some(Self::Fixed(atoms))),
                None => Err(PriceMetaError::BadPrice),
            },
            (None, Some(Value::String(s))) if s == DYNAMIC_PRICING => Ok(Some(Self::Dynamic)),
            (None, Some(_)) => Err(PriceMetaError::BadPricing),
        }
    }
}

/// Why a listed tool's price meta was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PriceMetaError {
    /// `brmcp/priceAtoms` is not an integer in `0..=`[`MAX_AMOUNT_ATOMS`].
    BadPrice,
    /// `brmcp/pricing` is not `"dynamic"`.
    BadPricing,
    /// Both `brmcp/priceAtoms` and `brmcp/pricing`.
    Contradictory,
    /// A price bound (the key named) is not an integer in `0..=`[`MAX_AMOUNT_ATOMS`].
    BadBound(&'static str),
    /// `brmcp/priceMinAtoms` is above `brmcp/priceMaxAtoms`.
    MinAboveMax,
    /// A price bound on a tool not listed `brmcp/pricing: "dynamic"`.
    BoundNotDynamic,
}

impl std::fmt::Display for PriceMetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::BadPrice => "brmcp/priceAtoms is not a whole number of atoms",
            Self::BadPricing => "brmcp/pricing is not \"dynamic\"",
            Self::Contradictory => "both brmcp/priceAtoms and brmcp/pricing",
            Self::BadBound(key) => return write!(f, "{key} is not a whole number of atoms"),
            Self::MinAboveMax => "brmcp/priceMinAtoms is above brmcp/priceMaxAtoms",
            Self::BoundNotDynamic => "a price bound on a tool not priced \"dynamic\"",
        })
    }
}

impl std::error::Error for PriceMetaError {}

/// A `payment_required` refusal: the bot runs the call once it holds
/// `shortfall_atoms` more of the caller's money.
///
/// Read with [`from_result`](Self::from_result) (or [`from_json`](Self::from_json)),
/// written with [`to_json`](Self::to_json); the server harness and the client bridge
/// both use this type.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentRequired {
    /// The refused tool.
    pub tool: String,
    /// The call's price, in atoms.
    pub price_atoms: u64,
    /// The caller's balance, in whole atoms.
    pub balance_atoms: u64,
    /// What the caller lacks, in atoms.
    pub shortfall_atoms: u64,
    /// How the bot takes payment (`["tip"]` from every brmcp bot).
    pub accepted_rails: Vec<String>,
}

impl PaymentRequired {
    /// A refusal of `tool` payable by tip, the only rail there is.
    pub fn tip(tool: &str, price_atoms: u64, balance_atoms: u64, shortfall_atoms: u64) -> Self {
        Self {
            tool: tool.to_owned(),
            price_atoms,
            balance_atoms,
            shortfall_atoms,
            accepted_rails: vec![TIP_RAIL.to_owned()],
        }
    }

    /// Whether the bot takes tips.
    pub fn accepts_tip(&self) -> bool {
        self.accepted_rails.iter().any(|r| r == TIP_RAIL)
    }

    /// The body: compact JSON, fields in the order WIRE.md §10 fixes, byte for byte
    /// what the Go implementation's `json.Marshal` writes. A harness sends it as the
    /// only text content of an `isError` result.
    pub fn to_json(&self) -> String {
        // Written by hand: the field order is part of the contract.
        format!(
            r#"{{"error":"{PAYMENT_REQUIRED}","tool":{},"priceAtoms":{},"balanceAtoms":{},"shortfallAtoms":{},"acceptedRails":{}}}"#,
            Value::from(self.tool.as_str()),
            self.price_atoms,
            self.balance_atoms,
            self.shortfall_atoms,
            Value::from(self.accepted_rails.clone()),
        )
    }

    /// The refusal in a tool result, as the Go implementation finds it: `Ok(None)`
    /// unless the result is an error; otherwise the first text content whose JSON is
    /// an object with `"error": "payment_required"`, read strictly.
    ///
    /// # Errors
    /// [`PaymentRequiredError`] when that body is malformed.
    pub fn from_result(result: &CallToolResult) -> Result<Option<Self>, PaymentRequiredError> {
        if result.is_error != Some(true) {
            return Ok(None);
        }
        for text in super::result_texts(result) {
            if let Some(found) = Self::from_json(text).transpose() {
                return found.map(Some);
            }
        }
        Ok(None)
    }

    /// One text content: `Ok(None)` unless it is a JSON object whose `error` is
    /// `"payment_required"`.
    ///
    /// # Errors
    /// [`PaymentRequiredError`] when it is, but a field is missing, extra or
    /// malformed.
    pub fn from_json(text: &str) -> Result<Option<Self>, PaymentRequiredError> {
        let Ok(Value::Object(body)) = serde_json::from_str::<Value>(text) else {
            return Ok(None);
        };
        if body.get("error").and_then(Value::as_str) != Some(PAYMENT_REQUIRED) {
            return Ok(None);
        }
        Self::from_body(&body).map(Some)
    }

    fn from_body(body: &Map<String, Value>) -> Result<Self, PaymentRequiredError> {
        if body.keys().any(|k| !FIELDS.contains(&k.as_str())) {
            return Err(PaymentRequiredError::UnknownField);
        }
        let field = |name: &'static str| body.get(name).ok_or(PaymentRequiredError::Missing(name));
        let atoms = |name: &'static str| {
            amount(field(name)?).ok_or(PaymentRequiredError::NotAnAmount(name))
        };
        let tool = field("tool")?
            .as_str()
            .ok_or(PaymentRequiredError::NotAString("tool"))?
            .to_owned();
        let Value::Array(rails) = field("acceptedRails")? else {
            return Err(PaymentRequiredError::BadRails);
        };
        if rails.len() > MAX_RAILS {
            return Err(PaymentRequiredError::BadRails);
        }
        let accepted_rails = rails
            .iter()
            .map(|r| r.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or(PaymentRequiredError::BadRails)?;
        Ok(Self {
            tool,
            price_atoms: atoms("priceAtoms")?,
            balance_atoms: atoms("balanceAtoms")?,
            shortfall_atoms: atoms("shortfallAtoms")?,
            accepted_rails,
        })
    }
}

/// Why a `payment_required` body was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PaymentRequiredError {
    /// A field is missing.
    Missing(&'static str),
    /// An amount is not an integer in `0..=`[`MAX_AMOUNT_ATOMS`].
    NotAnAmount(&'static str),
    /// A field that should be a string is not.
    NotAString(&'static str),
    /// `acceptedRails` is not a list of at most [`MAX_RAILS`] strings.
    BadRails,
    /// A field WIRE.md §10 does not define.
    UnknownField,
}

impl std::fmt::Display for PaymentRequiredError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing(name) => write!(f, "payment_required without {name}"),
            Self::NotAnAmount(name) => {
                write!(f, "payment_required {name} is not a whole number of atoms")
            }
            Self::NotAString(name) => write!(f, "payment_required {name} is not a string"),
            Self::BadRails => f.write_str("payment_required acceptedRails is not a list of names"),
            Self::UnknownField => f.write_str("payment_required with an unknown field"),
        }
    }
}

impl std::error::Error for PaymentRequiredError {}

/// A JSON integer in `0..=`[`MAX_AMOUNT_ATOMS`]; `5.0`, `"5"`, `-1` and `2^63` are not.
pub(super) fn amount(value: &Value) -> Option<u64> {
    value.as_u64().filter(|n| *n <= MAX_AMOUNT_ATOMS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ContentBlock;
    use serde_json::json;

    const WIRE_MD: &str = r#"{"error":"payment_required","tool":"fortune","priceAtoms":10000,"balanceAtoms":2500,"shortfallAtoms":7500,"acceptedRails":["tip"]}"#;

    fn body(edit: impl FnOnce(&mut Map<String, Value>)) -> String {
        let Value::Object(mut map) = serde_json::from_str(WIRE_MD).unwrap() else {
            unreachable!()
        };
        edit(&mut map);
        Value::Object(map).to_string()
    }

    #[test]
    fn the_wire_md_example_round_trips_byte_for_byte() {
        let parsed = PaymentRequired::from_json(WIRE_MD).unwrap().unwrap();
        assert_eq!(
            parsed,
            PaymentRequired::tip("fortune", 10_000, 2_500, 7_500)
        );
        assert!(parsed.accepts_tip());
        assert_eq!(parsed.to_json(), WIRE_MD);
    }

    #[test]
    fn malformed_amounts_are_errors_never_zero() {
        for bad in [
            json!(5.0),
            json!("5"),
            json!(-5),
            json!(9_223_372_036_854_775_808u64),
            json!(1e3),
            json!(null),
            json!(true),
        ] {
            let text = body(|m| {
                m.insert("shortfallAtoms".into(), bad.clone());
            });
            assert_eq!(
                PaymentRequired::from_json(&text),
                Err(PaymentRequiredError::NotAnAmount("shortfallAtoms")),
                "{bad}"
            );
        }
        let max = body(|m| {
            m.insert("priceAtoms".into(), json!(i64::MAX));
        });
        assert_eq!(
            PaymentRequired::from_json(&max)
                .unwrap()
                .unwrap()
                .price_atoms,
            MAX_AMOUNT_ATOMS
        );
    }

    #[test]
    fn missing_extra_and_mistyped_fields_are_errors() {
        for name in [
            "tool",
            "priceAtoms",
            "balanceAtoms",
            "shortfallAtoms",
            "acceptedRails",
        ] {
            let text = body(|m| {
                m.remove(name);
            });
            assert_eq!(
                PaymentRequired::from_json(&text),
                Err(PaymentRequiredError::Missing(name))
            );
        }
        let extra = body(|m| {
            m.insert("bonus".into(), json!(1));
        });
        assert_eq!(
            PaymentRequired::from_json(&extra),
            Err(PaymentRequiredError::UnknownField)
        );
        let tool = body(|m| {
            m.insert("tool".into(), json!(7));
        });
        assert_eq!(
            PaymentRequired::from_json(&tool),
            Err(PaymentRequiredError::NotAString("tool"))
        );
        for rails in [json!("tip"), json!([1]), json!(vec!["x"; MAX_RAILS + 1])] {
            let text = body(|m| {
                m.insert("acceptedRails".into(), rails.clone());
            });
            assert_eq!(
                PaymentRequired::from_json(&text),
                Err(PaymentRequiredError::BadRails)
            );
        }
        let no_tip = body(|m| {
            m.insert("acceptedRails".into(), json!(["lightning"]));
        });
        assert!(
            !PaymentRequired::from_json(&no_tip)
                .unwrap()
                .unwrap()
                .accepts_tip()
        );
    }

    #[test]
    fn other_texts_are_not_refusals() {
        for text in [
            "",
            "not json",
            "[1]",
            r#"{"error":"rate_limited","priceAtoms":5}"#,
            r#"{"error":5}"#,
            r#"{"tool":"fortune"}"#,
        ] {
            assert_eq!(PaymentRequired::from_json(text), Ok(None), "{text}");
        }
    }

    #[test]
    fn the_result_reader_scans_every_text_of_an_error_result() {
        let mut result = CallToolResult::error(vec![
            ContentBlock::text("the tool is paid"),
            ContentBlock::text(WIRE_MD),
        ]);
        assert_eq!(
            PaymentRequired::from_result(&result)
                .unwrap()
                .unwrap()
                .shortfall_atoms,
            7_500
        );
        result.is_error = Some(false);
        assert_eq!(PaymentRequired::from_result(&result), Ok(None));
        let bad = CallToolResult::error(vec![ContentBlock::text(body(|m| {
            m.insert("shortfallAtoms".into(), json!("5"));
        }))]);
        assert!(PaymentRequired::from_result(&bad).is_err());
    }

    #[test]
    fn price_meta_is_read_strictly() {
        let meta = |v: Value| -> JsonObject { serde_json::from_value(v).unwrap() };
        let read = |v: Value| ToolPrice::from_meta(Some(&meta(v)));
        assert_eq!(ToolPrice::from_meta(None), Ok(None));
        assert_eq!(read(json!({})), Ok(None));
        assert_eq!(
            read(json!({"brmcp/priceAtoms": 0})),
            Ok(Some(ToolPrice::Free))
        );
        assert_eq!(
            read(json!({"brmcp/priceAtoms": 10})),
            Ok(Some(ToolPrice::Fixed(10)))
        );
        assert_eq!(
            read(json!({"brmcp/pricing": "dynamic"})),
            Ok(Some(ToolPrice::Dynamic))
        );
        for bad in [
            json!(10.0),
            json!("10"),
            json!(-1),
            json!(u64::MAX),
            json!(null),
        ] {
            assert_eq!(
                read(json!({"brmcp/priceAtoms": bad})),
                Err(PriceMetaError::BadPrice)
            );
        }
        assert_eq!(
            read(json!({"brmcp/pricing": "fixed"})),
            Err(PriceMetaError::BadPricing)
        );
        assert_eq!(
            read(json!({"brmcp/priceAtoms": 1, "brmcp/pricing": "dynamic"})),
            Err(PriceMetaError::Contradictory)
        );
    }
}
