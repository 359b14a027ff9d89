//! Fuzz harnesses: one plain function per target in `fuzz/fuzz_targets/`.
//!
//! Compiled only under `cfg(fuzzing)` (set by `cargo fuzz`, and by `fuzz/.cargo/config.toml`
//! for a plain `cargo check`) and in this crate's own tests, which replay every file of
//! the committed corpus `fuzz/corpus/<target>/` through the same function. A crash found
//! by the fuzzer becomes a regression test by copying its input into that directory.
//!
//! Each harness panics only when a property of the crate fails; any input, valid or
//! not, must otherwise pass through silently. The harnesses are test code: unlike the
//! rest of the crate they use `std` and allocate.

extern crate std;

use std::vec;
use std::vec::Vec;

use crate::body;
use crate::envelope::Header;
use crate::error::{BodyError, EncodeError};
use crate::id::{MessageId, SessionId};
use crate::limits::{MAX_PARTS, MAX_PM_LEN};
use crate::parse::{Mode, parse_bytes, parse_with};
use crate::{Chunks, encode_part};

/// Parses `data` as a PM body in both modes and checks what is accepted.
///
/// - Neither mode panics, whatever the bytes.
/// - Canonical mode accepts a subset of compatible mode, with the same header and body.
/// - When the body decodes, it fits in [`Part::decoded_len_max`](crate::Part::decoded_len_max)
///   and also in a buffer of exactly its length; one byte less is
///   [`BodyError::BufferTooSmall`] with the exact size.
/// - Re-encoding the header and the decoded chunk with [`encode_part`] gives text that
///   both modes parse to the same header and the same bytes.
/// - A canonical input re-encodes to itself, byte for byte.
/// - The fast paths (the usual form read at fixed places, the encoder's form read by a
///   cursor) agree with the general parser on whatever they accept.
pub fn parse_part(data: &[u8]) {
    assert!(
        crate::parse::fast_paths_agree(data),
        "a fast path disagrees with the general parser"
    );
    let compat = parse_bytes(data);
    let canon = parse_with(data, Mode::Canonical);
    if let Ok(text) = core::str::from_utf8(data) {
        assert_eq!(crate::parse(text), compat, "parse and parse_bytes differ");
    }
    if let Ok(c) = &canon {
        let Ok(p) = &compat else {
            panic!("canonical accepts what compatible refuses: {:?}", compat);
        };
        assert_eq!(p.header(), c.header(), "modes disagree on the header");
        assert_eq!(p.body(), c.body(), "modes disagree on the body");
    }
    let Ok(part) = compat else {
        return;
    };

    let max = part.decoded_len_max();
    let mut chunk = vec![0u8; max];
    let decoded = part.decode_body(&mut chunk);
    assert!(
        !matches!(decoded, Err(BodyError::BufferTooSmall { .. })),
        "decoded_len_max {max} does not hold the body: {decoded:?}"
    );
    let canon_ok = match &canon {
        Ok(c) => {
            let mut other = vec![0u8; c.decoded_len_max()];
            let r = c.decode_body(&mut other);
            if let Ok(n) = r {
                assert_eq!(decoded, Ok(n), "canonical decodes what compatible refuses");
                assert_eq!(chunk.get(..n), other.get(..n), "modes decode differently");
            }
            r.is_ok()
        }
        Err(_) => false,
    };
    let Ok(n) = decoded else {
        return;
    };
    assert!(
        n <= max,
        "decoded {n} bytes, more than decoded_len_max {max}"
    );
    chunk.truncate(n);

    let mut exact = vec![0u8; n];
    assert_eq!(part.decode_body(&mut exact), Ok(n), "exact buffer refused");
    assert_eq!(exact, chunk, "exact buffer decodes differently");
    if let Some(short) = n.checked_sub(1) {
        assert_eq!(
            part.decode_body(&mut exact[..short]),
            Err(BodyError::BufferTooSmall { required: n }),
            "short buffer"
        );
    }

    let header = *part.header();
    let len = header.encoded_len(n);
    let mut text = vec![0u8; len];
    if n == 0 {
        assert_eq!(
            encode_part(&header, &chunk, &mut text),
            Err(EncodeError::EmptyPayload)
        );
        return;
    }
    assert_eq!(encode_part(&header, &chunk, &mut text), Ok(len));
    for mode in [Mode::Compatible, Mode::Canonical] {
        let again = parse_with(&text, mode);
        let Ok(again) = again else {
            panic!("{mode:?} refuses the re-encoded part: {again:?}");
        };
        assert_eq!(again.header(), &header, "{mode:?}: header changed");
        let mut back = vec![0u8; again.decoded_len_max()];
        assert_eq!(again.decode_body(&mut back), Ok(n), "{mode:?}: body length");
        assert_eq!(back.get(..n), Some(&chunk[..]), "{mode:?}: body changed");
    }
    if canon_ok {
        assert_eq!(text, data, "a canonical part does not re-encode to itself");
    }
}

