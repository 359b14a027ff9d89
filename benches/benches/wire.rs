//! Envelope and reassembly throughput, beside the bare base64 engine in the same run.
//!
//! Targets (WIRE.md and README), each as a ratio of throughputs to the bare engine on the
//! same bytes, in the default configuration:
//! - `parse_decode` (parse plus body decode) at least 0.93x `base64_decode`, at 1 KiB,
//!   16 KiB and 200 KiB: small parts are most MCP messages, so the header must cost
//!   little beside the engine (`decode_body/1KiB` shows the body alone);
//! - `encode` (header plus body) at least 0.93x `base64_encode`, at the same sizes;
//! - `parse_header/typical` at most 10 ns: the part moved out of parse's result, as
//!   `parse(..).expect(..)` gives it (a line beside it borrows it instead);
//! - `reassemble/64x200KiB` at least 0.95x the throughput of 64 bare decodes of the
//!   same bodies (`paired reassemble`).
//!
//! The ratio goals are printed as `paired` lines, each routine timed in alternating
//! batches with the engine (see `paired`), so the machine's load does not skew them,
//! with both sides' buffers laid out alike (see `placed`), each ratio the mean over the
//! places an allocator gives a buffer within a cache line; a summary line puts the three
//! sizes side by side. The goal's routine reads only the body and its length, and a
//! compiler may drop the header fields nobody reads; `parse_decode_kept` keeps the whole
//! part, borrowed from parse's result, and reads its header through a reference that
//! escapes, once per part through a function as a receiver handles a PM (the engine's
//! side is called the same way), and is held to the same goal. Two more lines at 1 KiB
//! show the kept part inlined into the timing loop, and moved out of parse's result (a
//! copy). To run only the paired lines, give a filter that names no criterion
//! benchmark: `cargo bench -p brmcp-benches --bench wire -- paired`.

use std::hint::black_box;

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurposeConfig, Simd};
use brmcp_wire::{
    Accepted, Assembler, Chunks, Header, Limits, MessageId, SessionId, UnixTime, encode_part, parse,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

mod paired;
mod placed;

use placed::Placed;

/// The sizes the ratio goals are stated at.
const PAIRED_SIZES: [(&str, usize); 3] =
    [("1KiB", 1024), ("16KiB", 16 * 1024), ("200KiB", 200 * 1024)];

const SIZES: [(&str, usize); 4] = [
    ("1KiB", 1024),
    ("16KiB", 16 * 1024),
    ("64KiB", 64 * 1024),
    ("200KiB", 200 * 1024),
];

/// The same engine configuration the crate decodes with.
fn engine() -> Simd {
    Simd::standard(
        GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireCanonical),
    )
}

/// A typical small JSON-RPC request, whose header `parse_header/typical` parses.
const TYPICAL_REQUEST: &[u8] = br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello"},"_meta":{"brmcp/callKey":"0123456789abcdef"}}}"#;

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

fn ids() -> (SessionId, MessageId) {
    (
        SessionId::from_entropy([0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18]),
        MessageId::from_entropy([0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe]),
    )
}

fn single_part(data: &[u8]) -> (Header, String) {
    let (sid, mid) = ids();
    let h = Header::new(sid, mid, 1, 1, 1_767_225_600).expect("header");
    let mut buf = vec![0u8; h.encoded_len(data.len())];
    let n = encode_part(&h, data, &mut buf).expect("encode");
    buf.truncate(n);
    (h, String::from_utf8(buf).expect("ascii"))
}

fn codec(c: &mut Criterion) {
    let engine = engine();
    for (name, len) in SIZES {
        let data = payload(len);
        let (header, text) = single_part(&data);
        let b64 = engine.encode(&data);
        let mut out = vec![0u8; len + 3];
        let mut pm = vec![0u8; header.encoded_len(len)];
        let mut b64_out = vec![0u8; b64.len()];

        let mut g = c.benchmark_group("parse_decode");
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                let part = parse(black_box(&text)).expect("parse");
                part.decode_body(&mut out).expect("decode")
            })
        });
        g.finish();

        // The body alone, parsed once outside the loop: what the header costs is the
        // difference to `parse_decode`.
        let part = parse(&text).expect("parse");
        let mut g = c.benchmark_group("decode_body");
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| black_box(&part).decode_body(&mut out).expect("decode"))
        });
        g.finish();

        let mut g = c.benchmark_group("base64_decode");
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                engine
                    .decode_slice(black_box(&b64), &mut out)
                    .expect("decode")
            })
        });
        g.finish();

        let mut g = c.benchmark_group("encode");
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| encode_part(black_box(&header), black_box(&data), &mut pm).expect("encode"))
        });
        g.finish();

        let mut g = c.benchmark_group("base64_encode");
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter(|| {
                engine
                    .encode_slice(black_box(&data), &mut b64_out)
                    .expect("encode")
            })
        });
        g.finish();
    }

    // A typical small JSON-RPC request: header parsing alone.
    let (_, text) = single_part(TYPICAL_REQUEST);
    let mut g = c.benchmark_group("parse_header");
    g.bench_function("typical", |b| {
        b.iter(|| parse(black_box(&text)).expect("parse"))
    });
    g.finish();
}

