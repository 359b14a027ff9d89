//! The local Bison Relay simulator: framing, private messages, key exchanges, tips, TLS and the
//! clientrpc host's end-to-end checks against it. One test binary.

mod clientrpc_checks;
mod common;
mod faults;
mod framing;
mod keep;
mod kx;
mod pm;
mod post_status;
mod posts;
mod tips;
mod tls_http;
