//! Conformance runner: prints this implementation's verdict for each PM body.
//!
//! Reads JSON lines `{"body": "..."}` on stdin (other fields are ignored) and prints one
//! JSON line per input, in the verdict shape of the Go reference vectors:
//! `{"ok":false,"error":"..."}` or
//! `{"ok":true,"sid":..,"mid":..,"seq":..,"total":..,"exp":..,"chunk_b64":..}` with the
//! decoded chunk as canonical padded standard base64. `--canonical` parses in canonical
//! mode. Other implementations can diff their own verdicts against this output.
//!
//! ```text
//! cargo run -p brmcp-wire --example verdicts < cases.jsonl
//! ```

use std::io::{BufRead, Write};
use std::process::ExitCode;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use brmcp_wire::{Mode, parse_with};
use serde_json::Value;

pub(crate) fn verdict(body: &str, mode: Mode) -> String {
    let refused = |e: &dyn std::fmt::Display| {
        format!(
            "{{\"ok\":false,\"error\":{}}}",
            Value::String(e.to_string())
        )
    };
    let part = match parse_with(body.as_bytes(), mode) {
        Ok(part) => part,
        Err(e) => return refused(&e),
    };
    let mut chunk = vec![0u8; part.decoded_len_max()];
    let n = match part.decode_body(&mut chunk) {
        Ok(n) => n,
        Err(e) => return refused(&e),
    };
    format!(
        "{{\"ok\":true,\"sid\":\"{}\",\"mid\":\"{}\",\"seq\":{},\"total\":{},\"exp\":{},\"chunk_b64\":\"{}\"}}",
        part.sid(),
        part.mid(),
        part.seq(),
        part.total(),
        part.exp(),
        STANDARD.encode(&chunk[..n])
    )
}

fn main() -> ExitCode {
    let mode = match std::env::args().nth(1).as_deref() {
        None => Mode::Compatible,
        Some("--canonical") => Mode::Canonical,
        Some(other) => {
            eprintln!("verdicts: unknown argument {other:?} (expected --canonical)");
            return ExitCode::from(2);
        }
    };
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for (n, line) in stdin.lock().split(b'\n').enumerate() {
        let line = match line {
            Ok(line) => line,
            Err(e) => {
                eprintln!("verdicts: reading stdin: {e}");
                return ExitCode::FAILURE;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let body = match serde_json::from_slice::<Value>(&line) {
            Ok(v) => match v.get("body").and_then(Value::as_str) {
                Some(body) => body.to_owned(),
                None => {
                    eprintln!("verdicts: line {}: no string field \"body\"", n + 1);
                    return ExitCode::FAILURE;
                }
            },
            Err(e) => {
                eprintln!("verdicts: line {}: not JSON: {e}", n + 1);
                return ExitCode::FAILURE;
            }
        };
        if writeln!(out, "{}", verdict(&body, mode)).is_err() {
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