/// The lowest ratio of throughputs to the bare engine that meets a goal
/// (`parse_decode`, `parse_decode_kept`, `encode`).
const GOAL: f64 = 0.93;

/// The longest `parse_header/typical` that meets its goal, in nanoseconds.
const HEADER_GOAL_NS: f64 = 10.0;

/// The lowest ratio of reassembly's throughput to 64 bare decodes that meets its goal.
const REASSEMBLY_GOAL: f64 = 0.95;

/// What a line adds after its goal when the figure misses it.
fn miss(met: bool) -> &'static str {
    if met { "" } else { " (below goal)" }
}

/// The mean of one figure over the placements' runs.
fn mean(runs: &[paired::Paired], figure: fn(&paired::Paired) -> f64) -> f64 {
    runs.iter().map(figure).sum::<f64>() / runs.len() as f64
}

/// Prints one routine's paired line against the engine at one size, over the buffer
/// placements; returns the mean ratio.
fn goal_line(ours: &str, theirs: &str, size: &str, runs: &[paired::Paired]) -> f64 {
    let mean = |f| mean(runs, f);
    let ratios = runs.iter().map(|p| p.b_over_a);
    let (low, high) = (
        ratios.clone().fold(f64::MAX, f64::min),
        ratios.fold(0.0, f64::max),
    );
    let ratio = mean(|p| p.b_over_a);
    println!(
        "paired {ours}/{size} {:.1} ns vs {theirs}/{size} {:.1} ns: {ratio:.3}x the engine's throughput (goal >= {GOAL}x{}; {low:.3} to {high:.3} over the placements)",
        mean(|p| p.a_ns),
        mean(|p| p.b_ns),
        miss(ratio >= GOAL),
    );
    ratio
}

/// Prints a line against the engine at 1 KiB with no goal: the mean ratio over the
/// buffer placements.
fn info_line(ours: &str, runs: &[paired::Paired], note: &str) {
    let mean = |f| mean(runs, f);
    println!(
        "paired {ours} {:.1} ns vs base64_decode/1KiB {:.1} ns: {:.3}x ({note})",
        mean(|p| p.a_ns),
        mean(|p| p.b_ns),
        mean(|p| p.b_over_a),
    );
}

/// A receiver's handling of one part, called once per PM: parse, decode, and keep the
/// whole part where parse's result put it, its header read through a reference that
/// escapes, as the router passes it to the assembler.
#[inline(never)]
fn receive(text: &str, out: &mut [u8]) -> usize {
    receive_inlined(text, out)
}

/// [`receive`]'s body, inlined wherever it is called (the `_inlined` line puts it in
/// the timing loop).
#[inline(always)]
fn receive_inlined(text: &str, out: &mut [u8]) -> usize {
    match &parse(black_box(text)) {
        Ok(part) => {
            let n = part.decode_body(out).expect("decode");
            black_box(part.header());
            n
        }
        Err(e) => panic!("parse: {e}"),
    }
}

/// As [`receive`], with the part moved out of parse's result: a copy of the whole part,
/// whose wide loads span the narrower stores that built it, and the decode reads the
/// body's place from that copy.
#[inline(never)]
fn receive_moved(text: &str, out: &mut [u8]) -> usize {
    let part = parse(black_box(text)).expect("parse");
    let n = part.decode_body(out).expect("decode");
    black_box(part.header());
    n
}

/// The bare engine's decode, called as [`receive`] is: once per part through a function.
#[inline(never)]
fn engine_receive(engine: &Simd, b64: &[u8], out: &mut [u8]) -> usize {
    engine_decode(engine, b64, out)
}

/// Where an allocator puts a buffer within a cache line: every 16-byte-aligned offset.
/// Which one a buffer gets changes from process to process, and a vector load or store
/// crossing a line costs more, so each ratio is the mean over all four, both sides'
/// inputs at the same one (see `placed`).
const PLACES: [usize; 4] = [0, 16, 32, 48];

/// One size's buffers for the paired lines, at one of the [`PLACES`]: each side's input
/// and output (see `placed`). The part keeps its body where its header ends, as in a PM.
struct Buffers {
    header: Header,
    /// The part, and room for its decoded body.
    text: Placed,
    /// The bare base64 of the same bytes, and room for them.
    b64: Placed,
    /// The bytes, and room for their part.
    data: Placed,
    /// The bytes again, and room for their bare base64.
    data2: Placed,
}

