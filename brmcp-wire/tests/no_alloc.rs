//! The crate's zero-allocation guarantee, checked with a counting global allocator.
//!
//! Inputs are built first (that allocates); then parse, decode, encode, chunking and
//! reassembly (add, completion, expiry) run over all of them, in both modes, inside one
//! counted region that must see no
//! allocation, reallocation or deallocation at all. The file holds a single test so no
//! other test of this binary runs while the region is open.

use std::alloc::System;
use std::fmt::Write as _;
use std::hint::black_box;

use brmcp_wire::{
    Accepted, Assembler, Chunks, DEFAULT_CHUNK_LEN, Header, Limits, MAX_PM_LEN, MessageId, Mode,
    SessionId, UnixTime, encode_part, parse_with,
};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Payload sizes of the generated parts: the base64 quantum edges, the whitespace
/// path's block edges, and large single parts up to the default chunk.
const SIZES: &[usize] = &[
    1,
    2,
    3,
    4,
    5,
    6,
    7,
    31,
    32,
    33,
    255,
    256,
    767,
    768,
    769,
    1000,
    3000,
    4096,
    65_536,
    DEFAULT_CHUNK_LEN,
];

/// Chunk lengths the `Chunks` pass splits each payload with.
const CHUNK_LENS: &[usize] = &[1, 3, 100, 1024, 64 * 1024, DEFAULT_CHUNK_LEN];

fn ids() -> (SessionId, MessageId) {
    (
        SessionId::from_entropy([0x5e, 0x55, 0x10, 0x4e, 0x00, 0x11, 0x22, 0x33]),
        MessageId::from_entropy([0x4d, 0x1d, 0xff, 0xee, 0x01, 0x02, 0x03, 0x04]),
    )
}

/// xorshift64: deterministic payloads and mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % u64::try_from(n).expect("n fits")).expect("below n")
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next().to_le_bytes()[3]).collect()
    }
}

fn encode(header: &Header, chunk: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; header.encoded_len(chunk.len())];
    let n = encode_part(header, chunk, &mut out).expect("encode");
    assert_eq!(n, out.len());
    out
}

/// Offset of the body: just past the `]--` separator.
fn body_start(text: &[u8]) -> usize {
    text.windows(3)
        .position(|w| w == b"]--")
        .expect("separator")
        + 3
}

/// Inserts ASCII whitespace into the body every `every` bytes.
fn with_whitespace(text: &[u8], every: usize) -> Vec<u8> {
    let start = body_start(text);
    let mut out = text[..start].to_vec();
    for (i, &b) in text[start..].iter().enumerate() {
        if i > 0 && i % every == 0 {
            out.extend_from_slice([&b"\r\n"[..], b" ", b"\t", b"\n\x0c"][i / every % 4]);
        }
        out.push(b);
    }
    out
}

/// Every PM body the test runs through the codec: valid parts of many sizes, the same
/// with whitespace in the body, malformed variants, random mutations, and every body of
/// the Go verdict vectors (accepted and refused).
fn inputs(payload: &[u8]) -> Vec<Vec<u8>> {
    let (sid, mid) = ids();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut out = Vec::new();
    for &size in SIZES {
        let header = Header::new(sid, mid, 1, 1, 1_767_225_600).expect("header");
        let valid = encode(&header, &payload[..size]);
        out.push(with_whitespace(&valid, 76));
        out.push(with_whitespace(&valid, 3));
        // Malformed: a bad symbol, a truncated body, a broken header, surrounding space.
        let mut bad_symbol = valid.clone();
        let body = body_start(&valid);
        bad_symbol[body + rng.below(valid.len() - body)] = b'*';
        out.push(bad_symbol);
        out.push(valid[..valid.len() - 1].to_vec());
        out.push(
            valid
                .iter()
                .map(|&b| if b == b'=' { b'_' } else { b })
                .collect(),
        );
        out.push([b" \n", &valid[..], "\u{3000}".as_bytes()].concat());
        let mut non_utf8 = valid.clone();
        non_utf8.push(0xff);
        out.push(non_utf8);
        for _ in 0..4 {
            let mut m = valid.clone();
            let at = rng.below(m.len().min(200));
            m[at] = rng.bytes(1)[0];
            out.push(m);
        }
        out.push(valid);
    }
    for header in [
        &b"--mcp[v=2,sid=a,mid=b,seq=1/1,exp=0]--QQ=="[..],
        b"--mcp[v=1,sid=A,mid=b,seq=1/1,exp=0]--QQ==",
        b"--mcp[v=1,sid=a,mid=b,seq=0/1,exp=0]--QQ==",
        b"--mcp[v=1,sid=a,mid=b,seq=1/65,exp=0]--QQ==",
        b"--mcp[v=01,sid=a,mid=b,seq=+1/1,exp=-0,x=y,v=1]--QQ==",
        b"--mcp[v=1,sid=a,mid=b,seq=1/1,exp=0]--QR==",
        b"--mcp[v=1,sid=a,mid=b,seq=1/1,exp=0]--",
        b"--mcp[v=1,sid=a,mid=b,seq=1/1,exp=0",
        b"--mcp[v=1,sid=a,mid=b,seq=1/1,exp=99999999999999999999]--QQ==",
        b"--mcp[v=1,sid",
        b"--mcp[",
        b"hello, not ours",
        b"",
    ] {
        out.push(header.to_vec());
    }
    let vectors = include_str!("vectors/go/wire-parse-go.jsonl");
    for line in vectors.split('\n').filter(|l| !l.trim().is_empty()) {
        let case: serde_json::Value = serde_json::from_str(line).expect("vector line");
        out.push(case["body"].as_str().expect("body").as_bytes().to_vec());
    }
    out
}

