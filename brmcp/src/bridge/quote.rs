//! What a client pays for one `payment_required` answer: a pure function of the
//! tool's listing, the bot's quote and what the call already paid. The client bridge
//! decides every payment with [`decide`]; it is a module of its own, apart from the
//! proxy that acts on it, so that it is fuzzed without the application around it.
//!
//! The rules, each a refusal when broken (the agent reads the bot, the tool and the
//! numbers):
//! - the quote is well formed ([`PaymentRequired::from_result`]), names the called
//!   tool and accepts tips;
//! - the tool is listed (`tools/list`), with a well-formed price that is not free;
//! - a fixed-price tool is quoted at exactly its listed price; a dynamically priced
//!   one at the quote's own price, within the bound it was listed with
//!   (`brmcp/priceMaxAtoms`, `brmcp/priceMinAtoms`; the caller passes the bound it last
//!   listed to the agent, or a lower one the bot lists since);
//! - the shortfall is positive, at most the price, and is the price less the balance
//!   the bot reports;
//! - **one payment per call**: once a call has paid, a later `payment_required` for it
//!   is only waited on (the credit may still be in flight) and never paid again; a
//!   later quote with another price or a higher shortfall than the one paid ends the
//!   call with a refusal.
//!
//! So a call pays at most once, at most min(listed price, quoted shortfall), and the
//! client's spending caps bind on top.
//! A refusal that the listing explains ([`Refusal::relist`]) is decided again once on
//! a fresh `tools/list`: a price changed since the bridge listed the tools is then
//! paid if the fresh listing agrees with the quote.

use brmcp_adapters::protocol::{
    PaymentRequired, PaymentRequiredError, PriceBounds, PriceMetaError, ToolPrice,
};

/// A tool as the bridge last listed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// Not in the bot's `tools/list`.
    Unknown,
    /// Listed with the price (or none: a plain MCP tool).
    Tool(Result<Option<ToolPrice>, PriceMetaError>),
}

/// A payment this call already made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Paid {
    /// The quoted price it was made against.
    pub price_atoms: u64,
    /// The amount paid: the quoted shortfall.
    pub atoms: u64,
}

/// A dynamically priced call's quote as the user is asked about it: the bot's price
/// and the bound the bridge checked it within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynamicQuote {
    /// The quoted price.
    pub price_atoms: u64,
    /// The bound it is within.
    pub bounds: PriceBounds,
}

impl std::fmt::Display for DynamicQuote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let price = self.price_atoms;
        if self.bounds.is_none() {
            write!(f, "quoted {price} atoms, listed without a bound")
        } else {
            write!(f, "quoted {price} atoms, listed {}", self.bounds)
        }
    }
}

/// What to do with one `payment_required` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Pay this many atoms (still subject to the caps).
    Pay {
        /// The amount: the quoted shortfall.
        atoms: u64,
        /// The call's price it was quoted against.
        price_atoms: u64,
    },
    /// Paid already: wait for the credit to reach the bot and ask again.
    Wait,
    /// Pay nothing; tell the agent why.
    Refuse(Refusal),
}

/// Why the bridge pays nothing for a quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// The `payment_required` body is malformed.
    Malformed(PaymentRequiredError),
    /// The quote names another tool than the one called.
    OtherTool,
    /// The bot takes no tips.
    NoTipRail,
    /// The tool is not in the bot's `tools/list`.
    Unlisted,
    /// The tool is listed without a price.
    Unpriced,
    /// The tool's listed price is malformed.
    BadListing(PriceMetaError),
    /// The tool is listed free.
    Free {
        /// What the bot asks.
        shortfall_atoms: u64,
    },
    /// The quoted price is not the listed one.
    PriceMismatch {
        /// The listed price.
        listed_atoms: u64,
        /// The quoted price.
        quoted_atoms: u64,
    },
    /// A dynamically priced tool quoted outside the bound it was listed with.
    OutsideBound {
        /// The quoted price.
        quoted_atoms: u64,
        /// The listed bound.
        bounds: PriceBounds,
    },
    /// A shortfall of zero: paying would buy nothing.
    NoShortfall,
    /// A shortfall above the price.
    AbovePrice {
        /// The quoted shortfall.
        shortfall_atoms: u64,
        /// The quoted price.
        price_atoms: u64,
    },
    /// Price, balance and shortfall do not add up.
    Inconsistent {
        /// The quoted price.
        price_atoms: u64,
        /// The reported balance.
        balance_atoms: u64,
        /// The quoted shortfall.
        shortfall_atoms: u64,
    },
    /// After a payment, a quote with another price or a higher shortfall.
    ChangedAfterPayment {
        /// What this call paid.
        paid_atoms: u64,
        /// The price it was paid against.
        paid_price_atoms: u64,
        /// The new quote's price.
        price_atoms: u64,
        /// The new quote's shortfall.
        shortfall_atoms: u64,
    },
}

