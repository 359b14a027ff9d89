//! The serving harness's money: balances, tips, the paid-call journal and call keys.
//!
//! - [`Billing`]: what the harness calls for every paid (or keyed) tool call and every
//!   tip; synchronous, meant to run on `spawn_blocking`.
//! - [`Ledger`]: the default [`Billing`], one crash-safe SQLite file per data
//!   directory ([`FILE_NAME`]), plus the operator's calls (balances, manual credit and
//!   refund with an audit trail, the journal).
//! - [`Shortfall`]: the numbers of a `payment_required` refusal and its exact JSON.
//! - [`CallKey`], [`ArgsHash`]: what makes a retried call run and pay at most once.
//!
//! Balances are milliatoms (tips arrive in milliatoms); prices are atoms. Time is always
//! passed in as `now`.

mod billing;
mod call_key;
mod ledger;
mod money;

pub use billing::{Billing, CallId, CallRequest, Charge, KeyConflict, Keyed, Tip, TipOutcome};
pub use call_key::{
    ArgsHash, CALL_KEY_META, CallKey, CallKeyError, MAX_CALL_KEY_LEN, MAX_OUTCOME_BYTES,
    MIN_CALL_KEY_LEN, OUTCOME_TTL_SECS,
};
pub use ledger::{
    APPLICATION_ID, AuditAction, AuditEntry, Balance, CallState, FILE_NAME, INTERRUPTED,
    JournalEntry, Ledger, LedgerError, Opened, SCHEMA_VERSION, TipRecord,
};
pub use money::{ATOMS_PER_DCR, MATOMS_PER_ATOM, MAX_MATOMS, Shortfall, atoms_to_matoms};
