//! Differential test: the [`Assembler`] against an obviously correct model with the same
//! limits, driven side by side by random operation sequences (smoltcp's `test_random`).
//!
//! The model keeps every part in a map and recomputes every quantity from scratch; it
//! shares nothing with the assembler but the parser and the documented rules
//! (WIRE.md §6 and the reassembly module docs).

use std::collections::{BTreeMap, HashMap};

use base64::Engine as _;
use brmcp_wire::{
    Accepted, AssembleError, Assembler, Chunks, Header, Limits, MessageId, Part, SessionId,
    UnixTime, Verdict, encode_part, parse,
};
use proptest::prelude::*;

const SLOTS: usize = 4;
const T0: i64 = 1_000;

type Key = (u8, SessionId, MessageId);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Complete(Vec<u8>),
    Pending,
    Duplicate,
    Failed(String),
}

struct Msg {
    total: u16,
    exp: i64,
    first_seen: i64,
    parts: BTreeMap<u16, Vec<u8>>,
}

impl Msg {
    /// Length of the parts but the last, if one of them arrived.
    fn chunk_len(&self) -> Option<usize> {
        self.parts
            .iter()
            .find(|(seq, _)| **seq != self.total)
            .map(|(_, p)| p.len())
    }

    fn last_len(&self) -> Option<usize> {
        self.parts.get(&self.total).map(Vec::len)
    }

    fn reserved(&self) -> usize {
        reserved(usize::from(self.total), self.chunk_len(), self.last_len())
    }
}

fn reserved(total: usize, chunk: Option<usize>, last: Option<usize>) -> usize {
    match (chunk, last) {
        (Some(c), Some(l)) => (total - 1) * c + l,
        (Some(c), None) => total * c,
        (None, Some(l)) => l,
        (None, None) => 0,
    }
}

fn min_final(total: usize, chunk: Option<usize>, last: Option<usize>) -> usize {
    match (chunk, last) {
        (Some(c), Some(l)) => (total - 1) * c + l,
        (Some(c), None) => (total - 1) * c + 1,
        (None, Some(l)) => total * l,
        (None, None) => 0,
    }
}

struct Model {
    limits: Limits,
    arena: usize,
    scratch: usize,
    msgs: HashMap<Key, Msg>,
}

/// Decoded length from the symbols alone: symbols / 4 * 3 less the padding among the last two.
fn symbol_len(body: &[u8]) -> usize {
    let symbols: Vec<u8> = body
        .iter()
        .copied()
        .filter(|b| !b" \t\n\r\x0c".contains(b))
        .collect();
    let pads = symbols.iter().rev().take(2).filter(|&&b| b == b'=').count();
    (symbols.len() / 4 * 3).saturating_sub(pads)
}

/// The body decoded naively: whitespace removed, then padded standard base64 with
/// trailing bits tolerated.
fn naive_decode(body: &[u8]) -> Option<Vec<u8>> {
    let clean: Vec<u8> = body
        .iter()
        .copied()
        .filter(|b| !b" \t\n\r\x0c".contains(b))
        .collect();
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::RequireCanonical),
    );
    engine.decode(clean).ok().filter(|d| !d.is_empty())
}

fn err(e: AssembleError) -> Outcome {
    // Body errors compare by kind: the offsets are the body decoder's business.
    match e {
        AssembleError::Body(_) => Outcome::Failed("body".into()),
        e => Outcome::Failed(format!("{e:?}")),
    }
}

impl Model {
    fn expire(&mut self, now: i64) -> usize {
        let timeout = self.limits.partial_timeout_secs as i64;
        let before = self.msgs.len();
        self.msgs.retain(|_, m| {
            let expired = m.exp > 0 && now > m.exp;
            let timed_out = now - m.first_seen > timeout;
            !(expired || timed_out)
        });
        before - self.msgs.len()
    }

    fn next_deadline(&self) -> Option<i64> {
        let timeout = self.limits.partial_timeout_secs as i64;
        self.msgs
            .values()
            .map(|m| {
                let t = m.first_seen + timeout + 1;
                if m.exp > 0 { t.min(m.exp + 1) } else { t }
            })
            .min()
    }