impl Buffers {
    fn new(engine: &Simd, data: &[u8], place: usize) -> Self {
        let (header, text) = single_part(data);
        let b64 = engine.encode(data);
        let out_len = data.len() + 3;
        Self {
            header,
            text: Placed::new(text.as_bytes(), out_len, place),
            b64: Placed::new(b64.as_bytes(), out_len, place),
            data: Placed::new(data, text.len(), place),
            data2: Placed::new(data, b64.len(), place),
        }
    }
}

/// The part's text from its placed bytes.
fn as_text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).expect("a part is ASCII")
}

/// The bare engine's decode, the other side of every decode line.
fn engine_decode(engine: &Simd, b64: &[u8], out: &mut [u8]) -> usize {
    engine.decode_slice(black_box(b64), out).expect("decode")
}

/// The ratio goals: parse plus decode, and encode, against the bare engine at each
/// size, timed in alternating batches (see `paired`), so the machine's load does not
/// skew them; then the body alone and the header alone.
fn goals(_: &mut Criterion) {
    let engine = engine();
    let (mut decode_ratios, mut kept_ratios, mut encode_ratios) =
        (Vec::new(), Vec::new(), Vec::new());
    let (mut inlined, mut moved) = (Vec::new(), Vec::new());
    for (name, len) in PAIRED_SIZES {
        let bytes = payload(len);
        let (mut decodes, mut kept, mut encodes) = (Vec::new(), Vec::new(), Vec::new());
        for place in PLACES {
            let Buffers {
                header,
                mut text,
                mut b64,
                mut data,
                mut data2,
            } = Buffers::new(&engine, &bytes, place);
            let ((text, out), (b64, out2)) = (text.split(), b64.split());
            let text = as_text(text);
            decodes.push(paired::paired(
                || {
                    let part = parse(black_box(text)).expect("parse");
                    part.decode_body(out).expect("decode")
                },
                || engine_decode(&engine, b64, out2),
            ));
            kept.push(paired::paired(
                || receive(text, out),
                || engine_receive(&engine, b64, out2),
            ));
            if len == PAIRED_SIZES[0].1 {
                inlined.push(paired::paired(
                    || receive_inlined(text, out),
                    || engine_decode(&engine, b64, out2),
                ));
                moved.push(paired::paired(
                    || receive_moved(text, out),
                    || engine_receive(&engine, b64, out2),
                ));
            }
            let ((data, pm), (data2, b64_out)) = (data.split(), data2.split());
            encodes.push(paired::paired(
                || encode_part(black_box(&header), black_box(data), pm).expect("encode"),
                || {
                    engine
                        .encode_slice(black_box(data2), &mut *b64_out)
                        .expect("encode")
                },
            ));
        }
        decode_ratios.push((
            name,
            goal_line("parse_decode", "base64_decode", name, &decodes),
        ));
        kept_ratios.push((
            name,
            goal_line("parse_decode_kept", "base64_decode", name, &kept),
        ));
        encode_ratios.push((name, goal_line("encode", "base64_encode", name, &encodes)));
    }
    for (what, ratios) in [
        ("parse_decode", &decode_ratios),
        ("parse_decode_kept", &kept_ratios),
        ("encode", &encode_ratios),
    ] {
        let sizes: Vec<String> = ratios
            .iter()
            .map(|(name, r)| format!("{name} {r:.3}x{}", miss(*r >= GOAL)))
            .collect();
        println!(
            "paired {what} ratios: {} (goal >= {GOAL}x each)",
            sizes.join(", ")
        );
    }

    let Buffers {
        mut text, mut b64, ..
    } = Buffers::new(&engine, &payload(1024), PLACES[0]);
    let ((text, out), (b64, out2)) = (text.split(), b64.split());
    let text = as_text(text);
    let part = parse(text).expect("parse");
    let p = paired::paired(
        || black_box(&part).decode_body(out).expect("decode"),
        || engine_decode(&engine, b64, out2),
    );
    println!(
        "paired decode_body/1KiB {:.1} ns vs base64_decode/1KiB {:.1} ns: {:.3}x (the body alone, parsed once)",
        p.a_ns, p.b_ns, p.b_over_a
    );
    info_line(
        "parse_decode_kept_inlined/1KiB",
        &inlined,
        "the kept part inlined into the timing loop; no goal",
    );
    info_line(
        "parse_decode_moved/1KiB",
        &moved,
        "the part moved out of parse's result, a copy; no goal",
    );
    let (_, typical) = single_part(TYPICAL_REQUEST);
    let p = paired::paired(
        || parse(black_box(&typical)).expect("parse"),
        || engine_decode(&engine, b64, out2),
    );
    println!(
        "paired parse_header/typical {:.1} ns (goal <= {HEADER_GOAL_NS} ns{}; the part moved out of parse's result), beside base64_decode/1KiB {:.1} ns",
        p.a_ns,
        miss(p.a_ns <= HEADER_GOAL_NS),
        p.b_ns
    );
    let p = paired::paired(
        || {
            let part = parse(black_box(&typical));
            black_box(&part);
        },
        || engine_decode(&engine, b64, out2),
    );
    println!(
        "paired parse_header/typical_borrowed {:.1} ns (the part borrowed from parse's result, as the router reads it; no goal), beside base64_decode/1KiB {:.1} ns",
        p.a_ns, p.b_ns
    );
}

