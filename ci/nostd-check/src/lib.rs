//! Links `brmcp-wire` into a `#![no_std]` staticlib with its own `#[panic_handler]`.
//!
//! This crate is the no_std proof of CI: it builds only if nothing in brmcp-wire's
//! dependency graph pulls in `std` (which would bring a second panic handler, error
//! E0152). The functions below call the public API (parse, decode, encode, chunking and
//! reassembly) so its code is really compiled and linked, not just type-checked.

#![no_std]
#![forbid(unsafe_code)]

use brmcp_wire::{
    Accepted, Assembler, Chunks, Limits, MessageId, Mode, SessionId, UnixTime, encode_part, parse,
    parse_with,
};

/// Encodes `payload` in parts of `chunk_len` bytes, parses each part back in both modes,
/// decodes its body and feeds it to an [`Assembler`] over stack storage; returns the
/// length of the reassembled payload, or `None` on any error or mismatch.
pub fn roundtrip(payload: &[u8], chunk_len: usize, exp: i64) -> Option<usize> {
    let sid = SessionId::from_entropy([1, 2, 3, 4, 5, 6, 7, 8]);
    let mid = MessageId::from_entropy([8, 7, 6, 5, 4, 3, 2, 1]);
    let mut pm = [0u8; 512];
    let mut chunk = [0u8; 256];
    let mut arena = [0u8; 4096];
    let mut scratch = [0u8; 256];
    let mut assembler: Assembler<'_, u8, 4> =
        Assembler::new(&mut arena, &mut scratch, Limits::default());
    for (header, part) in Chunks::new(sid, mid, exp, payload, chunk_len).ok()? {
        let len = encode_part(&header, part, &mut pm).ok()?;
        let text = pm.get(..len)?;
        for mode in [Mode::Compatible, Mode::Canonical] {
            let parsed = parse_with(text, mode).ok()?;
            if parsed.header() != &header {
                return None;
            }
            let n = parsed.decode_body(&mut chunk).ok()?;
            if chunk.get(..n)? != part {
                return None;
            }
        }
        let parsed = parse_with(text, Mode::Compatible).ok()?;
        match assembler.add(0, &parsed, UnixTime(0)) {
            Ok(Accepted::Complete(whole)) => return (whole == payload).then_some(whole.len()),
            Ok(Accepted::Pending) => {}
            _ => return None,
        }
    }
    None
}

/// Parses one PM body and decodes it into `out`; returns the decoded length.
pub fn parse_part(text: &[u8], out: &mut [u8]) -> Option<usize> {
    let part = parse(core::str::from_utf8(text).ok()?).ok()?;
    part.decode_body(out).ok()
}

/// Keeps both functions in the artifact even though nothing here calls them, so they
/// are monomorphized, compiled and linked (no `#[no_mangle]`, which would need unsafe).
#[used]
static ROUNDTRIP: fn(&[u8], usize, i64) -> Option<usize> = roundtrip;
#[used]
static PARSE_PART: fn(&[u8], &mut [u8]) -> Option<usize> = parse_part;

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    loop {
        core::hint::spin_loop();
    }
}
