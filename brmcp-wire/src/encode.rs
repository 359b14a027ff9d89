//! Encoding parts into caller buffers, and splitting a payload into parts.
//!
//! The output is byte-identical to the Go encoder for the same header and chunk
//! (WIRE.md §5). Nothing here allocates: [`Header::encoded_len`] gives the exact size,
//! [`encode_part`] writes into a slice, [`Chunks`] yields borrowed chunks.

use crate::body;
use crate::envelope::Header;
use crate::error::EncodeError;
use crate::id::{MessageId, SessionId};
use crate::limits::{MAX_PARTS, MAX_PM_LEN};

const PREFIX: &[u8] = b"--mcp[v=1,sid=";
const MID: &[u8] = b",mid=";
const SEQ: &[u8] = b",seq=";
const EXP: &[u8] = b",exp=";
const SEPARATOR: &[u8] = b"]--";

/// Decimal digits of `n`, with a `-` for negatives (i64 needs at most 20).
const fn decimal_len(n: i64) -> usize {
    let mut len = if n < 0 { 2 } else { 1 };
    let mut m = n.unsigned_abs() / 10;
    while m > 0 {
        len += 1;
        m /= 10;
    }
    len
}

impl Header {
    /// The exact length of this part's PM body for a chunk of `chunk_len` raw bytes.
    pub const fn encoded_len(&self, chunk_len: usize) -> usize {
        PREFIX.len()
            + self.sid.len()
            + MID.len()
            + self.mid.len()
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

/// A cursor over an output slice whose capacity was checked up front.
struct Cursor<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Cursor<'_> {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.at + bytes.len();
        self.out[self.at..end].copy_from_slice(bytes);
        self.at = end;
    }

    fn put_decimal(&mut self, n: i64) {
        if n < 0 {
            self.put(b"-");
        }
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        let mut m = n.unsigned_abs();
        loop {
            i -= 1;
            #[allow(clippy::cast_possible_truncation)] // a digit
            {
                digits[i] = b'0' + (m % 10) as u8;
            }
            m /= 10;
            if m == 0 {
                break;
            }
        }
        self.put(&digits[i..]);
    }
}

/// Writes one part (header and base64 of `chunk`) into `out`; returns the bytes written.
///
/// # Errors
/// [`EncodeError::EmptyPayload`] for an empty chunk (receivers refuse empty bodies);
/// [`EncodeError::BufferTooSmall`] with the exact size when `out` is shorter than
/// [`Header::encoded_len`].
pub fn encode_part(header: &Header, chunk: &[u8], out: &mut [u8]) -> Result<usize, EncodeError> {
    if chunk.is_empty() {
        return Err(EncodeError::EmptyPayload);
    }
    let required = header.encoded_len(chunk.len());
    if out.len() < required {
        return Err(EncodeError::BufferTooSmall { required });
    }
    let mut c = Cursor { out, at: 0 };
    c.put(PREFIX);
    c.put(header.sid.as_bytes());
    c.put(MID);
    c.put(header.mid.as_bytes());
    c.put(SEQ);
    c.put_decimal(i64::from(header.seq));
    c.put(b"/");
    c.put_decimal(i64::from(header.total));
    c.put(EXP);
    c.put_decimal(header.exp);
    c.put(SEPARATOR);
    let at = c.at;
    let written = body::encode(chunk, &mut c.out[at..]);
    Ok(at + written)
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
        Header {
            sid: self.sid,
            mid: self.mid,
            seq,
            total: self.total,
            exp: self.exp,
        }
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
    use std::vec;

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
        let payload: vec::Vec<u8> = (0..10u8).collect();
        let parts: vec::Vec<_> = Chunks::new(sid, mid, 0, &payload, 4)
            .unwrap_or_else(|_| unreachable!())
            .collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0].1, &[0, 1, 2, 3]);
        assert_eq!(parts[2].1, &[8, 9]);
        assert_eq!((parts[2].0.seq(), parts[2].0.total()), (3, 3));
    }
}
