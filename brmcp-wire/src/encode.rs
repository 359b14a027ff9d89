//! Encoding parts into caller buffers, and splitting a payload into parts.
//!
//! The output is byte-identical to the Go encoder for the same header and chunk
//! (WIRE.md §5). Nothing here allocates: [`Header::encoded_len`] gives the exact size,
//! [`encode_part`] writes into a slice, [`Chunks`] yields borrowed chunks.

use crate::body;
use crate::envelope::Header;
use crate::error::EncodeError;
use crate::id::{MessageId, SessionId};
use crate::limits::{MAX_ID_LEN, MAX_PARTS, MAX_PM_LEN};
use crate::words;

const PREFIX: &[u8] = b"--mcp[v=1,sid=";
const MID: &[u8] = b",mid=";
const SEQ: &[u8] = b",seq=";
const EXP: &[u8] = b",exp=";
const SEPARATOR: &[u8] = b"]--";

/// Decimal digits of `n`, with a `-` for negatives (i64 needs at most 20).
const fn decimal_len(n: i64) -> usize {
    let sign = if n < 0 { 1 } else { 0 };
    match n.unsigned_abs().checked_ilog10() {
        Some(log) => sign + 1 + log as usize,
        None => 1,
    }
}

impl Header {
    /// The exact length of this part's PM body for a chunk of `chunk_len` raw bytes.
    pub const fn encoded_len(&self, chunk_len: usize) -> usize {
        PREFIX.len()
            + self.sid_len()
            + MID.len()
            + self.mid_len()
            + SEQ.len()
            + decimal_len(self.seq as i64)
            + 1
            + decimal_len(self.total as i64)
            + EXP.len()
            + decimal_len(self.exp)
            + SEPARATOR.len()
            + body::encoded_len(chunk_len)
    }
}

/// The longest header: two ids of [`MAX_ID_LEN`], two two-digit part numbers and a
/// 20-character deadline.
const HEADER_MAX: usize =
    PREFIX.len() + 2 * MAX_ID_LEN + MID.len() + SEQ.len() + 2 + 1 + 2 + EXP.len() + 20 + 3;

/// Bytes the header writer may store past the header's end: it writes whole ids and
/// whole words, which later stores (or the body) overwrite.
const OVERRUN: usize = MAX_ID_LEN;

/// Every header offset is below this power of two, so masking an offset with
/// `AT_LIMIT - 1` changes nothing and lets the compiler drop each store's bounds check.
const AT_LIMIT: usize = 128;

/// The bytes the header writer stores to: any offset, plus the widest store.
const WINDOW: usize = AT_LIMIT + OVERRUN;

// Masking offsets with `AT_LIMIT - 1` is exact only if every header ends below it.
const _: () = assert!(HEADER_MAX <= AT_LIMIT);

/// 10^8: the values [`words::eight_digits`] shows.
const EIGHT_DIGITS: u64 = 100_000_000;

/// A deadline as the words the header writer stores: a sign, a lead of 1 to 8 digits
/// (no leading zero), then 0 to 2 words of eight digits.
struct Deadline {
    lead: u64,
    lead_len: usize,
    full: [u64; 2],
    full_count: usize,
    negative: bool,
}

impl Deadline {
    #[inline(always)]
    #[allow(clippy::cast_possible_truncation)] // each below 10^8
    const fn new(exp: i64) -> Self {
        let m = exp.unsigned_abs();
        let (lead, full, full_count) = if m < EIGHT_DIGITS {
            (m, [0, 0], 0)
        } else if m < EIGHT_DIGITS * EIGHT_DIGITS {
            let low = words::eight_digits((m % EIGHT_DIGITS) as u32);
            (m / EIGHT_DIGITS, [low, 0], 1)
        } else {
            let high = m / EIGHT_DIGITS;
            let full = [
                words::eight_digits((high % EIGHT_DIGITS) as u32),
                words::eight_digits((m % EIGHT_DIGITS) as u32),
            ];
            (high / EIGHT_DIGITS, full, 2)
        };
        // The lead's length from its value, not from its digits: the body's place depends
        // on it, and the conversion is a long chain of multiplications. A lead of one or
        // two digits (a deadline of this century's seconds has two) comes from the pair
        // table; longer ones are converted eight at a time.
        let (lead, lead_len) = if lead < 100 {
            let len = if lead < 10 { 1 } else { 2 };
            (PAIRS[lead as usize] as u64 >> (8 * (2 - len)), len)
        } else {
            let len = match (lead as u32).checked_ilog10() {
                Some(log) => log as usize + 1,
                None => 1,
            };
            (words::eight_digits(lead as u32) >> (8 * (8 - len)), len)
        };
        Self {
            lead,
            lead_len,
            full,
            full_count,
            negative: exp < 0,
        }
    }