    fn bytes(&self, peer: Option<u8>) -> usize {
        self.msgs
            .iter()
            .filter(|(k, _)| peer.is_none_or(|p| k.0 == p))
            .map(|(_, m)| m.reserved())
            .sum()
    }

    fn add(&mut self, peer: u8, part: &Part<'_>, now: i64) -> Outcome {
        let h = part.header();
        self.expire(now);
        if h.exp() > 0 && now > h.exp() {
            return err(AssembleError::Expired);
        }
        let len = symbol_len(part.body());
        let decoded = naive_decode(part.body());
        if h.total() == 1 {
            if len > self.limits.max_message_bytes.min(self.scratch) {
                return err(AssembleError::MessageTooLarge);
            }
            return decoded.map_or(Outcome::Failed("body".into()), Outcome::Complete);
        }
        let key = (peer, *h.sid(), *h.mid());
        if !self.msgs.contains_key(&key) {
            if self.msgs.keys().filter(|k| k.0 == peer).count() >= self.limits.max_pending_per_peer
            {
                return err(AssembleError::PeerPending);
            }
            if self.msgs.len() >= SLOTS {
                return err(AssembleError::SlotsFull);
            }
            self.msgs.insert(
                key,
                Msg {
                    total: h.total(),
                    exp: h.exp(),
                    first_seen: now,
                    parts: BTreeMap::new(),
                },
            );
        }
        let outcome = self.store(key, h, len, decoded);
        if let Outcome::Failed(why) = &outcome {
            // A bad body refuses its part only; a message it opened is not kept.
            if why != "body" || self.msgs[&key].parts.is_empty() {
                self.msgs.remove(&key);
            }
        }
        outcome
    }

    fn store(&mut self, key: Key, h: &Header, len: usize, decoded: Option<Vec<u8>>) -> Outcome {
        let m = &self.msgs[&key];
        if m.total != h.total() {
            return err(AssembleError::InconsistentTotal);
        }
        if m.parts.contains_key(&h.seq()) {
            return Outcome::Duplicate;
        }
        if len == 0 {
            return Outcome::Failed("body".into());
        }
        let total = usize::from(m.total);
        let is_last = h.seq() == m.total;
        let (chunk, last) = (m.chunk_len(), m.last_len());
        let (chunk, last) = if is_last {
            if chunk.is_some_and(|c| len > c) {
                return err(AssembleError::Geometry);
            }
            (chunk, Some(len))
        } else {
            if chunk.is_some_and(|c| len != c) || chunk.is_none() && last.is_some_and(|l| len < l) {
                return err(AssembleError::Geometry);
            }
            (Some(len), last)
        };
        if min_final(total, chunk, last) > self.limits.max_message_bytes {
            return err(AssembleError::MessageTooLarge);
        }
        let new_size = reserved(total, chunk, last);
        let own = m.reserved();
        if self.bytes(Some(key.0)) - own + new_size > self.limits.max_peer_bytes {
            return err(AssembleError::PeerBytes);
        }
        if self.bytes(None) - own + new_size > self.limits.max_total_bytes.min(self.arena) {
            return err(AssembleError::TotalBytes);
        }
        let Some(decoded) = decoded else {
            return Outcome::Failed("body".into());
        };
        let m = self.msgs.get_mut(&key).expect("present");
        m.parts.insert(h.seq(), decoded);
        if m.parts.len() == total {
            let m = self.msgs.remove(&key).expect("present");
            return Outcome::Complete(m.parts.into_values().flatten().collect());
        }
        Outcome::Pending
    }
}

#[derive(Debug, Clone)]
enum Op {
    /// Part `seq_pick` of message `msg` from `peer`, altered by `mutate`.
    Part {
        peer: u8,
        msg: u8,
        seq_pick: u8,
        mutate: u8,
    },
    Tick(u8),
    Expire,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0u8..3, 0u8..6, any::<u8>(), any::<u8>())
            .prop_map(|(peer, msg, seq_pick, mutate)| Op::Part { peer, msg, seq_pick, mutate }),
        1 => (0u8..4).prop_map(Op::Tick),
        1 => Just(Op::Expire),
    ]
}

