//! The `brmcp` command line, run as separate processes. One test binary.

mod agent_tokens;
mod announcements;
mod bridge_commands;
mod bridge_restarts;
mod call_lifetimes;
mod crash_streams;
mod demo;
mod devnet_directory;
mod devnet_faults;
mod devnet_keep;
mod devnet_posts;
mod devnet_sigkill_edges;
mod directory;
mod directory_exits;
mod doctor;
mod durable_calls;
mod files;
mod guide;

/// The fault-injecting clientrpc fake the clientrpc host's tests use too.
use brmcp_test_support::clientrpc_fake as fake;
mod held_approvals;
mod held_connections;
mod operator;
mod ops_status;
mod page_attacks;
mod processes;
mod readme;
mod reference;
mod remote_refusals;
mod shared_bridge;
mod upstream;
mod user_approvals;
mod web_dynamic_quote;
mod web_pages;
mod webdriver;
mod wire;
