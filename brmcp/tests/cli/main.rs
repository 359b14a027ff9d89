//! The `brmcp` command line, run as separate processes. One test binary.

mod bridge_restarts;
mod crash_streams;
mod demo;
mod directory;
mod doctor;
/// The fault-injecting clientrpc fake of the clientrpc host's tests, shared.
#[path = "../../../brmcp-clientrpc/tests/clientrpc/common/mod.rs"]
mod fake;
mod files;
mod operator;
mod ops_status;
mod processes;
mod readme;
mod upstream;
mod wire;