/// Rounds of the paired reassembly line: each call reassembles 12.5 MiB (about 2 ms).
const REASSEMBLY_ROUNDS: usize = 31;

/// Reassembly of a 64-part message against 64 bare decodes of the same bodies, in
/// alternating batches of one message: the throughput ratio and its goal.
fn reassembly_goal(_: &mut Criterion) {
    let engine = engine();
    let message = Message::new(64 * 200 * 1024, 200 * 1024);
    let mut arena = vec![0u8; 16 << 20];
    let mut scratch = vec![0u8; 1 << 20];
    let mut assembler: Assembler<'_, [u8; 32], 64> =
        Assembler::new(&mut arena, &mut scratch, Limits::default());
    // The engine's side: each part's body alone, read where it lies in its PM (so both
    // sides load from the same places) and decoded where its chunk belongs.
    let bodies: Vec<(usize, &[u8])> = message
        .texts
        .iter()
        .map(|t| {
            let part = parse(t).expect("parse");
            let at = usize::from(part.seq() - 1) * message.chunk;
            (at, part.body())
        })
        .collect();
    // Room past each chunk's end: the engine may ask for its estimate of the length.
    let mut out = vec![0u8; message.len + 3];
    let p = paired::paired_in(
        1,
        REASSEMBLY_ROUNDS,
        || message.reassemble(&mut assembler),
        || {
            for (at, body) in &bodies {
                engine_decode(&engine, body, &mut out[*at..]);
            }
        },
    );
    println!(
        "paired reassemble/64x200KiB {:.2} ms vs 64 base64_decode of its bodies {:.2} ms: {:.3}x their throughput (goal >= {REASSEMBLY_GOAL}x{})",
        p.a_ns / 1e6,
        p.b_ns / 1e6,
        p.b_over_a,
        miss(p.b_over_a >= REASSEMBLY_GOAL),
    );
}

/// One message's parts, encoded and shuffled, for the reassembly benchmarks.
struct Message {
    /// The payload's length.
    len: usize,
    /// The chunk length it was split at.
    chunk: usize,
    /// Its parts in a fixed shuffled order.
    texts: Vec<String>,
}

impl Message {
    fn new(len: usize, chunk: usize) -> Self {
        let (sid, mid) = ids();
        let data = payload(len);
        let mut texts: Vec<String> = Chunks::new(sid, mid, 0, &data, chunk)
            .expect("plan")
            .map(|(h, c)| {
                let mut buf = vec![0u8; h.encoded_len(c.len())];
                let n = encode_part(&h, c, &mut buf).expect("encode");
                buf.truncate(n);
                String::from_utf8(buf).expect("ascii")
            })
            .collect();
        // A fixed shuffle, so every run measures the same arrival order.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for i in (1..texts.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            texts.swap(i, (x % (i as u64 + 1)) as usize);
        }
        Self { len, chunk, texts }
    }

    /// Parses and adds every part; the message completes with the last.
    fn reassemble(&self, assembler: &mut Assembler<'_, [u8; 32], 64>) -> usize {
        let peer = [7u8; 32];
        let mut done = 0;
        for t in &self.texts {
            let part = parse(black_box(t)).expect("parse");
            if let Accepted::Complete(bytes) = assembler.add(peer, &part, UnixTime(0)).expect("add")
            {
                done = bytes.len();
            }
        }
        assert_eq!(done, self.len);
        done
    }
}

fn reassembly(c: &mut Criterion) {
    let mut arena = vec![0u8; 16 << 20];
    let mut scratch = vec![0u8; 1 << 20];
    let mut assembler: Assembler<'_, [u8; 32], 64> =
        Assembler::new(&mut arena, &mut scratch, Limits::default());
    for (name, len, chunk) in [
        ("64x200KiB", 64 * 200 * 1024, 200 * 1024),
        ("1x1KiB", 1024, 200 * 1024),
    ] {
        let message = Message::new(len, chunk);
        let mut g = c.benchmark_group("reassemble");
        g.throughput(Throughput::Bytes(len as u64));
        if len > 1 << 20 {
            g.sample_size(20);
        }
        g.bench_function(name, |b| b.iter(|| message.reassemble(&mut assembler)));
        g.finish();
    }
}

criterion_group!(benches, codec, goals, reassembly_goal, reassembly);
criterion_main!(benches);
