//! MCP over Bison Relay: the serving harness, the client bridge and the command line.

pub use brmcp_adapters as adapters;
pub use brmcp_adapters::secure_fs;
pub use brmcp_clientrpc as clientrpc;

pub mod bridge;
pub mod cli;
pub mod directory;
mod early_progress;
mod file_watch;
pub mod journal;
pub mod server;
pub mod status;
