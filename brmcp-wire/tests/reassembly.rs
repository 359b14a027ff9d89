//! The Go Assembler's behaviours, with the same numbers, plus the bounds it lacks.

use brmcp_wire::{
    Accepted, AssembleError, Assembler, BodyError, Chunks, Header, Limits, MessageId, SessionId,
    UnixTime, encode_part, parse,
};

type Peer = u8;
const T0: UnixTime = UnixTime(1_700_000_000);

fn sid() -> SessionId {
    SessionId::from_entropy([1, 2, 3, 4, 5, 6, 7, 8])
}

fn mid(n: u8) -> MessageId {
    MessageId::from_entropy([n, 0, 0, 0, 0, 0, 0, n])
}

/// The PM bodies of `payload` split at `chunk` bytes.
fn parts(mid: MessageId, exp: i64, payload: &[u8], chunk: usize) -> Vec<String> {
    Chunks::new(sid(), mid, exp, payload, chunk)
        .expect("plan")
        .map(|(h, c)| pm(&h, c))
        .collect()
}

fn pm(h: &Header, chunk: &[u8]) -> String {
    let mut buf = vec![0u8; h.encoded_len(chunk.len())];
    let n = encode_part(h, chunk, &mut buf).expect("encode");
    buf.truncate(n);
    String::from_utf8(buf).expect("ascii")
}

struct Fixture {
    arena: Vec<u8>,
    scratch: Vec<u8>,
}

impl Fixture {
    fn new(arena: usize) -> Self {
        Self {
            arena: vec![0; arena],
            scratch: vec![0; 1 << 20],
        }
    }

    fn assembler(&mut self, limits: Limits) -> Assembler<'_, Peer, 16> {
        Assembler::new(&mut self.arena, &mut self.scratch, limits)
    }
}

/// Adds one PM and returns the owned outcome.
fn add(
    a: &mut Assembler<'_, Peer, 16>,
    peer: Peer,
    text: &str,
    now: UnixTime,
) -> Result<Option<Vec<u8>>, AssembleError> {
    let part = parse(text).expect("valid part");
    match a.add(peer, &part, now)? {
        Accepted::Complete(bytes) => Ok(Some(bytes.to_vec())),
        Accepted::Pending | Accepted::Duplicate => Ok(None),
    }
}

#[test]
fn single_part_round_trip() {
    let mut f = Fixture::new(1024);
    let mut a = f.assembler(Limits::default());
    let payload = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let p = parts(mid(1), 0, payload, 200 * 1024);
    assert_eq!(p.len(), 1);
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(Some(payload.to_vec())));
    assert_eq!(a.stats().messages, 0, "a single part takes no slot");
}

#[test]
fn out_of_order_completion() {
    // 16 KiB at 4096-byte chunks: 4 parts delivered 2,0,3,1.
    let payload: Vec<u8> = (0..16384u32).map(|i| (i * 7 % 251) as u8).collect();
    let p = parts(mid(1), 0, &payload, 4096);
    assert_eq!(p.len(), 4);
    let mut f = Fixture::new(1 << 20);
    let mut a = f.assembler(Limits::default());
    for &i in &[2, 0, 3] {
        assert_eq!(add(&mut a, 1, &p[i], T0), Ok(None));
    }
    assert_eq!(add(&mut a, 1, &p[1], T0), Ok(Some(payload)));
    assert_eq!(a.stats(), Default::default());
}

#[test]
fn last_part_first_then_the_rest() {
    let payload: Vec<u8> = (0..1000u32).map(|i| (i % 253) as u8).collect();
    let p = parts(mid(1), 0, &payload, 300);
    let mut f = Fixture::new(4096);
    let mut a = f.assembler(Limits::default());
    assert_eq!(add(&mut a, 1, &p[3], T0), Ok(None));
    assert_eq!(a.stats().bytes, 100, "only the tail is reserved");
    assert_eq!(add(&mut a, 1, &p[1], T0), Ok(None));
    assert_eq!(a.stats().bytes, 1000, "geometry known: exact size");
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    assert_eq!(add(&mut a, 1, &p[2], T0), Ok(Some(payload)));
}

