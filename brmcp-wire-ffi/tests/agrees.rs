//! The C ABI gives the Rust API's verdicts: on arbitrary and on mutated valid texts,
//! parse, decode and encode through `brmcp_wire_*` match brmcp-wire, status for error.

use std::mem::MaybeUninit;

use brmcp_wire::{Header, MessageId, Mode, SessionId, encode_part, parse_with};
use brmcp_wire_ffi::codec::{self, Part};
use brmcp_wire_ffi::status::Status;
use brmcp_wire_ffi::{BRMCP_WIRE_MODE_CANONICAL, BRMCP_WIRE_MODE_COMPATIBLE};
use proptest::prelude::*;

/// Parse and decode through the C ABI.
fn via_c(text: &[u8], mode: u32) -> Result<(Part, Vec<u8>), Status> {
    let mut part = MaybeUninit::<Part>::uninit();
    // SAFETY: a live slice and a writable part.
    let st = unsafe { codec::brmcp_wire_parse(text.as_ptr(), text.len(), mode, part.as_mut_ptr()) };
    if st != Status::Ok {
        return Err(st);
    }
    // SAFETY: written on success.
    let part = unsafe { part.assume_init() };
    let body = &text[part.body_offset..][..part.body_len];
    let mut out = vec![0u8; part.decoded_len_max];
    let mut n = 0;
    // SAFETY: live slices and a writable length.
    let st = unsafe {
        codec::brmcp_wire_decode_body(
            body.as_ptr(),
            body.len(),
            mode,
            out.as_mut_ptr(),
            out.len(),
            &mut n,
        )
    };
    if st != Status::Ok {
        return Err(st);
    }
    out.truncate(n);
    Ok((part, out))
}

/// Parse and decode through the Rust API.
fn via_rust(text: &[u8], mode: Mode) -> Result<(Header, Vec<u8>), Status> {
    let part = parse_with(text, mode)?;
    let mut out = vec![0u8; part.decoded_len_max()];
    let n = part.decode_body(&mut out)?;
    out.truncate(n);
    Ok((*part.header(), out))
}

fn agree(text: &[u8]) {
    for (c_mode, mode) in [
        (BRMCP_WIRE_MODE_COMPATIBLE, Mode::Compatible),
        (BRMCP_WIRE_MODE_CANONICAL, Mode::Canonical),
    ] {
        match (via_c(text, c_mode), via_rust(text, mode)) {
            (Ok((p, chunk)), Ok((h, want))) => {
                let sid = &p.header.sid[..usize::from(p.header.sid_len)];
                let sid: Vec<u8> = sid.iter().map(|&c| c as u8).collect();
                assert_eq!(sid, h.sid().as_bytes());
                assert_eq!(p.header.sid[usize::from(p.header.sid_len)], 0);
                assert_eq!(usize::from(p.header.mid_len), h.mid().len());
                assert_eq!(
                    (p.header.seq, p.header.total, p.header.exp),
                    (h.seq(), h.total(), h.exp())
                );
                assert_eq!(chunk, want);
            }
            (Err(c), Err(r)) => assert_eq!(c, r),
            (c, r) => panic!("c {c:?}, rust {r:?} on {text:?}"),
        }
    }
}

fn valid_pm(chunk: &[u8], seq: u16, total: u16, exp: i64) -> Vec<u8> {
    let sid = SessionId::from_entropy([1, 2, 3, 4, 5, 6, 7, 8]);
    let mid = MessageId::from_entropy([9, 8, 7, 6, 5, 4, 3, 2]);
    let h = Header::new(sid, mid, seq, total, exp).expect("header");
    let mut out = vec![0u8; h.encoded_len(chunk.len())];
    encode_part(&h, chunk, &mut out).expect("encode");
    out
}

proptest! {
    #[test]
    fn arbitrary_bytes(text in proptest::collection::vec(any::<u8>(), 0..200)) {
        agree(&text);
    }

    #[test]
    fn mutated_parts(
        chunk in proptest::collection::vec(any::<u8>(), 1..64),
        at in any::<usize>(),
        byte in any::<u8>(),
        exp in any::<i64>(),
    ) {
        let mut pm = valid_pm(&chunk, 1, 1, exp);
        agree(&pm);
        let i = at % pm.len();
        pm[i] = byte;
        agree(&pm);
        pm.insert(at % pm.len(), b' ');
        agree(&pm);
    }

    #[test]
    fn encode_matches(
        chunk in proptest::collection::vec(any::<u8>(), 0..300),
        seq in 0u16..70,
        total in 0u16..70,
        exp in any::<i64>(),
        room in 0usize..500,
    ) {
        let sid = b"0123456789abcdef";
        let mid = b"fedcba98";
        let mut h = MaybeUninit::uninit();
        // SAFETY: live slices and a writable header.
        let st = unsafe {
            codec::brmcp_wire_header_init(h.as_mut_ptr(), sid.as_ptr(), sid.len(), mid.as_ptr(), mid.len(), seq, total, exp)
        };
        let rust = Header::new(
            SessionId::from_bytes(sid).unwrap(),
            MessageId::from_bytes(mid).unwrap(),
            seq,
            total,
            exp,
        );
        let Ok(rust) = rust else {
            prop_assert_eq!(st, Status::BadSeq);
            return Ok(());
        };
        prop_assert_eq!(st, Status::Ok);
        // SAFETY: written on success.
        let h = unsafe { h.assume_init() };
        let mut c_out = vec![0u8; room];
        let mut r_out = vec![0u8; room];
        let mut n = 0;
        // SAFETY: live header, slices and length.
        let st = unsafe {
            codec::brmcp_wire_encode_part(&h, chunk.as_ptr(), chunk.len(), c_out.as_mut_ptr(), c_out.len(), &mut n)
        };
        match encode_part(&rust, &chunk, &mut r_out) {
            Ok(len) => {
                prop_assert_eq!(st, Status::Ok);
                prop_assert_eq!(n, len);
                prop_assert_eq!(&c_out[..n], &r_out[..len]);
            }
            Err(brmcp_wire::EncodeError::BufferTooSmall { required }) => {
                prop_assert_eq!(st, Status::BufferTooSmall);
                prop_assert_eq!(n, required);
            }
            Err(e) => prop_assert_eq!(st, Status::from(e)),
        }
    }
}