/// Longest chunk [`roundtrip`] asks for; small enough that a fuzz input of a few KiB
/// reaches the [`MAX_PARTS`] bound, large enough to cover single-part messages.
const ROUNDTRIP_MAX_CHUNK: u16 = 2048;

/// Bytes of [`roundtrip`]'s input taken as parameters before the payload.
pub const ROUNDTRIP_PARAMS_LEN: usize = 44;

/// Reads fixed-width parameters off the front of a fuzz input; missing bytes read as 0.
struct Params<'a> {
    data: &'a [u8],
}

impl<'a> Params<'a> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        out
    }

    fn rest(self) -> &'a [u8] {
        self.data
    }
}

/// An id of `len` (1 to 32) lowercase hex characters taken from `nibbles`.
fn hex_id(nibbles: impl Iterator<Item = u8>, len: u8) -> [u8; 32] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut id = [b'0'; 32];
    for (slot, nibble) in id.iter_mut().zip(nibbles).take(usize::from(len)) {
        *slot = HEX[usize::from(nibble & 0x0f)];
    }
    id
}

/// A small deterministic generator for the shuffle (xorshift64).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        #[allow(clippy::cast_possible_truncation)] // the result is below n
        {
            (self.next() % n as u64) as usize
        }
    }
}

/// Splits a payload with [`Chunks`], encodes every part, delivers the parts shuffled and
/// with duplicates, parses and decodes each, and checks the payload comes back whole.
///
/// Input layout ([`ROUNDTRIP_PARAMS_LEN`] bytes of parameters, then the payload; missing
/// parameter bytes read as 0):
///
/// | bytes | parameter |
/// |---|---|
/// | 0..2 | chunk length, little-endian, mapped to `1..=2048` |
/// | 2, 3 | sid and mid length, mapped to `1..=32` |
/// | 4..12 | shuffle seed |
/// | 12..20 | duplicate mask: bit `i` delivers part `i + 1` twice |
/// | 20..28 | `exp`, little-endian `i64` |
/// | 28..44 | hex digits of the ids (low nibbles for sid, high nibbles for mid) |
///
/// [`Chunks::new`] may refuse only with the documented errors, and exactly when the
/// payload is empty, needs more than [`MAX_PARTS`] parts, or makes a PM over
/// [`MAX_PM_LEN`]. Every encoded part is exactly [`Header::encoded_len`] long, parses
/// in both modes to its header, and decodes to its chunk.
pub fn roundtrip(data: &[u8]) {
    let mut params = Params { data };
    let chunk_len = usize::from(u16::from_le_bytes(params.take()) % ROUNDTRIP_MAX_CHUNK) + 1;
    let [sid_len, mid_len] = params.take::<2>().map(|b| b % 32 + 1);
    let seed = u64::from_le_bytes(params.take());
    let dup_mask = u64::from_le_bytes(params.take());
    let exp = i64::from_le_bytes(params.take());
    let digits: [u8; 16] = params.take();
    let payload = params.rest();

    let sid_hex = hex_id(digits.iter().copied(), sid_len);
    let mid_hex = hex_id(digits.iter().rev().map(|d| d >> 4), mid_len);
    let sid = SessionId::from_bytes(&sid_hex[..usize::from(sid_len)]);
    let mid = MessageId::from_bytes(&mid_hex[..usize::from(mid_len)]);
    let (Ok(sid), Ok(mid)) = (sid, mid) else {
        panic!("generated ids are valid: {sid:?} {mid:?}");
    };

    let need = payload.len().div_ceil(chunk_len);
    let chunks = match Chunks::new(sid, mid, exp, payload, chunk_len) {
        Ok(chunks) => chunks,
        Err(EncodeError::EmptyPayload) => {
            assert!(
                payload.is_empty(),
                "EmptyPayload for {} bytes",
                payload.len()
            );
            return;
        }
        Err(EncodeError::TooManyParts { total }) => {
            assert_eq!(total, need, "TooManyParts reports the wrong count");
            assert!(
                total > usize::from(MAX_PARTS),
                "TooManyParts for {total} parts"
            );
            return;
        }
        Err(EncodeError::PmTooLarge { len }) => {
            assert!(len > MAX_PM_LEN, "PmTooLarge for {len} bytes");
            return;
        }
        Err(e) => panic!("undocumented Chunks::new error {e:?}"),
    };
    assert!(!payload.is_empty() && need <= usize::from(MAX_PARTS));
    assert_eq!(usize::from(chunks.total()), need, "Chunks::total");
    assert_eq!(chunks.len(), need, "Chunks::len");
    let max_pm_len = chunks.max_pm_len();
    assert!(max_pm_len <= MAX_PM_LEN);

    // Encode every part once.
    let mut texts: Vec<Vec<u8>> = Vec::with_capacity(need);
    let mut covered = 0;
    for (i, (header, chunk)) in chunks.enumerate() {
        assert_eq!(usize::from(header.seq()), i + 1, "parts out of order");
        assert_eq!(usize::from(header.total()), need, "total changes");
        assert_eq!(
            (header.sid(), header.mid(), header.exp()),
            (&sid, &mid, exp)
        );
        assert_eq!(payload.get(covered..covered + chunk.len()), Some(chunk));
        assert!(
            !chunk.is_empty() && chunk.len() <= chunk_len,
            "chunk length"
        );
        assert!(
            i + 1 == need || chunk.len() == chunk_len,
            "short chunk before the last"
        );
        covered += chunk.len();

        let len = header.encoded_len(chunk.len());
        assert!(len <= max_pm_len, "part longer than max_pm_len");
        let mut text = vec![0u8; len];
        assert_eq!(
            encode_part(&header, chunk, &mut text[..len - 1]),
            Err(EncodeError::BufferTooSmall { required: len })
        );
        assert_eq!(encode_part(&header, chunk, &mut text), Ok(len));
        texts.push(text);
    }
    assert_eq!(covered, payload.len(), "chunks do not cover the payload");
    assert_eq!(texts.len(), need);

    // Delivery order: every part, duplicates per the mask, shuffled (Fisher-Yates).
    let mut order: Vec<usize> = (0..need).collect();
    order.extend((0..need).filter(|i| dup_mask >> (i % 64) & 1 == 1));
    let mut rng = XorShift(seed | 1);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i + 1));
    }

    let mut slots: Vec<Option<Vec<u8>>> = vec![None; need];
    for &i in &order {
        let text = &texts[i];
        let mut first: Option<Header> = None;
        for mode in [Mode::Compatible, Mode::Canonical] {
            let part = parse_with(text, mode);
            let Ok(part) = part else {
                panic!("{mode:?} refuses an encoded part: {part:?}");
            };
            let header = *part.header();
            assert_eq!(usize::from(header.seq()), i + 1, "{mode:?}: seq");
            assert_eq!(*first.get_or_insert(header), header, "modes disagree");
            let mut chunk = vec![0u8; part.decoded_len_max()];
            let n = part.decode_body(&mut chunk);
            let Ok(n) = n else {
                panic!("{mode:?} cannot decode an encoded body: {n:?}");
            };
            chunk.truncate(n);
            match &slots[i] {
                Some(seen) => assert_eq!(seen, &chunk, "duplicate decodes differently"),
                None => slots[i] = Some(chunk),
            }
        }
    }
    let mut back = Vec::with_capacity(payload.len());
    for slot in slots {
        let Some(chunk) = slot else {
            panic!("a part was never delivered");
        };
        back.extend_from_slice(&chunk);
    }
    assert_eq!(back, payload, "reassembled payload differs");
}

