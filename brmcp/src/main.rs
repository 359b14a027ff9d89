//! The `brmcp` command: serve tools over Bison Relay, bridge agents to bots, run a local
//! Bison Relay simulator, and inspect the wire format.

fn main() -> std::process::ExitCode {
    brmcp::cli::main()
}
