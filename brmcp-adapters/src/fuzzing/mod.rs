//! Fuzz harnesses: one plain function per target in `fuzz/fuzz_targets/`.
//!
//! Compiled only under `cfg(fuzzing)` (set by `cargo fuzz`, and by
//! `fuzz/.cargo/config.toml` for a plain `cargo check`) and in this crate's own tests,
//! which replay every file of the committed corpus `fuzz/corpus/<target>/` through the
//! same function. Each harness panics only when a property fails.

mod announcements;
mod router_ops;

pub use announcements::announcements;
pub use router_ops::router_ops;

/// The committed corpus, shared with the other crates' harness tests.
#[cfg(test)]
use brmcp_test_support::corpus;
