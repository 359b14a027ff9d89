//! The `brmcp` command line, run as separate processes. One test binary.

mod demo;
mod directory;
mod operator;
mod processes;
mod wire;