#[test]
fn expired_part_refused() {
    let mut f = Fixture::new(4096);
    let mut a = f.assembler(Limits::default());
    let p = parts(mid(1), T0.0 - 1, b"late", 2);
    assert_eq!(add(&mut a, 1, &p[0], T0), Err(AssembleError::Expired));
    assert_eq!(a.stats().messages, 0, "no state touched");
    // One second before the deadline and at it, the part is still good.
    let p = parts(mid(2), T0.0, b"ok", 200);
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(Some(b"ok".to_vec())));
    assert_eq!(
        add(&mut a, 1, &p[0], UnixTime(T0.0 + 1)),
        Err(AssembleError::Expired)
    );
}

#[test]
fn pending_per_peer_bound() {
    // With a cap of 2, a third concurrent partial message from one peer is refused;
    // another peer is unaffected.
    let limits = Limits::DEFAULT.with_max_pending_per_peer(2);
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(limits);
    for m in 1..=2 {
        let p = parts(mid(m), 0, b"abcdefgh", 4);
        assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    }
    let p3 = parts(mid(3), 0, b"abcdefgh", 4);
    assert_eq!(add(&mut a, 1, &p3[0], T0), Err(AssembleError::PeerPending));
    assert_eq!(add(&mut a, 2, &p3[0], T0), Ok(None));
    assert_eq!(a.peer_stats(&1).messages, 2);
    assert_eq!(a.peer_stats(&2).messages, 1);
}

#[test]
fn message_bytes_bound() {
    // With a 6-byte message cap, the second 4-byte chunk fails; so does an 8-byte
    // single-part message.
    let limits = Limits::DEFAULT.with_max_message_bytes(6);
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(limits);
    let p = parts(mid(1), 0, b"abcdefgh", 4);
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    assert_eq!(
        add(&mut a, 1, &p[1], T0),
        Err(AssembleError::MessageTooLarge)
    );
    assert_eq!(a.stats().messages, 0, "the message was dropped");
    let single = parts(mid(2), 0, b"abcdefgh", 100);
    assert_eq!(
        add(&mut a, 1, &single[0], T0),
        Err(AssembleError::MessageTooLarge)
    );
}

#[test]
fn timeout_eviction() {
    // With a 1 s timeout, a part arriving 2 s after the first evicts the stale partial
    // and starts a fresh incomplete one.
    let limits = Limits::DEFAULT.with_partial_timeout_secs(1);
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(limits);
    let p = parts(mid(1), 0, b"abcdefgh", 4);
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    assert_eq!(a.next_deadline(), Some(UnixTime(T0.0 + 2)));
    assert_eq!(add(&mut a, 1, &p[1], UnixTime(T0.0 + 2)), Ok(None));
    assert_eq!(a.stats().messages, 1, "exactly one pending message");
}

#[test]
fn expire_is_proactive() {
    let limits = Limits::DEFAULT.with_partial_timeout_secs(10);
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(limits);
    let early = parts(mid(1), T0.0 + 3, b"abcdefgh", 4);
    let late = parts(mid(2), 0, b"abcdefgh", 4);
    assert_eq!(add(&mut a, 1, &early[0], T0), Ok(None));
    assert_eq!(add(&mut a, 2, &late[0], T0), Ok(None));
    assert_eq!(a.next_deadline(), Some(UnixTime(T0.0 + 4)));
    assert_eq!(a.expire(UnixTime(T0.0 + 3)), 0);
    assert_eq!(a.expire(UnixTime(T0.0 + 4)), 1, "the deadline passed");
    assert_eq!(a.next_deadline(), Some(UnixTime(T0.0 + 11)));
    assert_eq!(a.expire(UnixTime(T0.0 + 11)), 1, "the timeout passed");
    assert_eq!(a.next_deadline(), None);
    assert_eq!(a.stats(), Default::default());
}

