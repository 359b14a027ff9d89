//! The `brmcp` command line, run as separate processes. One test binary.

mod demo;
mod operator;
mod processes;
mod upstream;
mod wire;