/// Size of the fixed output slice [`body_decode`] decodes into.
pub const BODY_DECODE_OUT_LEN: usize = 1024;

/// Decodes arbitrary bytes as a base64 body, into a fixed-size slice and into a buffer of
/// [`Part::decoded_len_max`](crate::Part::decoded_len_max) bytes.
///
/// Input layout: byte 0 picks the mode (bit 0: canonical) and, with byte 1, the length
/// of the output slice (`0..=`[`BODY_DECODE_OUT_LEN`]); the rest is the body.
///
/// - Decoding never panics and never claims more bytes than the slice holds, nor more
///   than `decoded_len_max`; bytes past the returned length are left untouched.
/// - `decoded_len_max` always suffices; a smaller slice is refused with
///   [`BodyError::BufferTooSmall`] carrying the exact length.
/// - The build's engine (SIMD with the `std` feature) agrees with the scalar engine.
/// - Whatever canonical mode decodes, compatible mode decodes the same.
pub fn body_decode(data: &[u8]) {
    let [flags, len_lo] = Params { data }.take::<2>();
    let body = data.get(2..).unwrap_or_default();
    let canonical = flags & 1 == 1;
    let out_len = usize::from(u16::from_le_bytes([flags >> 1, len_lo])) % (BODY_DECODE_OUT_LEN + 1);

    const UNTOUCHED: u8 = 0xa5;
    let mut fixed = [UNTOUCHED; BODY_DECODE_OUT_LEN];
    let small = body::decode(body, &mut fixed[..out_len], canonical);

    let max = body::decoded_len_max(body);
    let mut big = vec![UNTOUCHED; max];
    let full = body::decode(body, &mut big, canonical);

    let scalar = if canonical {
        &body::SCALAR_CANONICAL
    } else {
        &body::SCALAR_COMPAT
    };
    let mut reference = vec![0u8; max];
    let expected = body::decode_with(scalar, body, &mut reference, canonical);
    assert_eq!(full, expected, "engine and scalar engine disagree");

    match full {
        Ok(n) => {
            assert!(
                n <= max,
                "decoded {n} bytes, more than decoded_len_max {max}"
            );
            assert_eq!(big[..n], reference[..n], "engines decode differently");
            assert!(
                big[n..].iter().all(|&b| b == UNTOUCHED),
                "wrote past the decoded length"
            );
            if n <= out_len {
                assert_eq!(small, Ok(n), "a slice of {out_len} bytes holds {n}");
                assert_eq!(fixed[..n], big[..n], "slice decodes differently");
                assert!(
                    fixed[n..].iter().all(|&b| b == UNTOUCHED),
                    "wrote past the decoded length"
                );
            } else {
                assert_eq!(
                    small,
                    Err(BodyError::BufferTooSmall { required: n }),
                    "{n} bytes into a slice of {out_len}"
                );
            }
        }
        Err(e) => {
            assert!(
                !matches!(e, BodyError::BufferTooSmall { .. }),
                "decoded_len_max {max} does not hold the body: {e:?}"
            );
            assert!(
                small.is_err(),
                "a slice decodes what the full buffer refuses"
            );
        }
    }
    if let Ok(n) = small {
        assert!(n <= out_len, "claimed {n} bytes of a {out_len}-byte slice");
    }

    // Canonical mode accepts a subset of compatible mode, with the same bytes.
    let mut strict = vec![0u8; max];
    let mut loose = vec![0u8; max];
    if let Ok(m) = body::decode(body, &mut strict, true) {
        let n = body::decode(body, &mut loose, false);
        assert_eq!(n, Ok(m), "canonical decodes what compatible refuses");
        assert_eq!(strict[..m], loose[..m], "modes decode differently");
    }
}