#[test]
fn duplicate_part_ignored() {
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(Limits::default());
    let p = parts(mid(1), 0, b"abcdefgh", 4);
    let part = parse(&p[0]).expect("part");
    assert_eq!(a.add(1, &part, T0), Ok(Accepted::Pending));
    assert_eq!(a.add(1, &part, T0), Ok(Accepted::Duplicate));
    // A duplicate with other content is ignored too: the first copy is kept.
    let forged = pm(
        &Header::new(sid(), mid(1), 1, 2, 0).expect("header"),
        b"ABCD",
    );
    assert_eq!(add(&mut a, 1, &forged, T0), Ok(None));
    assert_eq!(add(&mut a, 1, &p[1], T0), Ok(Some(b"abcdefgh".to_vec())));
}

#[test]
fn inconsistent_total_drops_message() {
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(Limits::default());
    let p = parts(mid(1), 0, b"abcdefgh", 4);
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    let other = pm(
        &Header::new(sid(), mid(1), 2, 3, 0).expect("header"),
        b"efgh",
    );
    assert_eq!(
        add(&mut a, 1, &other, T0),
        Err(AssembleError::InconsistentTotal)
    );
    assert_eq!(a.stats().messages, 0);
}

#[test]
fn geometry_mismatch_drops_message() {
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(Limits::default());
    let h = |seq, total| Header::new(sid(), mid(1), seq, total, 0).expect("header");
    // Non-last parts of different lengths.
    assert_eq!(add(&mut a, 1, &pm(&h(1, 3), b"abcd"), T0), Ok(None));
    assert_eq!(
        add(&mut a, 1, &pm(&h(2, 3), b"abc"), T0),
        Err(AssembleError::Geometry)
    );
    assert_eq!(a.stats().messages, 0);
    // A last part longer than the others.
    assert_eq!(add(&mut a, 1, &pm(&h(1, 2), b"abcd"), T0), Ok(None));
    assert_eq!(
        add(&mut a, 1, &pm(&h(2, 2), b"abcde"), T0),
        Err(AssembleError::Geometry)
    );
    // A non-last part shorter than a last part already seen.
    assert_eq!(add(&mut a, 1, &pm(&h(2, 2), b"abcde"), T0), Ok(None));
    assert_eq!(
        add(&mut a, 1, &pm(&h(1, 2), b"abcd"), T0),
        Err(AssembleError::Geometry)
    );
    assert_eq!(a.stats(), Default::default());
}

#[test]
fn peer_byte_budget() {
    // One peer cannot take more than its budget, however many messages it may open;
    // another peer still gets space.
    let limits = Limits::DEFAULT.with_max_peer_bytes(100);
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(limits);
    let payload = [7u8; 120];
    let p = parts(mid(1), 0, &payload, 40);
    assert_eq!(add(&mut a, 1, &p[0], T0), Err(AssembleError::PeerBytes));
    let p = parts(mid(2), 0, &payload[..80], 40);
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    let p3 = parts(mid(3), 0, &payload[..80], 40);
    assert_eq!(add(&mut a, 1, &p3[0], T0), Err(AssembleError::PeerBytes));
    assert_eq!(add(&mut a, 2, &p3[0], T0), Ok(None));
}

#[test]
fn total_bytes_bound_is_the_arena() {
    let mut f = Fixture::new(100);
    let mut a = f.assembler(Limits::default());
    let payload = [7u8; 80];
    let p = parts(mid(1), 0, &payload, 40);
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    let p2 = parts(mid(2), 0, &payload, 40);
    assert_eq!(add(&mut a, 2, &p2[0], T0), Err(AssembleError::TotalBytes));
    assert_eq!(add(&mut a, 1, &p[1], T0), Ok(Some(payload.to_vec())));
    assert_eq!(add(&mut a, 2, &p2[0], T0), Ok(None), "space was freed");
}