    /// Characters written: the sign and the digits.
    #[inline(always)]
    const fn len(&self) -> usize {
        self.negative as usize + self.lead_len + 8 * self.full_count
    }
}

/// The numbers 0 to 99 as two ASCII digits (a leading zero below 10), first digit in
/// the low byte; then zeros up to [`AT_LIMIT`] entries, so a masked index is in range.
const PAIRS: [u16; AT_LIMIT] = {
    let mut t = [0u16; AT_LIMIT];
    let mut n = 0;
    while n < 100 {
        t[n] = (b'0' + (n / 10) as u8) as u16 | ((b'0' + (n % 10) as u8) as u16) << 8;
        n += 1;
    }
    t
};

/// Characters of a part number (at most [`MAX_PARTS`], two digits).
#[inline(always)]
const fn small_len(n: u16) -> usize {
    if n < 10 { 1 } else { 2 }
}

/// A part number's characters in the low bytes of a word.
#[inline(always)]
const fn small_ascii(n: u16) -> u64 {
    (PAIRS[n as usize & (AT_LIMIT - 1)] >> (8 * (2 - small_len(n)))) as u64
}

/// The header's length: everything but the ids and numbers is fixed.
#[inline(always)]
const fn header_len(h: &Header, exp: &Deadline) -> usize {
    PREFIX.len()
        + h.sid_len()
        + MID.len()
        + h.mid_len()
        + SEQ.len()
        + small_len(h.seq)
        + 1
        + small_len(h.total)
        + EXP.len()
        + exp.len()
        + SEPARATOR.len()
}

/// Stores `bytes` at `*at` and moves `*at` on by `len`.
#[inline(always)]
fn put<const N: usize>(win: &mut [u8; WINDOW], at: &mut usize, bytes: &[u8; N], len: usize) {
    let from = *at & (AT_LIMIT - 1);
    if let Some(to) = win.get_mut(from..from + N) {
        to.copy_from_slice(bytes);
    }
    *at += len;
}

/// Writes the header into the window; returns its length. Every store has a fixed
/// width, so the header costs a few dozen instructions: ids as whole 32-byte arrays,
/// numbers as words. Stores reach up to [`OVERRUN`] bytes past the header's end.
#[inline(always)]
fn write_header(h: &Header, exp: &Deadline, win: &mut [u8; WINDOW]) -> usize {
    const fn lit(bytes: &[u8; 8]) -> [u8; 8] {
        *bytes
    }
    let mut at = 0;
    put(win, &mut at, b"--mcp[v=1,sid=\0\0", PREFIX.len());
    put(win, &mut at, h.sid.padded(), h.sid_len());
    put(win, &mut at, &lit(b",mid=\0\0\0"), MID.len());
    put(win, &mut at, h.mid.padded(), h.mid_len());
    // `,seq=N/T,exp=` in three words.
    put(win, &mut at, &lit(b",seq=\0\0\0"), SEQ.len());
    let slash = small_ascii(h.seq) | u64::from(b'/') << (8 * small_len(h.seq));
    put(win, &mut at, &slash.to_le_bytes(), small_len(h.seq) + 1);
    let total =
        small_ascii(h.total) | u64::from_le_bytes(*b",exp=\0\0\0") << (8 * small_len(h.total));
    put(
        win,
        &mut at,
        &total.to_le_bytes(),
        small_len(h.total) + EXP.len(),
    );
    put(win, &mut at, b"-", usize::from(exp.negative));
    put(win, &mut at, &exp.lead.to_le_bytes(), exp.lead_len);
    put(
        win,
        &mut at,
        &exp.full[0].to_le_bytes(),
        8 * usize::from(exp.full_count > 0),
    );
    put(
        win,
        &mut at,
        &exp.full[1].to_le_bytes(),
        8 * usize::from(exp.full_count > 1),
    );
    put(win, &mut at, &lit(b"]--\0\0\0\0\0"), SEPARATOR.len());
    at
}