/// One message of the scenario: payload length, chunk length and deadline offset.
fn message() -> impl Strategy<Value = (usize, usize, i64)> {
    (1usize..400, 1usize..160, prop_oneof![Just(0i64), 1i64..12])
        .prop_map(|(len, chunk, exp)| (len, chunk.max(len.div_ceil(64)), exp))
}

fn pm(h: &Header, chunk: &[u8]) -> String {
    let mut buf = vec![0u8; h.encoded_len(chunk.len())];
    let n = encode_part(h, chunk, &mut buf).expect("encode");
    buf.truncate(n);
    String::from_utf8(buf).expect("ascii")
}

/// The PM text for an operation: an honest part, or one broken in a documented way.
fn text_for(parts: &[(Header, Vec<u8>)], seq_pick: u8, mutate: u8) -> String {
    let (h, chunk) = &parts[usize::from(seq_pick) % parts.len()];
    match mutate % 16 {
        // Another part count for the same message.
        12 if h.total() < 64 => {
            let other =
                Header::new(*h.sid(), *h.mid(), h.seq(), h.total() + 1, h.exp()).expect("header");
            pm(&other, chunk)
        }
        // A body that is not base64.
        13 => pm(h, chunk).replacen("]--", "]--!", 1),
        // A part one byte short or long: contradicts the geometry.
        14 if chunk.len() > 1 => pm(h, &chunk[1..]),
        15 => {
            let mut longer = chunk.clone();
            longer.push(0xaa);
            pm(h, &longer)
        }
        // Whitespace inside the body.
        11 => {
            let text = pm(h, chunk);
            let at = text.find("]--").expect("tag") + 4;
            let mut spaced = text.clone();
            if at < text.len() {
                spaced.insert_str(at, " \r\n");
            }
            spaced
        }
        _ => pm(h, chunk),
    }
}