#[test]
fn slots_are_bounded() {
    let mut arena = vec![0u8; 1 << 16];
    let mut scratch = vec![0u8; 1024];
    let limits = Limits::DEFAULT.with_max_pending_per_peer(100);
    let mut a: Assembler<'_, Peer, 2> = Assembler::new(&mut arena, &mut scratch, limits);
    for m in 1..=3u8 {
        let p = parts(mid(m), 0, b"abcdefgh", 4);
        let part = parse(&p[0]).expect("part");
        let r = a.add(1, &part, T0).map(|_| ());
        assert_eq!(
            r,
            if m <= 2 {
                Ok(())
            } else {
                Err(AssembleError::SlotsFull)
            }
        );
    }
}

#[test]
fn fragmented_arena_is_compacted() {
    // Fill the arena with four messages, free the 1st and 3rd, then a message needing
    // both holes must still fit.
    let mut f = Fixture::new(400);
    let limits = Limits::DEFAULT.with_max_pending_per_peer(16);
    let mut a = f.assembler(limits);
    let payload = |b: u8| vec![b; 100];
    let sets: Vec<Vec<String>> = (1..=4).map(|m| parts(mid(m), 0, &payload(m), 50)).collect();
    for s in &sets {
        assert_eq!(add(&mut a, 1, &s[0], T0), Ok(None));
    }
    assert_eq!(add(&mut a, 1, &sets[0][1], T0), Ok(Some(payload(1))));
    assert_eq!(add(&mut a, 1, &sets[2][1], T0), Ok(Some(payload(3))));
    let big = parts(mid(9), 0, &[9u8; 200], 100);
    assert_eq!(add(&mut a, 1, &big[1], T0), Ok(None));
    assert_eq!(add(&mut a, 1, &big[0], T0), Ok(Some(vec![9u8; 200])));
    assert_eq!(add(&mut a, 1, &sets[1][1], T0), Ok(Some(payload(2))));
    assert_eq!(add(&mut a, 1, &sets[3][1], T0), Ok(Some(payload(4))));
}

#[test]
fn tail_first_growth_moves_other_regions_safely() {
    // A message whose last part came first grows when its geometry becomes known; the
    // regions after it must survive the move.
    let mut f = Fixture::new(300);
    let limits = Limits::DEFAULT.with_max_pending_per_peer(16);
    let mut a = f.assembler(limits);
    let a_payload: Vec<u8> = (0..130).collect();
    let b_payload: Vec<u8> = (100..200).collect();
    let pa = parts(mid(1), 0, &a_payload, 60);
    let pb = parts(mid(2), 0, &b_payload, 50);
    assert_eq!(add(&mut a, 1, &pa[2], T0), Ok(None), "10-byte tail first");
    assert_eq!(add(&mut a, 1, &pb[0], T0), Ok(None), "b right after it");
    assert_eq!(add(&mut a, 1, &pa[0], T0), Ok(None), "a grows to 130");
    assert_eq!(add(&mut a, 1, &pb[1], T0), Ok(Some(b_payload)));
    assert_eq!(add(&mut a, 1, &pa[1], T0), Ok(Some(a_payload)));
}

#[test]
fn forget_peer_frees_its_messages() {
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(Limits::default());
    let p = parts(mid(1), 0, b"abcdefgh", 4);
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    assert_eq!(add(&mut a, 2, &p[0], T0), Ok(None));
    assert_eq!(a.forget_peer(&1), 1);
    assert_eq!(a.stats().messages, 1);
}

#[test]
fn whitespace_bodies_reassemble() {
    let payload: Vec<u8> = (0..90u8).collect();
    let p = parts(mid(1), 0, &payload, 30);
    let spaced: Vec<String> = p
        .iter()
        .map(|s| {
            let (head, body) = s.split_at(s.find("]--").expect("tag") + 3);
            let mut spaced = head.to_string();
            for (i, c) in body.chars().enumerate() {
                if i % 5 == 1 {
                    spaced.push_str("\r\n ");
                }
                spaced.push(c);
            }
            spaced
        })
        .collect();
    let mut f = Fixture::new(1 << 16);
    let mut a = f.assembler(Limits::default());
    assert_eq!(add(&mut a, 1, &spaced[2], T0), Ok(None));
    assert_eq!(add(&mut a, 1, &spaced[0], T0), Ok(None));
    assert_eq!(add(&mut a, 1, &spaced[1], T0), Ok(Some(payload)));
}