/// The usual header's numbers: fewer than ten parts and a deadline of ten digits (every
/// second from 2001 to 2286), as the words of its tail `,seq=S/T,exp=DDDDDDDDDD]--`,
/// whose length is then fixed. Its digits cost one eight-digit conversion and a pair,
/// and no lengths are counted.
struct UsualTail {
    /// `,seq=S/T`.
    seq: u64,
    /// `,exp=` and the deadline's first two digits.
    exp: u64,
    /// The deadline's last eight digits.
    low: u64,
}

impl UsualTail {
    /// Characters of the usual tail.
    const LEN: usize = SEQ.len() + 3 + EXP.len() + 10 + SEPARATOR.len();

    /// The smallest ten-digit deadline.
    const FROM: u64 = 1_000_000_000;

    #[inline(always)]
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // checked ranges
    const fn new(h: &Header) -> Option<Self> {
        // A negative deadline wraps to a huge value and is refused with the rest.
        let exp = h.exp as u64;
        // `seq <= total` holds, so one check covers both part numbers.
        if exp.wrapping_sub(Self::FROM) >= 9 * Self::FROM || h.total >= 10 {
            return None;
        }
        let seq =
            u64::from_le_bytes(*b",seq=0/0") + ((h.seq as u64) << 40) + ((h.total as u64) << 56);
        let lead = PAIRS[(exp / EIGHT_DIGITS) as usize & (AT_LIMIT - 1)] as u64;
        Some(Self {
            seq,
            exp: u64::from_le_bytes(*b",exp=\0\0\0") | lead << 40,
            low: words::eight_digits((exp % EIGHT_DIGITS) as u32),
        })
    }

    /// Writes the usual header into the window; its length is [`usual_header_len`].
    /// Only the message id's store may reach past the header's end, by
    /// [`USUAL_EXACT_MID`] less the id's length.
    #[inline(always)]
    fn write(&self, h: &Header, win: &mut [u8; WINDOW]) {
        let mut at = 0;
        put(win, &mut at, b"--mcp[v=1,sid=\0\0", PREFIX.len());
        put(win, &mut at, h.sid.padded(), h.sid_len());
        put(win, &mut at, b",mid=\0\0\0", MID.len());
        put(win, &mut at, h.mid.padded(), h.mid_len());
        put(win, &mut at, &self.seq.to_le_bytes(), 8);
        put(win, &mut at, &self.exp.to_le_bytes(), EXP.len() + 2);
        put(win, &mut at, &self.low.to_le_bytes(), 3);
        // The last five digits and the separator, ending at the header's end.
        let last = self.low >> 24 | u64::from_le_bytes(*b"\0\0\0\0\0]--");
        put(win, &mut at, &last.to_le_bytes(), 8);
    }
}

/// The length of a header whose tail is the usual one.
#[inline(always)]
const fn usual_header_len(h: &Header) -> usize {
    PREFIX.len() + h.sid_len() + MID.len() + h.mid_len() + UsualTail::LEN
}

/// Writes one part (header and base64 of `chunk`) into `out`; returns the bytes written.
///
/// # Errors
/// [`EncodeError::EmptyPayload`] for an empty chunk (receivers refuse empty bodies);
/// [`EncodeError::BufferTooSmall`] with the exact size when `out` is shorter than
/// [`Header::encoded_len`].
#[inline(always)]
pub fn encode_part(header: &Header, chunk: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
    // Nearly every part: the usual header, a message id this crate draws (16
    // characters), room for the header's window. Inlined into the caller, with no frame
    // of its own; every other part, and an empty chunk, is written out of line.
    if !chunk.is_empty()
        && header.mid_len() >= USUAL_EXACT_MID
        && out.len() >= WINDOW
        && let Some(tail) = UsualTail::new(header)
    {
        let header_len = usual_header_len(header);
        return write_body_first(header_len, chunk, out, &Usual { tail, header });
    }
    encode_other(header, chunk, out)
}

/// [`encode_part`] for every part its inlined path does not take.
#[inline(never)]
fn encode_other(header: &Header, chunk: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
    if chunk.is_empty() {
        return Err(EncodeError::EmptyPayload);
    }
    if let Some(tail) = UsualTail::new(header) {
        let header_len = usual_header_len(header);
        if header.mid_len() >= USUAL_EXACT_MID {
            return write_body_first(header_len, chunk, out, &Usual { tail, header });
        }
        return write_part(header_len, chunk, out, &Usual { tail, header });
    }
    let exp = Deadline::new(header.exp);
    let header_len = header_len(header, &exp);
    write_part(header_len, chunk, out, &General { exp, header })
}

