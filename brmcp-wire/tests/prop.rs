//! Properties of the codec and the assembler on arbitrary inputs.

use brmcp_wire::{
    Accepted, Assembler, Chunks, Header, Limits, MAX_PARTS, MessageId, Mode, SessionId, UnixTime,
    encode_part, parse_bytes, parse_with,
};
use proptest::prelude::*;

fn id_strategy() -> impl Strategy<Value = String> {
    "[0-9a-f]{1,32}"
}

/// A payload and a chunk length that splits it into at most MAX_PARTS parts.
fn payload_and_chunk() -> impl Strategy<Value = (Vec<u8>, usize)> {
    (proptest::collection::vec(any::<u8>(), 1..3000), 1usize..400).prop_map(|(p, c)| {
        let min = p.len().div_ceil(usize::from(MAX_PARTS));
        let c = c.max(min);
        (p, c)
    })
}

fn encode(h: &Header, chunk: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; h.encoded_len(chunk.len())];
    let n = encode_part(h, chunk, &mut buf).expect("encode");
    buf.truncate(n);
    buf
}

fn decode(text: &[u8], mode: Mode) -> Option<(Header, Vec<u8>)> {
    let part = parse_with(text, mode).ok()?;
    let mut out = vec![0u8; part.decoded_len_max()];
    let n = part.decode_body(&mut out).ok()?;
    out.truncate(n);
    Some((*part.header(), out))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn encode_parse_roundtrip(
        (payload, chunk) in payload_and_chunk(),
        sid in id_strategy(),
        mid in id_strategy(),
        exp in any::<i64>(),
    ) {
        let sid: SessionId = sid.parse().unwrap();
        let mid: MessageId = mid.parse().unwrap();
        let chunks = Chunks::new(sid, mid, exp, &payload, chunk).unwrap();
        let total = chunks.total();
        prop_assert!(total <= MAX_PARTS);
        let mut joined = Vec::new();
        for (i, (h, c)) in chunks.enumerate() {
            prop_assert_eq!(usize::from(h.seq()), i + 1);
            prop_assert_eq!(h.total(), total);
            let text = encode(&h, c);
            let (back, bytes) = decode(&text, Mode::Compatible).expect("parses");
            prop_assert_eq!(back, h);
            prop_assert_eq!(&bytes[..], c);
            joined.extend_from_slice(&bytes);
        }
        prop_assert_eq!(joined, payload);
    }

    #[test]
    fn encoded_len_is_exact(
        chunk in proptest::collection::vec(any::<u8>(), 1..2000),
        sid in id_strategy(),
        mid in id_strategy(),
        seq in 1u16..=64,
        total in 1u16..=64,
        exp in any::<i64>(),
    ) {
        let (seq, total) = (seq.min(total), total.max(seq));
        let h = Header::new(sid.parse().unwrap(), mid.parse().unwrap(), seq, total, exp).unwrap();
        let len = h.encoded_len(chunk.len());
        let mut buf = vec![0u8; len + 8];
        prop_assert_eq!(encode_part(&h, &chunk, &mut buf), Ok(len));
        let mut short = vec![0u8; len - 1];
        prop_assert!(encode_part(&h, &chunk, &mut short).is_err());
    }

    #[test]
    fn canonical_accepts_encoder_output(
        (payload, chunk) in payload_and_chunk(),
        sid in id_strategy(),
        mid in id_strategy(),
        exp in any::<i64>(),
    ) {
        let chunks = Chunks::new(sid.parse().unwrap(), mid.parse().unwrap(), exp, &payload, chunk).unwrap();
        for (h, c) in chunks {
            let text = encode(&h, c);
            let (back, bytes) = decode(&text, Mode::Canonical).expect("canonical accepts");
            prop_assert_eq!(back, h);
            prop_assert_eq!(&bytes[..], c);
        }
    }

    #[test]
    fn parse_never_panics(s in any::<String>(), b in proptest::collection::vec(any::<u8>(), 0..512)) {
        for mode in [Mode::Compatible, Mode::Canonical] {
            let _ = decode(s.as_bytes(), mode);
            let _ = decode(&b, mode);
            let mut prefixed = b"--mcp[".to_vec();
            prefixed.extend_from_slice(&b);
            let _ = decode(&prefixed, mode);
        }
    }

    #[test]
    fn near_miss_mutations_never_panic(
        payload in proptest::collection::vec(any::<u8>(), 1..200),
        edits in proptest::collection::vec((any::<u16>(), 0u8..4, proptest::sample::select(
            b"-[]=,/+0123456789abcdefvsimqxABZ \t\n\x0b\r".to_vec())), 1..6),
    ) {
        let h = Header::new(
            SessionId::from_entropy([1; 8]), MessageId::from_entropy([2; 8]), 1, 1, 1_767_225_600,
        ).unwrap();
        let mut text = encode(&h, &payload);
        for (at, op, byte) in edits {
            let at = usize::from(at) % (text.len() + 1);
            match op {
                0 if at < text.len() => text[at] = byte,
                1 => text.insert(at, byte),
                2 if at < text.len() => { text.remove(at); }
                _ => text.truncate(at),
            }
        }
        for mode in [Mode::Compatible, Mode::Canonical] {
            if let Some((back, bytes)) = decode(&text, mode) {
                // Whatever was accepted is a well-formed part that re-encodes and parses back.
                prop_assert!(back.seq() >= 1 && back.seq() <= back.total() && back.total() <= MAX_PARTS);
                prop_assert!(!bytes.is_empty());
                let again = encode(&back, &bytes);
                prop_assert_eq!(decode(&again, Mode::Canonical), Some((back, bytes)));
            }
        }
        let _ = parse_bytes(&text);
    }

    /// Chunk, shuffle and duplicate the parts of a payload: the assembler returns the
    /// exact payload exactly once.
    #[test]
    fn shuffled_duplicated_parts_reassemble(
        (payload, chunk) in payload_and_chunk(),
        order in any::<u64>(),
        dups in proptest::collection::vec(any::<u8>(), 0..10),
    ) {
        let sid = SessionId::from_entropy([3; 8]);
        let mid = MessageId::from_entropy([4; 8]);
        let mut texts: Vec<Vec<u8>> = Chunks::new(sid, mid, 0, &payload, chunk)
            .unwrap()
            .map(|(h, c)| encode(&h, c))
            .collect();
        // Fisher-Yates with a xorshift driven by the seed.
        let mut x = order | 1;
        let mut next = move |bound: usize| {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            (x % bound as u64) as usize
        };
        for i in (1..texts.len()).rev() {
            let j = next(i + 1);
            texts.swap(i, j);
        }
        // Duplicates arrive before the completing part: after it they would open a new
        // message, as in the Go implementation (WIRE.md §6).
        let originals = texts.len();
        for d in dups {
            if originals == 1 {
                texts.push(texts[0].clone());
                continue;
            }
            // Any part but the completing one, somewhere before it.
            let last = texts.len() - 1;
            let copy = texts[usize::from(d) % last].clone();
            let at = next(last + 1);
            texts.insert(at.min(last), copy);
        }
        let mut arena = vec![0u8; 8192];
        let mut scratch = vec![0u8; 4096];
        let mut a: Assembler<'_, u8, 4> = Assembler::new(&mut arena, &mut scratch, Limits::default());
        let mut completed = Vec::new();
        for t in &texts {
            let part = parse_bytes(t).unwrap();
            match a.add(7, &part, UnixTime(0)) {
                Ok(Accepted::Complete(bytes)) => completed.push(bytes.to_vec()),
                Ok(_) => {}
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
        if payload.len() <= chunk {
            // A single-part message completes once per copy: no dedup without a slot.
            prop_assert!(!completed.is_empty());
            prop_assert!(completed.iter().all(|c| c == &payload));
        } else {
            prop_assert_eq!(completed, vec![payload]);
            prop_assert_eq!(a.stats().messages, 0);
        }
    }
}