#[test]
fn bad_body_refuses_only_its_part() {
    let payload: Vec<u8> = (0..100u8).collect();
    let p = parts(mid(1), 0, &payload, 40);
    let broken = |s: &str| s.replacen("]--", "]--!", 1);
    let mut f = Fixture::new(4096);
    let mut a = f.assembler(Limits::default());
    // A bad first part opens nothing.
    assert!(matches!(
        add(&mut a, 1, &broken(&p[0]), T0),
        Err(AssembleError::Body(_))
    ));
    assert_eq!(a.stats().messages, 0);
    // Tail first, then a bad part that would have fixed the geometry: the tail survives.
    assert_eq!(add(&mut a, 1, &p[2], T0), Ok(None));
    assert!(matches!(
        add(&mut a, 1, &broken(&p[0]), T0),
        Err(AssembleError::Body(_))
    ));
    assert_eq!(a.stats().bytes, 20, "only the tail is reserved again");
    assert_eq!(add(&mut a, 1, &p[0], T0), Ok(None));
    // Geometry known: a bad part leaves the message as it was; a good copy completes it.
    assert!(matches!(
        add(&mut a, 1, &broken(&p[1]), T0),
        Err(AssembleError::Body(_))
    ));
    assert_eq!(add(&mut a, 1, &p[1], T0), Ok(Some(payload)));
}

#[test]
fn symbol_less_bodies_report_the_body_error() {
    let mut f = Fixture::new(4096);
    let mut a = f.assembler(Limits::default());
    let h = |seq, total| Header::new(sid(), mid(1), seq, total, 0).expect("header");
    let short = |seq, total| {
        let text = pm(&h(seq, total), b"abc");
        format!("{}Q", &text[..text.find("]--").expect("tag") + 3])
    };
    // Unknown geometry: part 1 of 2 whose body is a lone symbol.
    assert!(matches!(
        add(&mut a, 1, &short(1, 2), T0),
        Err(AssembleError::Body(BodyError::Invalid { .. }))
    ));
    // Known geometry.
    assert_eq!(add(&mut a, 1, &pm(&h(1, 3), b"abc"), T0), Ok(None));
    assert!(matches!(
        add(&mut a, 1, &short(2, 3), T0),
        Err(AssembleError::Body(BodyError::Invalid { .. }))
    ));
    assert_eq!(a.stats().messages, 1, "the message survives a bad body");
}

#[test]
fn growing_region_moves_only_itself_when_a_gap_fits() {
    // Tail first, then a region after it; the growing message fits in the free space at
    // the end, so the other message's bytes stay where they are and both complete.
    let mut f = Fixture::new(1000);
    let limits = Limits::DEFAULT.with_max_pending_per_peer(16);
    let mut a = f.assembler(limits);
    let a_payload: Vec<u8> = (0..250u8).collect();
    let b_payload: Vec<u8> = (0..100u8).rev().collect();
    let pa = parts(mid(1), 0, &a_payload, 100);
    let pb = parts(mid(2), 0, &b_payload, 50);
    assert_eq!(add(&mut a, 1, &pa[2], T0), Ok(None));
    assert_eq!(add(&mut a, 1, &pb[0], T0), Ok(None));
    assert_eq!(add(&mut a, 1, &pa[0], T0), Ok(None));
    assert_eq!(add(&mut a, 1, &pa[1], T0), Ok(Some(a_payload)));
    assert_eq!(add(&mut a, 1, &pb[1], T0), Ok(Some(b_payload)));
}