fn limits() -> impl Strategy<Value = (Limits, usize)> {
    (
        1usize..4,
        50usize..600,
        100usize..900,
        200usize..1500,
        1u64..8,
        200usize..1500,
    )
        .prop_map(|(pending, message, peer, total, timeout, arena)| {
            (
                Limits::DEFAULT
                    .with_max_pending_per_peer(pending)
                    .with_max_message_bytes(message)
                    .with_max_peer_bytes(peer)
                    .with_max_total_bytes(total)
                    .with_partial_timeout_secs(timeout),
                arena,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn assembler_matches_model(
        (limits, arena_len) in limits(),
        scratch_len in 100usize..500,
        messages in proptest::collection::vec(message(), 6),
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let sid = |m: usize| SessionId::from_entropy([m as u8 % 2, 0, 0, 0, 0, 0, 0, 1]);
        let plans: Vec<Vec<(Header, Vec<u8>)>> = messages
            .iter()
            .enumerate()
            .map(|(m, &(len, chunk, exp))| {
                let payload: Vec<u8> = (0..len).map(|i| (i * 31 + m * 7) as u8).collect();
                let exp = if exp == 0 { 0 } else { T0 + exp };
                Chunks::new(sid(m), MessageId::from_entropy([m as u8; 8]), exp, &payload, chunk)
                    .expect("plan")
                    .map(|(h, c)| (h, c.to_vec()))
                    .collect()
            })
            .collect();

        let mut arena = vec![0u8; arena_len];
        let mut scratch = vec![0u8; scratch_len];
        let mut real: Assembler<'_, u8, SLOTS> = Assembler::new(&mut arena, &mut scratch, limits);
        let mut model = Model { limits, arena: arena_len, scratch: scratch_len, msgs: HashMap::new() };
        let mut now = T0;
        for op in ops {
            match op {
                Op::Part { peer, msg, seq_pick, mutate } => {
                    let text = text_for(&plans[usize::from(msg)], seq_pick, mutate);
                    let part = parse(&text).expect("parses");
                    let want = model.add(peer, &part, now);
                    // A part `check` refuses or calls a duplicate is not added: the
                    // assembler only expires what is due, as `add` would first.
                    let got = match real.check(&peer, &part, UnixTime(now)) {
                        Err(e) => {
                            real.expire(UnixTime(now));
                            err(e)
                        }
                        Ok(Verdict::Duplicate) => {
                            real.expire(UnixTime(now));
                            Outcome::Duplicate
                        }
                        Ok(Verdict::Undecided) => match real.add(peer, &part, UnixTime(now)) {
                            Ok(Accepted::Complete(b)) => Outcome::Complete(b.to_vec()),
                            Ok(Accepted::Pending) => Outcome::Pending,
                            Ok(Accepted::Duplicate) => Outcome::Duplicate,
                            Err(e) => err(e),
                        },
                    };
                    prop_assert_eq!(got, want, "{}", text);
                    let d = real.next_deadline();
                    prop_assert!(d.is_none_or(|d| d.0 > now));
                }
                Op::Tick(s) => now += i64::from(s),
                Op::Expire => {
                    prop_assert_eq!(real.expire(UnixTime(now)), model.expire(now));
                    prop_assert!(real.next_deadline().is_none_or(|d| d.0 > now));
                }
            }
            prop_assert_eq!(real.next_deadline().map(|d| d.0), model.next_deadline());
            let stats = real.stats();
            prop_assert_eq!(stats.messages, model.msgs.len());
            prop_assert_eq!(stats.bytes, model.bytes(None));
            prop_assert!(stats.bytes <= arena_len.min(limits.max_total_bytes));
            for p in 0..3u8 {
                let s = real.peer_stats(&p);
                prop_assert_eq!(s.bytes, model.bytes(Some(p)));
                prop_assert!(s.bytes <= limits.max_peer_bytes);
                prop_assert!(s.messages <= limits.max_pending_per_peer);
            }
        }
    }
}

/// `check` refuses on the header what `add` refuses, and changes nothing.
#[test]
fn check_refuses_on_the_header_alone() {
    let limits = Limits::DEFAULT
        .with_max_pending_per_peer(2)
        .with_max_peer_bytes(1000);
    let mut arena = vec![0u8; 4000];
    let mut scratch = vec![0u8; 100];
    let mut real: Assembler<'_, u8, 4> = Assembler::new(&mut arena, &mut scratch, limits);
    let sid = SessionId::from_entropy([1; 8]);
    let text = |m: u8, seq: u16, total: u16, exp: i64, len: usize| {
        let h = Header::new(sid, MessageId::from_entropy([m; 8]), seq, total, exp).expect("h");
        pm(&h, &vec![m; len])
    };
    let now = UnixTime(T0);
    let (a, b, c) = (
        text(1, 1, 3, 0, 100),
        text(2, 1, 3, 0, 100),
        text(3, 1, 3, 0, 100),
    );
    for t in [&a, &b] {
        let part = parse(t).expect("parse");
        assert_eq!(real.check(&0, &part, now), Ok(Verdict::Undecided));
        assert_eq!(real.add(0, &part, now), Ok(Accepted::Pending));
    }
    let before = real.stats();
    let cases = [
        (a.clone(), 0, Ok(Verdict::Duplicate)),
        (c.clone(), 0, Err(AssembleError::PeerPending)),
        (c.clone(), 1, Ok(Verdict::Undecided)),
        (text(4, 1, 3, 0, 600), 1, Err(AssembleError::PeerBytes)),
        (
            text(5, 1, 1, 0, 200),
            1,
            Err(AssembleError::MessageTooLarge),
        ),
        (text(6, 1, 3, T0 - 1, 10), 1, Err(AssembleError::Expired)),
        // A different part count drops the held message: only `add` may do that.
        (text(1, 1, 2, 0, 100), 0, Ok(Verdict::Undecided)),
    ];
    for (t, peer, want) in cases {
        let part = parse(&t).expect("parse");
        assert_eq!(real.check(&peer, &part, now), want, "{t}");
        assert_eq!(real.stats(), before, "check changes nothing");
    }
    for (t, peer) in [(a, 0), (c, 0)] {
        let part = parse(&t).expect("parse");
        let verdict = real.check(&peer, &part, now);
        let added = real.add(peer, &part, now);
        match verdict {
            Ok(Verdict::Duplicate) => assert_eq!(added, Ok(Accepted::Duplicate)),
            Err(e) => assert_eq!(added, Err(e)),
            Ok(Verdict::Undecided) => panic!("decided above"),
        }
    }
}
