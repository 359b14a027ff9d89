//! The `brmcp` command line, run as separate processes. One test binary.

mod agent_tokens;
mod bridge_commands;
mod bridge_restarts;
mod call_lifetimes;
mod crash_streams;
mod demo;
mod devnet_directory;
mod directory;
mod directory_exits;
mod doctor;
/// The fault-injecting clientrpc fake of the clientrpc host's tests, shared.
#[path = "../../../brmcp-clientrpc/tests/clientrpc/common/mod.rs"]
mod fake;
mod files;
mod held_approvals;
mod operator;
mod ops_status;
mod processes;
mod readme;
mod remote_refusals;
mod shared_bridge;
mod upstream;
mod web_pages;
mod webdriver;
mod wire;
