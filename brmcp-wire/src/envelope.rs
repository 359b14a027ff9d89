//! The envelope's data model: a [`Header`] (all fields, `Copy`) and a [`Part`] (a header
//! plus the undecoded body, borrowed from the PM text).

use core::fmt;
use core::hash::{Hash, Hasher};

use crate::body;
use crate::error::{BodyError, EncodeError};
use crate::id::{MessageId, SessionId};
use crate::limits::{MAX_PARTS, VERSION};
use crate::time::{UnixTime, is_expired};

/// Every header field of one part.
///
/// Once constructed, `1 <= seq <= total <= MAX_PARTS` holds.
//
// Laid out for copies of a part just parsed (`repr(C)`): the ids first (64 bytes), then
// 16 bytes of numbers with no padding, every field as wide as the load a copy makes of
// it. A copy that reads a padding byte next to a field just stored, or one wide load
// over several narrower stores, waits for those stores to retire: a part moved out of
// `parse`'s result then costs more than the parse.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Header {
    pub(crate) sid: SessionId,
    pub(crate) mid: MessageId,
    pub(crate) exp: i64,
    pub(crate) seq: u16,
    pub(crate) total: u16,
    /// `sid.len()` and `mid.len()`, which the encoder reads several times; `u16` each,
    /// so the numbers fill their 16 bytes.
    pub(crate) id_lens: [u16; 2],
}

// Without `id_lens`, which the ids determine, and in the fields' documented order.
impl fmt::Debug for Header {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Header")
            .field("sid", &self.sid)
            .field("mid", &self.mid)
            .field("seq", &self.seq)
            .field("total", &self.total)
            .field("exp", &self.exp)
            .finish()
    }
}

impl Hash for Header {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (self.sid, self.mid, self.seq, self.total, self.exp).hash(state);
    }
}

impl Header {
    /// A header for part `seq` of `total` of message `mid` in session `sid`, with deadline
    /// `exp` in unix seconds (0 or below: none).
    ///
    /// # Errors
    /// [`EncodeError::BadSeq`] unless `1 <= seq <= total <= MAX_PARTS`.
    pub const fn new(
        sid: SessionId,
        mid: MessageId,
        seq: u16,
        total: u16,
        exp: i64,
    ) -> Result<Self, EncodeError> {
        if seq < 1 || seq > total || total > MAX_PARTS {
            return Err(EncodeError::BadSeq);
        }
        Ok(Self::checked(sid, mid, seq, total, exp))
    }

    /// A header whose numbers the caller has checked as [`new`](Self::new) does.
    #[inline(always)]
    pub(crate) const fn checked(
        sid: SessionId,
        mid: MessageId,
        seq: u16,
        total: u16,
        exp: i64,
    ) -> Self {
        #[allow(clippy::cast_possible_truncation)] // at most MAX_ID_LEN
        let id_lens = [sid.len() as u16, mid.len() as u16];
        Self {
            sid,
            mid,
            exp,
            seq,
            total,
            id_lens,
        }
    }

    /// `sid.len()`, kept.
    #[inline(always)]
    pub(crate) const fn sid_len(&self) -> usize {
        self.id_lens[0] as usize
    }

    /// `mid.len()`, kept.
    #[inline(always)]
    pub(crate) const fn mid_len(&self) -> usize {
        self.id_lens[1] as usize
    }

    /// The envelope version, always [`VERSION`] for a header this crate holds.
    pub const fn version(&self) -> u32 {
        VERSION
    }

    /// The session id.
    pub const fn sid(&self) -> &SessionId {
        &self.sid
    }

    /// The message id.
    pub const fn mid(&self) -> &MessageId {
        &self.mid
    }

    /// This part's number, from 1.
    pub const fn seq(&self) -> u16 {
        self.seq
    }

    /// How many parts the message has.
    pub const fn total(&self) -> u16 {
        self.total
    }

