//! Units of money and the `payment_required` refusal (WIRE.md §10).
//!
//! Balances are kept in milliatoms, because Bison Relay tips arrive in milliatoms and a
//! remainder below one atom must not be lost; prices and everything on the wire are in
//! whole atoms.

use brmcp_adapters::protocol::PaymentRequired;
pub use brmcp_adapters::protocol::{ATOMS_PER_DCR, MATOMS_PER_ATOM};

/// The most milliatoms one balance, tip or price may hold.
///
/// SQLite integers are signed 64-bit. The whole DCR supply (21e6 DCR = 2.1e18 matoms)
/// fits with room to spare, so an amount above this is a bug or an attack, not money.
pub const MAX_MATOMS: u64 = i64::MAX as u64;

/// `atoms` in milliatoms, or `None` above [`MAX_MATOMS`].
pub const fn atoms_to_matoms(atoms: u64) -> Option<u64> {
    match atoms.checked_mul(MATOMS_PER_ATOM) {
        Some(matoms) if matoms <= MAX_MATOMS => Some(matoms),
        _ => None,
    }
}

/// Milliatoms as atoms with the milliatom remainder: `5000` is `5.000`, `1` is `0.001`.
pub fn matoms_as_atoms(matoms: u64) -> String {
    format!(
        "{}.{:03}",
        matoms / MATOMS_PER_ATOM,
        matoms % MATOMS_PER_ATOM
    )
}

/// Why a call was refused for money: the numbers of the `payment_required` result.
///
/// All three are whole atoms, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shortfall {
    /// The price of the refused call.
    pub price_atoms: u64,
    /// The caller's balance, rounded down to whole atoms.
    pub balance_atoms: u64,
    /// `price_atoms - balance_atoms`, never below zero.
    pub shortfall_atoms: u64,
}

impl Shortfall {
    /// The shortfall of a caller holding `balance_matoms` against `price_atoms`.
    ///
    /// The balance is floored to whole atoms, so a caller with 1999 matoms facing a
    /// 2-atom price is 1 atom short (a tip of 1 atom covers it, as 2999 matoms >= 2000).
    pub const fn new(price_atoms: u64, balance_matoms: u64) -> Self {
        let balance_atoms = balance_matoms / MATOMS_PER_ATOM;
        Self {
            price_atoms,
            balance_atoms,
            shortfall_atoms: price_atoms.saturating_sub(balance_atoms),
        }
    }

    /// The `payment_required` body for a call of `tool`: the protocol's one writer
    /// ([`PaymentRequired::to_json`]), payable by tip.
    ///
    /// The harness sends it as the only text content of an `isError` result.
    pub fn payment_required_json(&self, tool: &str) -> String {
        PaymentRequired::tip(
            tool,
            self.price_atoms,
            self.balance_atoms,
            self.shortfall_atoms,
        )
        .to_json()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atoms_keep_the_milliatom_remainder() {
        assert_eq!(matoms_as_atoms(0), "0.000");
        assert_eq!(matoms_as_atoms(1), "0.001");
        assert_eq!(matoms_as_atoms(5_000), "5.000");
        assert_eq!(matoms_as_atoms(10_000_250), "10000.250");
    }

    #[test]
    fn payment_required_bytes_match_wire_md() {
        // WIRE.md §10's example: 10000 atoms against 2500.5 atoms.
        let body = Shortfall::new(10_000, 2_500_500).payment_required_json("fortune");
        assert_eq!(
            body,
            r#"{"error":"payment_required","tool":"fortune","priceAtoms":10000,"balanceAtoms":2500,"shortfallAtoms":7500,"acceptedRails":["tip"]}"#
        );
    }

    #[test]
    fn payment_required_escapes_the_tool_name() {
        let body = Shortfall::new(1, 0).payment_required_json("a\"b\\c\n");
        assert_eq!(
            body,
            r#"{"error":"payment_required","tool":"a\"b\\c\n","priceAtoms":1,"balanceAtoms":0,"shortfallAtoms":1,"acceptedRails":["tip"]}"#
        );
        let parsed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(parsed["tool"], "a\"b\\c\n");
    }

    #[test]
    fn shortfall_floors_the_balance_and_never_goes_negative() {
        assert_eq!(
            Shortfall::new(2, 1_999),
            Shortfall {
                price_atoms: 2,
                balance_atoms: 1,
                shortfall_atoms: 1
            }
        );
        assert_eq!(Shortfall::new(2, 5_000).shortfall_atoms, 0);
        assert_eq!(Shortfall::new(0, 0).shortfall_atoms, 0);
    }

    #[test]
    fn atoms_to_matoms_refuses_overflow() {
        assert_eq!(atoms_to_matoms(3), Some(3_000));
        assert_eq!(
            atoms_to_matoms(MAX_MATOMS / 1000),
            Some(MAX_MATOMS / 1000 * 1000)
        );
        assert_eq!(atoms_to_matoms(MAX_MATOMS / 1000 + 1), None);
        assert_eq!(atoms_to_matoms(u64::MAX), None);
    }
}
