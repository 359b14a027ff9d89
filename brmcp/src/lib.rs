//! MCP over Bison Relay: the serving harness, the client bridge and the command line.
//!
//! Features (all on by default): `server` (the serving harness), `bridge` (the client
//! bridge), `host` (a running Bison Relay client bound to the library: the inbound PM journal,
//! each role's streams, the bridge's and the directory's payers), `directory` (the
//! directory of providers, a harness itself) and `cli` (the `brmcp` command).

pub use brmcp_adapters as adapters;
#[cfg(feature = "host")]
pub use brmcp_clientrpc as clientrpc;
pub use brmcp_fs as secure_fs;

#[cfg(feature = "bridge")]
pub mod bridge;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "directory")]
pub mod directory;
#[cfg(any(feature = "server", feature = "bridge"))]
mod early_progress;
#[cfg(any(feature = "server", feature = "bridge"))]
mod file_watch;
#[cfg(any(fuzzing, test))]
pub mod fuzzing;
#[cfg(feature = "host")]
pub mod host;
#[cfg(any(feature = "bridge", feature = "cli"))]
mod rfc3339;
#[cfg(feature = "server")]
pub mod server;
#[cfg(all(feature = "server", feature = "host"))]
pub mod status;
