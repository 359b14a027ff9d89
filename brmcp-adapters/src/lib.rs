//! Adapters between the brmcp envelope core and real hosts: router, sessions, and the
//! rmcp transport.

pub use brmcp_wire as wire;
