//! A running Bison Relay client (brclient, over clientrpc) bound to the library: what
//! each role needs of it, written once, for the command and any other embedder.
//!
//! - [`journal`]: the inbound PM journal (record, then acknowledge, then hand on).
//! - [`journal_streams`]: the PM streams of a data directory: PMs through its journal to the role's
//!   handler, the directory bound to the client's identity, one brmcp per client.
//! - `harness_streams` (feature `server`): a harness's streams (PMs, and tips credited in the
//!   ledger before they are acknowledged).
//! - `TipPayer` and `bridge_streams` (feature `bridge`): the bridge's payer (tips
//!   through the client) and its streams (PMs, and late tip outcomes settling the spend
//!   log).
//! - `HostPayer`, `HostIntroducer` and `with_kx` (feature `directory`): the directory's payer (tips) and introducer
//!   (mediated key exchanges), and its key exchange stream.

#[cfg(feature = "bridge")]
mod bridge;
#[cfg(feature = "directory")]
mod directory;
mod feed;
#[cfg(feature = "server")]
mod harness;
pub mod journal;

#[cfg(feature = "bridge")]
pub use bridge::{TipPayer, bridge_streams, subscribe_to_announcements};
#[cfg(feature = "directory")]
pub use directory::{HostIntroducer, HostPayer, with_kx};
pub use feed::journal_streams;
#[cfg(feature = "server")]
pub use harness::harness_streams;
