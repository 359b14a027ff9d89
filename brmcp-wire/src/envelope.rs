//! The envelope's data model: a [`Header`] (all fields, `Copy`) and a [`Part`] (a header
//! plus the undecoded body, borrowed from the PM text).

use crate::body;
use crate::error::{BodyError, EncodeError};
use crate::id::{MessageId, SessionId};
use crate::limits::{MAX_PARTS, VERSION};
use crate::time::{UnixTime, is_expired};

/// Every header field of one part.
///
/// Once constructed, `1 <= seq <= total <= MAX_PARTS` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Header {
    pub(crate) sid: SessionId,
    pub(crate) mid: MessageId,
    pub(crate) seq: u16,
    pub(crate) total: u16,
    pub(crate) exp: i64,
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
        Ok(Self {
            sid,
            mid,
            seq,
            total,
            exp,
        })
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part<'a> {
    pub(crate) header: Header,
    pub(crate) body: &'a [u8],
    pub(crate) canonical: bool,
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
        body::decode(self.body, out, self.canonical)
    }
}
