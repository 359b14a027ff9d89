//! The C ABI's cost over the Rust API: the same work through `brmcp_wire_*` (called as
//! extern functions, as C would) and through brmcp-wire directly, side by side.
//!
//! Targets (README, "Using the codec from C and Go"): `ffi_parse_decode/c/200KiB` within
//! 5% of `ffi_parse_decode/rust/200KiB`, and `ffi_parse_header/c` at most 30 ns above
//! `ffi_parse_header/rust`.

// The C ABI is unsafe to call by nature; each call says why it is sound.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::hint::black_box;
use std::mem::MaybeUninit;

use brmcp_wire::{Header, MessageId, SessionId, encode_part, parse};
use brmcp_wire_ffi::BRMCP_WIRE_MODE_COMPATIBLE;
use brmcp_wire_ffi::codec::{self, Part};
use brmcp_wire_ffi::status::Status;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

mod paired;

fn payload(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn single_part(data: &[u8]) -> (Header, String) {
    let sid = SessionId::from_entropy([0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18]);
    let mid = MessageId::from_entropy([0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe]);
    let h = Header::new(sid, mid, 1, 1, 1_767_225_600).expect("header");
    let mut buf = vec![0u8; h.encoded_len(data.len())];
    let n = encode_part(&h, data, &mut buf).expect("encode");
    buf.truncate(n);
    (h, String::from_utf8(buf).expect("ascii"))
}

/// `brmcp_wire_parse` as C calls it.
fn c_parse(text: &[u8]) -> Part {
    let mut part = MaybeUninit::<Part>::uninit();
    // SAFETY: `text` is a live slice; `part` is writable.
    let st = unsafe {
        codec::brmcp_wire_parse(
            text.as_ptr(),
            text.len(),
            BRMCP_WIRE_MODE_COMPATIBLE,
            part.as_mut_ptr(),
        )
    };
    assert_eq!(st, Status::Ok);
    // SAFETY: written on success.
    unsafe { part.assume_init() }
}

/// `brmcp_wire_parse` then `brmcp_wire_decode_body`, as C calls them.
fn c_parse_decode(text: &[u8], out: &mut [u8]) -> usize {
    let part = c_parse(text);
    let body = &text[part.body_offset..][..part.body_len];
    let mut n = 0;
    // SAFETY: live slices, and a writable length.
    let st = unsafe {
        codec::brmcp_wire_decode_body(
            body.as_ptr(),
            body.len(),
            BRMCP_WIRE_MODE_COMPATIBLE,
            out.as_mut_ptr(),
            out.len(),
            &mut n,
        )
    };
    assert_eq!(st, Status::Ok);
    n
}

/// Prints the paired times of `rust` and `c` per call (see `paired`) and their ratio.
fn paired(name: &str, rust: impl FnMut() -> usize, c: impl FnMut() -> usize) {
    let p = paired::paired(rust, c);
    println!(
        "paired {name}: rust {:.1} ns, c {:.1} ns per call; c/rust {:.3} (median of batch ratios), c - rust {:.1} ns",
        p.a_ns,
        p.b_ns,
        p.b_over_a,
        p.b_ns - p.a_ns
    );
}

fn boundary(c: &mut Criterion) {
    let len = 200 * 1024;
    let data = payload(len);
    let (header, text) = single_part(&data);
    let mut out = vec![0u8; len + 3];
    assert_eq!(c_parse_decode(text.as_bytes(), &mut out), len);

    let mut g = c.benchmark_group("ffi_parse_decode");
    g.throughput(Throughput::Bytes(len as u64));
    g.bench_function("rust/200KiB", |b| {
        b.iter(|| {
            let part = parse(black_box(&text)).expect("parse");
            part.decode_body(&mut out).expect("decode")
        })
    });
    g.bench_function("c/200KiB", |b| {
        b.iter(|| c_parse_decode(black_box(text.as_bytes()), &mut out))
    });
    g.finish();

    let c_header = {
        let mut h = MaybeUninit::uninit();
        let (sid, mid) = (header.sid().as_bytes(), header.mid().as_bytes());
        // SAFETY: live slices; `h` is writable.
        let st = unsafe {
            codec::brmcp_wire_header_init(
                h.as_mut_ptr(),
                sid.as_ptr(),
                sid.len(),
                mid.as_ptr(),
                mid.len(),
                1,
                1,
                header.exp(),
            )
        };
        assert_eq!(st, Status::Ok);
        // SAFETY: written on success.
        unsafe { h.assume_init() }
    };
    let mut pm = vec![0u8; header.encoded_len(len)];
    let mut g = c.benchmark_group("ffi_encode");
    g.throughput(Throughput::Bytes(len as u64));
    g.bench_function("rust/200KiB", |b| {
        b.iter(|| encode_part(black_box(&header), black_box(&data), &mut pm).expect("encode"))
    });
    g.bench_function("c/200KiB", |b| {
        b.iter(|| {
            let mut n = 0;
            // SAFETY: live header, slices and length.
            let st = unsafe {
                codec::brmcp_wire_encode_part(
                    black_box(&c_header),
                    data.as_ptr(),
                    data.len(),
                    pm.as_mut_ptr(),
                    pm.len(),
                    &mut n,
                )
            };
            assert_eq!(st, Status::Ok);
            n
        })
    });
    g.finish();

    // A typical small JSON-RPC request: the header alone, one call each way.
    let request = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"brmcp/callKey":"0123456789abcdef"}}}"#;
    let (_, text) = single_part(request);
    let mut g = c.benchmark_group("ffi_parse_header");
    g.bench_function("rust", |b| {
        b.iter(|| *parse(black_box(&text)).expect("parse").header())
    });
    g.bench_function("c", |b| b.iter(|| c_parse(black_box(text.as_bytes()))));
    g.finish();

    // Only under `cargo bench` (criterion's `--bench`), not in `cargo test --benches`.
    if std::env::args().any(|a| a == "--bench") {
        paired(
            "parse_header",
            || parse(black_box(&text)).expect("parse").seq().into(),
            || c_parse(black_box(text.as_bytes())).header.seq.into(),
        );
        let (_, big) = single_part(&data);
        let (mut out_rust, mut out_c) = (vec![0u8; len + 3], vec![0u8; len + 3]);
        paired(
            "parse_decode/200KiB",
            || {
                let part = parse(black_box(&big)).expect("parse");
                part.decode_body(&mut out_rust).expect("decode")
            },
            || c_parse_decode(black_box(big.as_bytes()), &mut out_c),
        );
    }
}

criterion_group!(benches, boundary);
criterion_main!(benches);