/// Bytes one fuzz input is read from, one at a time; zeros once exhausted.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Drives an [`Assembler`](crate::Assembler) with arbitrary operations and checks its
/// bounds after each one.
///
/// The first bytes choose the limits and the storage sizes; then each operation is an
/// `Add` (peer, sid, mid, seq, total, chunk length, deadline, with the body either an
/// honest encoding or raw fuzz bytes), a `Tick` (the clock moves forward) or an `Expire`.
///
/// - Bytes reserved never exceed the storage or `max_total_bytes`; per peer, never more
///   than `max_peer_bytes` and `max_pending_per_peer` messages.
/// - After an `Add` or an `Expire`, `next_deadline()` is `None` or later than now.
/// - A completed message equals the chunks accepted for it, joined in `seq` order.
/// - [`Assembler::check`] changes nothing, and what it decides `add` then does.
pub fn assembler_ops(data: &[u8]) {
    use std::collections::BTreeMap;

    use crate::limits::Limits;
    use crate::reassembly::{Accepted, Assembler, Verdict};
    use crate::time::UnixTime;

    const SLOTS: usize = 4;
    const PEERS: u8 = 3;
    let mut input = Bytes(data);
    let limits = Limits::DEFAULT
        .with_max_pending_per_peer(usize::from(input.next() % 4) + 1)
        .with_max_message_bytes(usize::from(input.next()) * 8 + 1)
        .with_max_peer_bytes(usize::from(input.next()) * 8 + 1)
        .with_max_total_bytes(usize::from(input.next()) * 16 + 1)
        .with_partial_timeout_secs(u64::from(input.next() % 16));
    let mut arena = vec![0u8; usize::from(input.next()) * 16];
    let mut scratch = vec![0u8; usize::from(input.next()) * 4];
    let (arena_len, scratch_len) = (arena.len(), scratch.len());
    let mut assembler: Assembler<'_, u8, SLOTS> = Assembler::new(&mut arena, &mut scratch, limits);
    // The chunk last accepted for each (peer, sid, mid, seq).
    let mut accepted: BTreeMap<(u8, u8, u8, u16), Vec<u8>> = BTreeMap::new();
    let mut now = 1_000_000i64;
    let mut text = Vec::new();

    while !input.is_empty() {
        match input.next() % 8 {
            5 => now += i64::from(input.next() % 32),
            6 => {
                let _ = assembler.expire(UnixTime(now));
                let deadline = assembler.next_deadline();
                assert!(
                    deadline.is_none_or(|d| d.secs() > now),
                    "deadline {deadline:?} at {now}"
                );
            }
            tag => {
                let peer = input.next() % PEERS;
                let (s, m) = (input.next() % 2, input.next() % 3);
                let total = u16::from(input.next() % 5) + 1;
                let seq = u16::from(input.next()) % total + 1;
                let len = usize::from(input.next() % 64) + 1;
                let exp = match input.next() % 4 {
                    0 => 0,
                    1 => now + i64::from(input.next() % 32),
                    2 => now - i64::from(input.next() % 4),
                    _ => -1,
                };
                let sid = SessionId::from_entropy([s; 8]);
                let mid = MessageId::from_entropy([m; 8]);
                let Ok(header) = Header::new(sid, mid, seq, total, exp) else {
                    continue;
                };
                let chunk: Vec<u8> = (0..len).map(|i| input.next() ^ (i as u8)).collect();
                text.clear();
                text.resize(header.encoded_len(len), 0);
                let Ok(n) = encode_part(&header, &chunk, &mut text) else {
                    panic!("encode refused a valid header");
                };
                text.truncate(n);
                if tag == 7 {
                    // Replace the body with raw fuzz bytes.
                    let at = text.iter().position(|&b| b == b']').map_or(0, |i| i + 3);
                    text.truncate(at);
                    text.extend((0..len).map(|_| input.next()));
                }
                let Ok(part) = parse_bytes(&text) else {
                    continue;
                };
                let chunk = if tag == 7 {
                    // What the raw body decodes to, if it is valid at all.
                    let mut raw = vec![0u8; part.decoded_len_max()];
                    let n = part.decode_body(&mut raw).unwrap_or(0);
                    raw.truncate(n);
                    raw
                } else {
                    chunk
                };
                let key = (peer, s, m, part.seq());
                let before = assembler.stats();
                let verdict = assembler.check(&peer, &part, UnixTime(now));
                assert_eq!(assembler.stats(), before, "check changed the assembler");
                let added = assembler.add(peer, &part, UnixTime(now));
                // `check` is exact: what it decides, `add` does.
                match (&verdict, &added) {
                    (Ok(Verdict::Undecided), _)
                    | (Ok(Verdict::Duplicate), Ok(Accepted::Duplicate)) => {}
                    (Err(e), Err(got)) if e == got => {}
                    _ => panic!("check said {verdict:?}, add did {added:?}"),
                }
                match added {
                    Ok(Accepted::Complete(message)) => {
                        let mut want = Vec::new();
                        for q in 1..=part.total() {
                            if q == part.seq() {
                                want.extend_from_slice(&chunk);
                            } else {
                                want.extend_from_slice(&accepted[&(peer, s, m, q)]);
                            }
                        }
                        assert_eq!(message, &want[..], "completed message differs");
                        assert!(message.len() <= limits.max_message_bytes);
                        if part.total() == 1 {
                            assert!(message.len() <= scratch_len);
                        }
                    }
                    Ok(Accepted::Pending) => {
                        accepted.insert(key, chunk);
                    }
                    Ok(Accepted::Duplicate) | Err(_) => {}
                }
                let deadline = assembler.next_deadline();
                assert!(
                    deadline.is_none_or(|d| d.secs() > now),
                    "deadline {deadline:?} at {now}"
                );
            }
        }
        let stats = assembler.stats();
        assert!(
            stats.bytes <= arena_len.min(limits.max_total_bytes),
            "{stats:?}"
        );
        assert!(stats.messages <= SLOTS);
        for p in 0..PEERS {
            let s = assembler.peer_stats(&p);
            assert!(s.bytes <= limits.max_peer_bytes, "peer {p}: {s:?}");
            assert!(s.messages <= limits.max_pending_per_peer, "peer {p}: {s:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use brmcp_test_support::corpus;

    fn replay(target: &str, harness: fn(&[u8])) {
        for (path, data) in corpus(target) {
            std::eprintln!("{target}: {}", path.display());
            harness(&data);
        }
    }

    #[test]
    fn parse_part_corpus_passes() {
        replay("parse_part", super::parse_part);
    }

    #[test]
    fn roundtrip_corpus_passes() {
        replay("roundtrip", super::roundtrip);
    }

    #[test]
    fn assembler_ops_corpus_passes() {
        replay("assembler_ops", super::assembler_ops);
    }

    #[test]
    fn body_decode_corpus_passes() {
        replay("body_decode", super::body_decode);
    }

    #[test]
    fn harnesses_survive_edge_inputs() {
        let inputs: [&[u8]; 6] = [
            b"",
            b"\0",
            b"--mcp[",
            b"--mcp[v=1,sid=a,mid=b,seq=1/1,exp=0]--QQ==",
            b"--mcp[v=1,sid=a,mid=b,seq=1/1]-- Q Q = = ",
            &[0xff; 300],
        ];
        for data in inputs {
            super::parse_part(data);
            super::roundtrip(data);
            super::body_decode(data);
            super::assembler_ops(data);
        }
    }
}