/// A fixed-size `fmt::Write` sink: error texts are formatted without allocating.
struct Sink {
    buf: [u8; 256],
    len: usize,
}

impl std::fmt::Write for Sink {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.buf
            .get_mut(self.len..end)
            .ok_or(std::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// What the counted region did, checked after it closes.
#[derive(Debug, Default)]
struct Tally {
    parsed: [usize; 2],
    refused: [usize; 2],
    decoded: [usize; 2],
    body_refused: [usize; 2],
    too_small: usize,
    reencoded: usize,
    parts: usize,
    chunk_errors: usize,
    bytes: usize,
    completed: usize,
    pending: usize,
    assemble_errors: usize,
    expired: usize,
}

#[test]
fn codec_and_reassembly_never_allocate() {
    let (sid, mid) = ids();
    let payload = Rng(7).bytes(*SIZES.iter().max().expect("sizes"));
    let inputs = inputs(&payload);
    let mut decoded = vec![0u8; MAX_PM_LEN];
    let mut again = vec![0u8; MAX_PM_LEN];
    let mut pm = vec![0u8; MAX_PM_LEN];
    let mut sink = Sink {
        buf: [0; 256],
        len: 0,
    };
    let mut t = Tally::default();
    let reassembly = reassembly_inputs(&payload);
    let mut arena = vec![0u8; 4 << 20];
    let mut scratch = vec![0u8; MAX_PM_LEN];
    let limits = Limits::DEFAULT
        .with_max_pending_per_peer(3)
        .with_partial_timeout_secs(60);
    let mut assembler: Assembler<'_, [u8; 32], 8> =
        Assembler::new(&mut arena, &mut scratch, limits);
    let now = UnixTime(T_NOW);

    let region = Region::new(GLOBAL);
    for (peer, text) in &reassembly {
        let Ok(part) = parse_with(text, Mode::Compatible) else {
            continue;
        };
        match assembler.add([*peer; 32], &part, now) {
            Ok(Accepted::Complete(message)) => {
                t.completed += 1;
                t.bytes += black_box(message).len();
            }
            Ok(Accepted::Pending | Accepted::Duplicate) => t.pending += 1,
            Err(e) => {
                t.assemble_errors += 1;
                sink.len = 0;
                let _ = write!(sink, "{e}");
            }
        }
    }
    t.expired += assembler.expire(UnixTime(T_NOW + 61));
    black_box((
        assembler.next_deadline(),
        assembler.stats(),
        assembler.peer_stats(&[1; 32]),
    ));
    for text in &inputs {
        for (m, mode) in [Mode::Compatible, Mode::Canonical].into_iter().enumerate() {
            let part = match parse_with(text, mode) {
                Ok(part) => part,
                Err(e) => {
                    t.refused[m] += 1;
                    black_box(e.is_foreign());
                    sink.len = 0;
                    let _ = write!(sink, "{e}");
                    continue;
                }
            };
            t.parsed[m] += 1;
            let max = part.decoded_len_max();
            let n = match part.decode_body(&mut decoded[..max]) {
                Ok(n) => n,
                Err(e) => {
                    t.body_refused[m] += 1;
                    sink.len = 0;
                    let _ = write!(sink, "{e}");
                    continue;
                }
            };
            t.decoded[m] += 1;
            t.bytes += n;
            if n > 0 && part.decode_body(&mut again[..n - 1]).is_err() {
                t.too_small += 1;
            }
            let chunk = &decoded[..n];
            if let Ok(len) = encode_part(part.header(), chunk, &mut pm) {
                let back = parse_with(&pm[..len], Mode::Canonical)
                    .and_then(|p| Ok(p.decode_body(&mut again)?));
                if back == Ok(n) && again[..n] == *chunk {
                    t.reencoded += 1;
                }
            }
        }
    }
    for &size in SIZES {
        for &chunk_len in CHUNK_LENS {
            let chunks = match Chunks::new(sid, mid, -1, &payload[..size], chunk_len) {
                Ok(chunks) => chunks,
                Err(e) => {
                    t.chunk_errors += 1;
                    sink.len = 0;
                    let _ = write!(sink, "{e}");
                    continue;
                }
            };
            for (header, chunk) in chunks {
                if let Ok(len) = encode_part(&header, chunk, &mut pm) {
                    t.parts += 1;
                    t.bytes += black_box(&pm[..len]).len();
                }
                let _ = encode_part(&header, chunk, &mut pm[..10]);
            }
        }
    }
    for bad in [
        Chunks::new(sid, mid, 0, &[], 10).err(),
        Chunks::new(sid, mid, 0, &payload[..1], 0).err(),
        Chunks::new(sid, mid, 0, &payload[..65], 1).err(),
    ] {
        if bad.is_some() {
            t.chunk_errors += 1;
        }
    }
    let change = region.change();

    assert_eq!(
        (
            change.allocations,
            change.reallocations,
            change.deallocations
        ),
        (0, 0, 0),
        "the codec allocated: {change:?}; work done: {t:?}"
    );
    // The region did real work on both sides of every check.
    for m in 0..2 {
        assert!(t.parsed[m] > 0 && t.refused[m] > 0, "{t:?}");
        assert!(t.decoded[m] > 0 && t.body_refused[m] > 0, "{t:?}");
    }
    assert_eq!(t.too_small, t.decoded[0] + t.decoded[1], "{t:?}");
    assert_eq!(t.reencoded, t.decoded[0] + t.decoded[1], "{t:?}");
    assert!(t.parts > 0 && t.chunk_errors >= 3, "{t:?}");
    assert!(t.bytes > 0, "{t:?}");
    assert!(t.completed >= 4 && t.pending > 0, "{t:?}");
    assert!(t.assemble_errors >= 2 && t.expired >= 1, "{t:?}");
}

/// The clock of the reassembly pass.
const T_NOW: i64 = 1_767_225_600;

/// (peer, PM) pairs for the reassembly pass: multi-part messages shuffled with duplicates
/// and whitespace, single parts, an expired part, an over-budget peer, and a message left
/// incomplete for `expire` to drop.
fn reassembly_inputs(payload: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let sid = SessionId::from_entropy([9; 8]);
    let mut rng = Rng(11);
    let mut out = Vec::new();
    for (m, (len, chunk_len)) in [(200_000, 40_000), (3000, 100), (64, 1), (1000, 333)]
        .into_iter()
        .enumerate()
    {
        let mid = MessageId::from_entropy([m as u8; 8]);
        let mut texts: Vec<Vec<u8>> = Chunks::new(sid, mid, 0, &payload[..len], chunk_len)
            .expect("plan")
            .map(|(h, c)| encode(&h, c))
            .collect();
        let dup = texts[0].clone();
        texts.insert(texts.len() - 1, dup);
        let last = texts.len() - 1;
        for i in (1..last).rev() {
            texts.swap(i, rng.below(i + 1));
        }
        texts[0] = with_whitespace(&texts[0], 7);
        out.extend(texts.into_iter().map(|t| (1, t)));
    }
    let single = Header::new(sid, MessageId::from_entropy([40; 8]), 1, 1, 0).expect("header");
    out.push((2, encode(&single, &payload[..5000])));
    let stale =
        Header::new(sid, MessageId::from_entropy([41; 8]), 1, 2, T_NOW - 1).expect("header");
    out.push((2, encode(&stale, &payload[..10])));
    let left = Header::new(sid, MessageId::from_entropy([42; 8]), 1, 3, 0).expect("header");
    out.push((3, encode(&left, &payload[..10])));
    for k in 0..4u8 {
        let h = Header::new(sid, MessageId::from_entropy([50 + k; 8]), 1, 2, 0).expect("header");
        out.push((4, encode(&h, &payload[..10])));
    }
    out
}