    /// The deadline as sent, in unix seconds; 0 or below means none.
    pub const fn exp(&self) -> i64 {
        self.exp
    }

    /// The deadline, if the part has one.
    pub const fn deadline(&self) -> Option<UnixTime> {
        if self.exp > 0 {
            Some(UnixTime(self.exp))
        } else {
            None
        }
    }

    /// Whether the part is expired at `now` (strictly after its deadline second).
    pub const fn is_expired(&self, now: UnixTime) -> bool {
        is_expired(self.exp, now)
    }
}

/// One parsed part: its header and its base64 body, not yet decoded.
///
/// Produced by [`parse`](crate::parse); the body is borrowed from the PM text.
//
// Laid out as `Header` is, for the same reason: no padding, the mode a word wide.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct Part<'a> {
    pub(crate) header: Header,
    pub(crate) body: &'a [u8],
    pub(crate) canonical: Language,
}

impl fmt::Debug for Part<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Part")
            .field("header", &self.header)
            .field("body", &self.body)
            .field("canonical", &self.canonical.is_canonical())
            .finish()
    }
}

/// Which mode parsed a part, a word wide: a part ends with it, and a copy of the part
/// reads that word whole, which waits unless one store of the same width wrote it.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum Language {
    /// [`Mode::Compatible`](crate::Mode::Compatible).
    Compatible = 0,
    /// [`Mode::Canonical`](crate::Mode::Canonical).
    Canonical = 1,
}

impl Language {
    /// The language of the canonical mode or not.
    #[inline(always)]
    pub(crate) const fn of(canonical: bool) -> Self {
        if canonical {
            Self::Canonical
        } else {
            Self::Compatible
        }
    }

    /// Whether this is the canonical mode's language.
    #[inline(always)]
    pub(crate) const fn is_canonical(self) -> bool {
        matches!(self, Self::Canonical)
    }
}

impl<'a> Part<'a> {
    /// The header.
    pub const fn header(&self) -> &Header {
        &self.header
    }

    /// The envelope version (always [`VERSION`]).
    pub const fn version(&self) -> u32 {
        VERSION
    }

    /// The session id.
    pub const fn sid(&self) -> &SessionId {
        &self.header.sid
    }

    /// The message id.
    pub const fn mid(&self) -> &MessageId {
        &self.header.mid
    }

    /// This part's number, from 1.
    pub const fn seq(&self) -> u16 {
        self.header.seq
    }

    /// How many parts the message has.
    pub const fn total(&self) -> u16 {
        self.header.total
    }

    /// The deadline as sent, in unix seconds; 0 or below means none.
    pub const fn exp(&self) -> i64 {
        self.header.exp
    }

    /// The undecoded base64 body, as it appears in the PM (whitespace included).
    pub const fn body(&self) -> &'a [u8] {
        self.body
    }

    /// A buffer size that always holds the decoded body.
    pub fn decoded_len_max(&self) -> usize {
        body::decoded_len_max(self.body)
    }

    /// The exact decoded length of a valid body (symbols / 4 * 3 less padding).
    ///
    /// Scans the body once; prefer [`decoded_len_max`](Self::decoded_len_max) for sizing
    /// buffers on hot paths.
    pub fn decoded_len(&self) -> usize {
        body::decoded_len_exact(self.body)
    }

    /// Decodes the body into `out` and returns the number of bytes written.
    ///
    /// Skips the ASCII whitespace WIRE.md §3 allows (compatible mode only). `out` may be
    /// exactly as long as the decoded chunk; [`decoded_len_max`](Self::decoded_len_max)
    /// always suffices.
    ///
    /// # Errors
    /// [`BodyError`] when the body is not valid padded base64 (with the offset of the
    /// first bad byte), or when `out` is too small.
    #[inline]
    pub fn decode_body(&self, out: &mut [u8]) -> Result<usize, BodyError> {
        body::decode(self.body, out, self.canonical.is_canonical())
    }
}
