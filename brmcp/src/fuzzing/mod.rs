//! Fuzz harnesses over the library: one plain function per target in
//! `fuzz/fuzz_targets/`.
//!
//! Compiled only under `cfg(fuzzing)` (set by `cargo fuzz`, and by
//! `fuzz/.cargo/config.toml` for a plain `cargo check`) and in this crate's own tests,
//! which replay every file of the committed corpus `fuzz/corpus/<target>/` through the
//! same function. Each harness panics only when a property fails. Each needs the
//! features of the code it drives.

#[cfg(feature = "bridge")]
mod bridge_quote;
#[cfg(all(feature = "server", feature = "bridge"))]
mod config_files;
#[cfg(feature = "directory")]
mod directory_answers;
#[cfg(feature = "server")]
mod upstream_lines;

#[cfg(feature = "bridge")]
pub use bridge_quote::bridge_quote;
#[cfg(all(feature = "server", feature = "bridge"))]
pub use config_files::config_files;
#[cfg(feature = "directory")]
pub use directory_answers::directory_answers;
#[cfg(feature = "server")]
pub use upstream_lines::upstream_lines;

/// The committed corpus, shared with the other crates' harness tests.
#[cfg(all(test, any(feature = "server", feature = "bridge")))]
use brmcp_test_support::corpus;