/// A header writer: stores the header in a window.
trait WriteHeader {
    fn write(&self, win: &mut [u8; WINDOW]);
}

/// The usual header (see [`UsualTail`]).
struct Usual<'a> {
    tail: UsualTail,
    header: &'a Header,
}

impl WriteHeader for Usual<'_> {
    #[inline(always)]
    fn write(&self, win: &mut [u8; WINDOW]) {
        self.tail.write(self.header, win);
    }
}

/// Any other header.
struct General<'a> {
    exp: Deadline,
    header: &'a Header,
}

impl WriteHeader for General<'_> {
    #[inline(always)]
    fn write(&self, win: &mut [u8; WINDOW]) {
        write_header(self.header, &self.exp, win);
    }
}

/// The shortest message id with which the usual header's stores end within it: the
/// id's 32-byte store then ends before the tail's end.
const USUAL_EXACT_MID: usize = MAX_ID_LEN - UsualTail::LEN;

/// Writes a part whose header `write` stores in a window, is `header_len` long and
/// stores nothing past its end: the body first, so the engine's call waits on none
/// of the header's work, then the header.
#[inline(always)]
fn write_body_first(
    header_len: usize,
    chunk: &[u8],
    out: &mut [u8],
    header: &impl WriteHeader,
) -> Result<usize, EncodeError> {
    let required = header_len + body::encoded_len(chunk.len());
    if out.len() < required {
        return Err(EncodeError::BufferTooSmall { required });
    }
    if let Some(body) = out.get_mut(header_len..required) {
        body::encode_exact(chunk, body);
    }
    match out.first_chunk_mut::<WINDOW>() {
        Some(win) => header.write(win),
        None => {
            let mut aside = [0u8; WINDOW];
            header.write(&mut aside);
            out[..header_len].copy_from_slice(&aside[..header_len]);
        }
    }
    Ok(required)
}

/// Writes a part whose header `write` stores in a window and is `header_len` long.
#[inline(always)]
fn write_part(
    header_len: usize,
    chunk: &[u8],
    out: &mut [u8],
    header: &impl WriteHeader,
) -> Result<usize, EncodeError> {
    let body_len = body::encoded_len(chunk.len());
    let required = header_len + body_len;
    if out.len() < required {
        return Err(EncodeError::BufferTooSmall { required });
    }
    // The header's overrun lands in the body's place, which the body then fills; with
    // less room than the window, the header is written aside and copied.
    match out.first_chunk_mut::<WINDOW>() {
        Some(win) if body_len >= OVERRUN => header.write(win),
        _ => {
            let mut aside = [0u8; WINDOW];
            header.write(&mut aside);
            out[..header_len].copy_from_slice(&aside[..header_len]);
        }
    }
    if let Some(body) = out.get_mut(header_len..required) {
        body::encode_exact(chunk, body);
    }
    Ok(required)
}

/// Splits a payload into the parts of one message: yields `(Header, chunk)` in order.
///
/// Every chunk but the last is `chunk_len` bytes; the last holds the rest.
#[derive(Debug, Clone)]
pub struct Chunks<'a> {
    sid: SessionId,
    mid: MessageId,
    exp: i64,
    payload: &'a [u8],
    chunk_len: usize,
    total: u16,
    next: u16,
}

impl<'a> Chunks<'a> {
    /// Plans the parts of `payload` under session `sid` and message `mid`, each stamped
    /// with deadline `exp` (unix seconds; 0 for none).
    ///
    /// # Errors
    /// [`EncodeError::EmptyPayload`], [`EncodeError::ZeroChunkLen`],
    /// [`EncodeError::TooManyParts`] above [`MAX_PARTS`], and
    /// [`EncodeError::PmTooLarge`] when the longest part would exceed [`MAX_PM_LEN`].
    pub fn new(
        sid: SessionId,
        mid: MessageId,
        exp: i64,
        payload: &'a [u8],
        chunk_len: usize,
    ) -> Result<Self, EncodeError> {
        if payload.is_empty() {
            return Err(EncodeError::EmptyPayload);
        }
        if chunk_len == 0 {
            return Err(EncodeError::ZeroChunkLen);
        }
        let total = payload.len().div_ceil(chunk_len);
        if total > usize::from(MAX_PARTS) {
            return Err(EncodeError::TooManyParts { total });
        }
        #[allow(clippy::cast_possible_truncation)] // <= MAX_PARTS
        let total = total as u16;
        let chunks = Self {
            sid,
            mid,
            exp,
            payload,
            chunk_len,
            total,
            next: 1,
        };
        let len = chunks.max_pm_len();
        if len > MAX_PM_LEN {
            return Err(EncodeError::PmTooLarge { len });
        }
        Ok(chunks)
    }