impl Refusal {
    /// Whether a fresh `tools/list` could change the decision: the listing, not the
    /// quote, is what disagrees.
    pub const fn relist(&self) -> bool {
        matches!(
            self,
            Self::Unlisted
                | Self::Unpriced
                | Self::BadListing(_)
                | Self::Free { .. }
                | Self::PriceMismatch { .. }
        )
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Malformed(e) => write!(f, "{e}"),
            Self::OtherTool => f.write_str("payment_required names another tool"),
            Self::NoTipRail => f.write_str("the bot does not accept tips"),
            Self::Unlisted => f.write_str("the tool is not in the bot's tools/list"),
            Self::Unpriced => f.write_str("the tool is listed without a price"),
            Self::BadListing(e) => write!(f, "the tool's listing is malformed: {e}"),
            Self::Free { shortfall_atoms } => {
                write!(
                    f,
                    "the tool is listed free, the bot asks {shortfall_atoms} atoms"
                )
            }
            Self::PriceMismatch {
                listed_atoms,
                quoted_atoms,
            } => write!(
                f,
                "the tool is listed at {listed_atoms} atoms, the bot quotes {quoted_atoms}"
            ),
            Self::OutsideBound {
                quoted_atoms,
                bounds,
            } => match bounds.max_atoms() {
                Some(max) if quoted_atoms > max => write!(
                    f,
                    "the bot quotes {quoted_atoms} atoms, above the {max} atoms at most the tool was listed at"
                ),
                _ => write!(
                    f,
                    "the bot quotes {quoted_atoms} atoms, below the {} atoms at least the tool was listed at",
                    bounds.min_atoms()
                ),
            },
            Self::NoShortfall => f.write_str("the bot quotes a shortfall of 0 atoms"),
            Self::AbovePrice {
                shortfall_atoms,
                price_atoms,
            } => write!(
                f,
                "the bot asks {shortfall_atoms} atoms for a {price_atoms}-atom call"
            ),
            Self::Inconsistent {
                price_atoms,
                balance_atoms,
                shortfall_atoms,
            } => write!(
                f,
                "the bot quotes price {price_atoms}, balance {balance_atoms} and shortfall {shortfall_atoms} atoms, which do not add up"
            ),
            Self::ChangedAfterPayment {
                paid_atoms,
                paid_price_atoms,
                price_atoms,
                shortfall_atoms,
            } => write!(
                f,
                "after {paid_atoms} atoms paid against a {paid_price_atoms}-atom price, the bot asks {shortfall_atoms} atoms of a {price_atoms}-atom price"
            ),
        }
    }
}

/// The decision for a call of `tool` answered with `quote`; see the module docs.
/// `bounds` bind a dynamically priced tool's quote (and nothing else).
pub fn decide(
    tool: &str,
    listed: Listed,
    bounds: PriceBounds,
    quote: &Result<PaymentRequired, PaymentRequiredError>,
    paid: Option<Paid>,
) -> Decision {
    match decide_inner(tool, listed, bounds, quote, paid) {
        Ok(decision) => decision,
        Err(refusal) => Decision::Refuse(refusal),
    }
}

