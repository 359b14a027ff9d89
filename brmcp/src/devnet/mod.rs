//! A local Bison Relay simulator: a relay and nodes speaking real clientrpc.