    /// How many parts the message has.
    pub const fn total(&self) -> u16 {
        self.total
    }

    /// The length of the longest PM body among the parts: a buffer this long encodes any
    /// of them.
    pub fn max_pm_len(&self) -> usize {
        let longest = self.chunk_len.min(self.payload.len());
        // The last part has the widest seq; its header is the longest.
        self.header(self.total).encoded_len(longest)
    }

    /// The header of part `seq` (within `1..=total`).
    const fn header(&self, seq: u16) -> Header {
        Header::checked(self.sid, self.mid, seq, self.total, self.exp)
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = (Header, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.next > self.total {
            return None;
        }
        let seq = self.next;
        self.next += 1;
        let start = usize::from(seq - 1) * self.chunk_len;
        let end = start.saturating_add(self.chunk_len).min(self.payload.len());
        Some((
            self.header(seq),
            self.payload.get(start..end).unwrap_or_default(),
        ))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::from(self.total + 1 - self.next);
        (left, Some(left))
    }
}

impl ExactSizeIterator for Chunks<'_> {}

impl core::iter::FusedIterator for Chunks<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    fn ids() -> (SessionId, MessageId) {
        (
            SessionId::from_entropy([0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18]),
            MessageId::from_entropy([0, 0, 0, 0, 0, 0, 0x10, 0]),
        )
    }

    #[test]
    fn encodes_the_go_form() {
        let (sid, mid) = ids();
        let h = Header::new(sid, mid, 1, 1, 0).unwrap_or_else(|_| unreachable!());
        let mut out = vec![0u8; h.encoded_len(1)];
        let n = encode_part(&h, b"A", &mut out);
        assert_eq!(n, Ok(out.len()));
        assert_eq!(
            &out[..],
            b"--mcp[v=1,sid=a1b2c3d4e5f60718,mid=0000000000001000,seq=1/1,exp=0]--QQ=="
        );
    }

    #[test]
    fn negative_and_extreme_deadlines() {
        let (sid, mid) = ids();
        for exp in [-1, i64::MIN, i64::MAX, 1_767_225_600] {
            let h = Header::new(sid, mid, 64, 64, exp).unwrap_or_else(|_| unreachable!());
            let mut out = vec![0u8; h.encoded_len(5)];
            assert_eq!(encode_part(&h, b"hello", &mut out), Ok(out.len()));
            let text = core::str::from_utf8(&out).unwrap_or_default();
            assert!(text.contains(&std::format!(",exp={exp}]--")), "{text}");
        }
    }

    /// The usual tail's edges: nine and ten parts, nine, ten and eleven digits, negative
    /// ten-digit deadlines; in a buffer of exactly the size (the header written aside for
    /// short bodies) and in one with room.
    #[test]
    fn usual_tail_edges_match_plain_formatting() {
        use base64::Engine as _;
        let (sid, mid) = ids();
        for total in [1, 9, 10, 11] {
            for seq in [1, 9, 10].into_iter().filter(|&s| s <= total) {
                for exp in [
                    0,
                    999_999_999,
                    1_000_000_000,
                    1_767_225_600,
                    9_999_999_999,
                    10_000_000_000,
                    -1_767_225_600,
                ] {
                    let h =
                        Header::new(sid, mid, seq, total, exp).unwrap_or_else(|_| unreachable!());
                    for chunk in [&b"A"[..], &[0x5au8; 40][..]] {
                        let want = std::format!(
                            "--mcp[v=1,sid={sid},mid={mid},seq={seq}/{total},exp={exp}]--{}",
                            base64::engine::general_purpose::STANDARD.encode(chunk)
                        );
                        for spare in [0, 200] {
                            let mut out = vec![0xa5u8; want.len() + spare];
                            assert_eq!(encode_part(&h, chunk, &mut out), Ok(want.len()));
                            assert_eq!(&out[..want.len()], want.as_bytes());
                            assert!(out[want.len()..].iter().all(|&b| b == 0xa5));
                        }
                    }
                }
            }
        }
    }