fn decide_inner(
    tool: &str,
    listed: Listed,
    bounds: PriceBounds,
    quote: &Result<PaymentRequired, PaymentRequiredError>,
    paid: Option<Paid>,
) -> Result<Decision, Refusal> {
    let quote = quote.as_ref().map_err(|e| Refusal::Malformed(*e))?;
    if quote.tool != tool {
        return Err(Refusal::OtherTool);
    }
    let (price, balance, shortfall) = (
        quote.price_atoms,
        quote.balance_atoms,
        quote.shortfall_atoms,
    );
    if let Some(paid) = paid {
        // Never a second payment: the credit may be in flight. A quote that moved
        // against the payment is the bot's word against itself.
        if price != paid.price_atoms || shortfall > paid.atoms {
            return Err(Refusal::ChangedAfterPayment {
                paid_atoms: paid.atoms,
                paid_price_atoms: paid.price_atoms,
                price_atoms: price,
                shortfall_atoms: shortfall,
            });
        }
        return Ok(Decision::Wait);
    }
    if !quote.accepts_tip() {
        return Err(Refusal::NoTipRail);
    }
    match listed {
        Listed::Unknown => return Err(Refusal::Unlisted),
        Listed::Tool(Err(e)) => return Err(Refusal::BadListing(e)),
        Listed::Tool(Ok(None)) => return Err(Refusal::Unpriced),
        Listed::Tool(Ok(Some(ToolPrice::Free))) => {
            return Err(Refusal::Free {
                shortfall_atoms: shortfall,
            });
        }
        Listed::Tool(Ok(Some(ToolPrice::Fixed(listed)))) if listed != price => {
            return Err(Refusal::PriceMismatch {
                listed_atoms: listed,
                quoted_atoms: price,
            });
        }
        Listed::Tool(Ok(Some(ToolPrice::Dynamic))) if !bounds.admits(price) => {
            return Err(Refusal::OutsideBound {
                quoted_atoms: price,
                bounds,
            });
        }
        Listed::Tool(Ok(Some(ToolPrice::Fixed(_) | ToolPrice::Dynamic))) => {}
    }
    if shortfall == 0 {
        return Err(Refusal::NoShortfall);
    }
    if shortfall > price {
        return Err(Refusal::AbovePrice {
            shortfall_atoms: shortfall,
            price_atoms: price,
        });
    }
    if balance.checked_add(shortfall) != Some(price) {
        return Err(Refusal::Inconsistent {
            price_atoms: price,
            balance_atoms: balance,
            shortfall_atoms: shortfall,
        });
    }
    Ok(Decision::Pay {
        atoms: shortfall,
        price_atoms: price,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quote(
        price: u64,
        balance: u64,
        shortfall: u64,
    ) -> Result<PaymentRequired, PaymentRequiredError> {
        Ok(PaymentRequired::tip("t", price, balance, shortfall))
    }

    fn decide_(
        tool: &str,
        listed: Listed,
        quote: &Result<PaymentRequired, PaymentRequiredError>,
        paid: Option<Paid>,
    ) -> Decision {
        decide(tool, listed, PriceBounds::NONE, quote, paid)
    }

    #[test]
    fn a_dynamic_quote_is_paid_only_within_its_listed_bound() {
        let bounds = PriceBounds::new(10, Some(500)).unwrap();
        let pay = |price| decide("t", DYNAMIC, bounds, &quote(price, 0, price), None);
        assert!(matches!(pay(500), Decision::Pay { atoms: 500, .. }));
        assert!(matches!(pay(10), Decision::Pay { atoms: 10, .. }));
        let above = pay(501);
        assert_eq!(
            above,
            Decision::Refuse(Refusal::OutsideBound {
                quoted_atoms: 501,
                bounds
            })
        );
        let Decision::Refuse(refusal) = above else {
            unreachable!()
        };
        assert_eq!(
            refusal.to_string(),
            "the bot quotes 501 atoms, above the 500 atoms at most the tool was listed at"
        );
        assert!(!refusal.relist(), "the bound the agent saw binds");
        let Decision::Refuse(below) = pay(9) else {
            panic!("below the least was paid")
        };
        assert_eq!(
            below.to_string(),
            "the bot quotes 9 atoms, below the 10 atoms at least the tool was listed at"
        );
        // A bound binds dynamic tools only: a fixed price is checked as listed.
        assert!(matches!(
            decide("t", FIXED_10, bounds, &quote(10, 0, 10), None),
            Decision::Pay { atoms: 10, .. }
        ));
    }

    const FIXED_10: Listed = Listed::Tool(Ok(Some(ToolPrice::Fixed(10))));
    const DYNAMIC: Listed = Listed::Tool(Ok(Some(ToolPrice::Dynamic)));

    #[test]
    fn the_shortfall_of_a_consistent_quote_is_paid() {
        assert_eq!(
            decide_("t", FIXED_10, &quote(10, 4, 6), None),
            Decision::Pay {
                atoms: 6,
                price_atoms: 10
            }
        );
        assert_eq!(
            decide_("t", DYNAMIC, &quote(900, 0, 900), None),
            Decision::Pay {
                atoms: 900,
                price_atoms: 900
            }
        );
    }

    #[test]
    fn the_listing_bounds_the_quote() {
        let free = Listed::Tool(Ok(Some(ToolPrice::Free)));
        assert_eq!(
            decide_("t", free, &quote(900, 0, 900), None),
            Decision::Refuse(Refusal::Free {
                shortfall_atoms: 900
            })
        );
        assert_eq!(
            decide_("t", FIXED_10, &quote(900, 0, 900), None),
            Decision::Refuse(Refusal::PriceMismatch {
                listed_atoms: 10,
                quoted_atoms: 900
            })
        );
        assert_eq!(
            decide_("t", Listed::Unknown, &quote(9, 0, 9), None),
            Decision::Refuse(Refusal::Unlisted)
        );
        assert_eq!(
            decide_("t", Listed::Tool(Ok(None)), &quote(9, 0, 9), None),
            Decision::Refuse(Refusal::Unpriced)
        );
        assert!(Refusal::Unlisted.relist() && !Refusal::NoShortfall.relist());
    }

    #[test]
    fn shortfalls_that_do_not_fit_the_price_are_refused() {
        assert_eq!(
            decide_("t", FIXED_10, &quote(10, 0, 900), None),
            Decision::Refuse(Refusal::AbovePrice {
                shortfall_atoms: 900,
                price_atoms: 10
            })
        );
        assert_eq!(
            decide_("t", FIXED_10, &quote(10, 10, 0), None),
            Decision::Refuse(Refusal::NoShortfall)
        );
        assert!(matches!(
            decide_("t", FIXED_10, &quote(10, 0, 6), None),
            Decision::Refuse(Refusal::Inconsistent { .. })
        ));
        assert!(matches!(
            decide_("t", DYNAMIC, &quote(u64::MAX >> 1, u64::MAX >> 1, 5), None),
            Decision::Refuse(Refusal::Inconsistent { .. } | Refusal::AbovePrice { .. })
        ));
        assert_eq!(
            decide_("u", FIXED_10, &quote(10, 0, 10), None),
            Decision::Refuse(Refusal::OtherTool)
        );
    }

    #[test]
    fn a_paid_call_waits_and_never_pays_again() {
        let paid = Some(Paid {
            price_atoms: 10,
            atoms: 6,
        });
        assert_eq!(
            decide_("t", FIXED_10, &quote(10, 4, 6), paid),
            Decision::Wait
        );
        assert_eq!(
            decide_("t", FIXED_10, &quote(10, 8, 2), paid),
            Decision::Wait
        );
        assert!(matches!(
            decide_("t", FIXED_10, &quote(10, 0, 10), paid),
            Decision::Refuse(Refusal::ChangedAfterPayment { .. })
        ));
        assert!(matches!(
            decide_("t", FIXED_10, &quote(12, 6, 6), paid),
            Decision::Refuse(Refusal::ChangedAfterPayment { .. })
        ));
    }
}
