//! The Bison Relay clientrpc host against a scripted clientrpc server: config, TLS,
//! streams, requests, tips, key exchanges and liveness. One test binary.

use brmcp_test_support::clientrpc_fake as common;
mod config;
mod faults;
mod kx;
mod liveness;
mod queue_bound;
mod requests;
mod streams;
mod tips;
mod tls;