    /// A random header (ids of any valid length, any valid seq, any deadline) and chunk;
    /// often the usual tail (fewer than ten parts, ten digits) and the numbers at its
    /// edges.
    fn header_and_chunk() -> impl Strategy<Value = (Header, Vec<u8>)> {
        let id = "[0-9a-f]{1,32}";
        (
            id,
            id,
            prop_oneof![1u16..=MAX_PARTS, 1u16..=10],
            0u16..MAX_PARTS,
            prop_oneof![
                any::<i64>(),
                Just(0),
                Just(-1),
                Just(i64::MIN),
                Just(i64::MAX),
                0i64..100_000_000_000_000_000,
                -99_999_999_999i64..100_000_000_000,
                999_999_990i64..1_000_000_010,
                1_000_000_000i64..10_000_000_000,
                9_999_999_990i64..10_000_000_010,
                -10_000_000_010i64..-999_999_990,
            ],
            prop::collection::vec(any::<u8>(), 1..80),
        )
            .prop_map(|(sid, mid, total, seq, exp, chunk)| {
                let sid = sid.parse().unwrap_or_else(|_| unreachable!());
                let mid = mid.parse().unwrap_or_else(|_| unreachable!());
                let seq = seq % total + 1;
                let h = Header::new(sid, mid, seq, total, exp).unwrap_or_else(|_| unreachable!());
                (h, chunk)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        /// The word-at-a-time writer gives the text of the plain formatting, in a buffer
        /// of exactly the size and in a larger one, and stores nothing past the part.
        #[test]
        fn encoder_matches_plain_formatting((h, chunk) in header_and_chunk(), spare in 0usize..200) {
            use base64::Engine as _;
            let want = std::format!(
                "--mcp[v=1,sid={},mid={},seq={}/{},exp={}]--{}",
                h.sid(), h.mid(), h.seq(), h.total(), h.exp(),
                base64::engine::general_purpose::STANDARD.encode(&chunk)
            );
            prop_assert_eq!(h.encoded_len(chunk.len()), want.len());
            let mut out = vec![0xa5u8; want.len() + spare];
            prop_assert_eq!(encode_part(&h, &chunk, &mut out), Ok(want.len()));
            prop_assert_eq!(&out[..want.len()], want.as_bytes());
            prop_assert!(out[want.len()..].iter().all(|&b| b == 0xa5), "stored past the part");
        }
    }

    #[test]
    fn short_buffer_reports_exact_size() {
        let (sid, mid) = ids();
        let h = Header::new(sid, mid, 1, 1, 0).unwrap_or_else(|_| unreachable!());
        let mut out = [0u8; 10];
        assert_eq!(
            encode_part(&h, b"A", &mut out),
            Err(EncodeError::BufferTooSmall {
                required: h.encoded_len(1)
            })
        );
    }

    #[test]
    fn chunks_refuse_what_cannot_be_sent() {
        let (sid, mid) = ids();
        assert_eq!(
            Chunks::new(sid, mid, 0, b"", 10).err(),
            Some(EncodeError::EmptyPayload)
        );
        assert_eq!(
            Chunks::new(sid, mid, 0, b"x", 0).err(),
            Some(EncodeError::ZeroChunkLen)
        );
        assert_eq!(
            Chunks::new(sid, mid, 0, &[0u8; 65], 1).err(),
            Some(EncodeError::TooManyParts { total: 65 })
        );
        let big = vec![0u8; 800 * 1024];
        assert!(matches!(
            Chunks::new(sid, mid, 0, &big, 800 * 1024),
            Err(EncodeError::PmTooLarge { len }) if len > MAX_PM_LEN
        ));
        // The largest chunk that fits, and one byte more.
        let fits = Chunks::new(sid, mid, 0, &big, 786_000);
        assert!(fits.is_ok());
    }

    #[test]
    fn chunks_split_evenly_with_a_short_tail() {
        let (sid, mid) = ids();
        let payload: Vec<u8> = (0..10u8).collect();
        let parts: Vec<_> = Chunks::new(sid, mid, 0, &payload, 4)
            .unwrap_or_else(|_| unreachable!())
            .collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].1, &[0, 1, 2, 3]);
        assert_eq!(parts[2].1, &[8, 9]);
        assert_eq!((parts[2].0.seq(), parts[2].0.total()), (3, 3));
    }
}
