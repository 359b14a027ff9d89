//! Frames a JSON-RPC message into Bison Relay PM bodies and puts it back together.
//!
//! ```text
//! cargo run -p brmcp-wire --example frame -- [CHUNK_LEN] [JSON]
//! ```
//!
//! Prints each PM body, shuffles them as a store-and-forward network may, reassembles
//! them and checks the result equals the input.

use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use brmcp_wire::{
    Accepted, Assembler, Chunks, Limits, MessageId, SessionId, UnixTime, encode_part, parse,
};

const DEFAULT_MESSAGE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello over Bison Relay"}}}"#;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let chunk_len = match args.next().map(|s| s.parse::<usize>()) {
        None => 40,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("frame: CHUNK_LEN must be a positive number of bytes");
            return ExitCode::from(2);
        }
    };
    let message = args.next().unwrap_or_else(|| DEFAULT_MESSAGE.to_owned());
    match run(chunk_len, message.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("frame: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(chunk_len: usize, message: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let now = UnixTime(i64::try_from(now)?);
    let sid = SessionId::random()?;
    let mid = MessageId::random()?;
    // Deadline ten minutes out, as the router stamps it.
    let exp = now.saturating_add(600).secs();

    let chunks = Chunks::new(sid, mid, exp, message, chunk_len)?;
    let mut buf = vec![0u8; chunks.max_pm_len()];
    let mut pms = Vec::new();
    println!(
        "{} bytes -> {} part(s) of up to {chunk_len} bytes:",
        message.len(),
        chunks.total()
    );
    for (header, chunk) in chunks {
        let n = encode_part(&header, chunk, &mut buf)?;
        let pm = String::from_utf8(buf[..n].to_vec())?;
        println!("  {pm}");
        pms.push(pm);
    }

    // Deliver the parts back to front.
    pms.reverse();
    let mut arena = vec![0u8; 1 << 20];
    let mut scratch = vec![0u8; 1 << 20];
    let mut assembler: Assembler<'_, u8, 8> =
        Assembler::new(&mut arena, &mut scratch, Limits::default());
    for pm in &pms {
        let part = parse(pm)?;
        if let Accepted::Complete(back) = assembler.add(1, &part, now)? {
            println!(
                "reassembled in reverse order: {}",
                String::from_utf8_lossy(back)
            );
            if back != message {
                return Err("reassembled message differs".into());
            }
            return Ok(());
        }
    }
    Err("message did not complete".into())
}
