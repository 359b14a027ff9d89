//! One small `Copy` error enum per operation. Texts are short, lowercase, unpunctuated.

use core::fmt;

/// A header field of the envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// `v`, the envelope version.
    Version,
    /// `sid`, the session id.
    Sid,
    /// `mid`, the message id.
    Mid,
    /// `seq`, the part number and part count.
    Seq,
    /// `exp`, the deadline.
    Exp,
}

impl Field {
    /// The field's key as it appears on the wire.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Version => "v",
            Self::Sid => "sid",
            Self::Mid => "mid",
            Self::Seq => "seq",
            Self::Exp => "exp",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

/// Why a base64 body was not decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BodyError {
    /// The body is empty: a part always carries at least one byte.
    Empty,
    /// The body is not padded standard base64; `offset` is the first byte in error,
    /// counted from the start of the body text.
    Invalid {
        /// Offset of the offending byte in the body text.
        offset: usize,
    },
    /// Canonical mode: whitespace inside the body.
    Whitespace {
        /// Offset of the whitespace byte in the body text.
        offset: usize,
    },
    /// Canonical mode: the last symbol before the padding has non-zero unused bits.
    TrailingBits {
        /// Offset of that symbol in the body text.
        offset: usize,
    },
    /// The output buffer cannot hold the decoded chunk.
    BufferTooSmall {
        /// Bytes the decoded chunk needs.
        required: usize,
    },
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty body"),
            Self::Invalid { offset } => write!(f, "bad base64 body at byte {offset}"),
            Self::Whitespace { offset } => write!(f, "whitespace in body at byte {offset}"),
            Self::TrailingBits { offset } => {
                write!(f, "non-canonical base64 trailing bits at byte {offset}")
            }
            Self::BufferTooSmall { required } => {
                write!(f, "buffer too small: {required} bytes needed")
            }
        }
    }
}

impl core::error::Error for BodyError {}

/// Why a private message was not accepted as a brmcp part.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParseError {
    /// The text does not start with `--mcp[`: ordinary chat, not ours.
    NotEnvelope,
    /// A well-formed envelope of a version this crate does not speak.
    UnsupportedVersion(i64),
    /// Canonical mode: whitespace before or after the envelope.
    SurroundingWhitespace,
    /// `--mcp[` is not closed by `]--`.
    UnterminatedTag,
    /// A header item has no `=`; `index` counts items from 0.
    MissingEquals {
        /// Position of the item in the header.
        index: usize,
    },
    /// A required field is absent.
    MissingField(Field),
    /// A field's value does not parse (numbers of `v`, `seq`, `exp`).
    BadNumber(Field),
    /// `sid` or `mid` is not 1 to 32 lowercase hex characters.
    BadId(Field),
    /// `seq` is not `n/total` with `1 <= n <= total <= 64`.
    BadSeq,
    /// Canonical mode: a field appears twice.
    DuplicateField(Field),
    /// Canonical mode: a key this version does not define.
    UnknownField,
    /// Canonical mode: fields out of the order `v,sid,mid,seq,exp`.
    FieldOrder(Field),
    /// Canonical mode: a number with a sign, leading zeros or `-0`.
    NonCanonicalNumber(Field),
    /// The base64 body is empty or invalid.
    Body(BodyError),
}

impl ParseError {
    /// `true` for traffic that is simply not ours and must be ignored silently
    /// (ordinary chat, or an envelope of another version).
    pub const fn is_foreign(&self) -> bool {
        matches!(self, Self::NotEnvelope | Self::UnsupportedVersion(_))
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotEnvelope => f.write_str("not an envelope"),
            Self::UnsupportedVersion(v) => write!(f, "unsupported version {v}"),
            Self::SurroundingWhitespace => f.write_str("whitespace around envelope"),
            Self::UnterminatedTag => f.write_str("unterminated tag"),
            Self::MissingEquals { index } => write!(f, "header item {index} has no '='"),
            Self::MissingField(field) => write!(f, "missing {field}"),
            Self::BadNumber(field) => write!(f, "bad number in {field}"),
            Self::BadId(field) => write!(f, "bad {field}"),
            Self::BadSeq => f.write_str("bad seq"),
            Self::DuplicateField(field) => write!(f, "duplicate {field}"),
            Self::UnknownField => f.write_str("unknown field"),
            Self::FieldOrder(field) => write!(f, "{field} out of order"),
            Self::NonCanonicalNumber(field) => write!(f, "non-canonical number in {field}"),
            Self::Body(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for ParseError {}

impl From<BodyError> for ParseError {
    fn from(e: BodyError) -> Self {
        Self::Body(e)
    }
}

/// Why a payload or part was not encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EncodeError {
    /// The output buffer is too small; `required` bytes are needed.
    BufferTooSmall {
        /// Exact size of the encoded part.
        required: usize,
    },
    /// There is nothing to send: a part carries at least one byte.
    EmptyPayload,
    /// A chunk length of zero splits nothing.
    ZeroChunkLen,
    /// The payload needs `total` parts, more than [`MAX_PARTS`](crate::MAX_PARTS).
    TooManyParts {
        /// Parts the payload would need.
        total: usize,
    },
    /// The chunk length makes a PM of `len` bytes, over [`MAX_PM_LEN`](crate::MAX_PM_LEN).
    PmTooLarge {
        /// Length of the longest PM.
        len: usize,
    },
    /// `seq` and `total` are not `1 <= seq <= total <= 64`.
    BadSeq,
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BufferTooSmall { required } => {
                write!(f, "buffer too small: {required} bytes needed")
            }
            Self::EmptyPayload => f.write_str("empty payload"),
            Self::ZeroChunkLen => f.write_str("chunk length is zero"),
            Self::TooManyParts { total } => write!(f, "message needs {total} parts, over 64"),
            Self::PmTooLarge { len } => write!(f, "part of {len} bytes exceeds the pm limit"),
            Self::BadSeq => f.write_str("bad seq"),
        }
    }
}

impl core::error::Error for EncodeError {}

/// Why a part was not taken into reassembly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AssembleError {
    /// The part's own deadline has passed; nothing was stored.
    Expired,
    /// The peer already has [`Limits::max_pending_per_peer`](crate::Limits) partial messages.
    PeerPending,
    /// The message would take the peer over [`Limits::max_peer_bytes`](crate::Limits).
    PeerBytes,
    /// The message would take the reserved bytes over
    /// [`Limits::max_total_bytes`](crate::Limits) or the arena.
    TotalBytes,
    /// Every slot holds a partial message.
    SlotsFull,
    /// The message exceeds [`Limits::max_message_bytes`](crate::Limits) (or, for a
    /// single-part message, the scratch buffer).
    MessageTooLarge,
    /// The part's `total` differs from its message's.
    InconsistentTotal,
    /// The part's length contradicts the message's: all parts but the last are equally
    /// long, and the last is not longer.
    Geometry,
    /// The part's body is not valid base64.
    Body(BodyError),
}

impl AssembleError {
    /// `true` when the error comes from a bound a busy but honest peer can hit, rather
    /// than from a malformed or stale part.
    pub const fn is_bound(&self) -> bool {
        matches!(
            self,
            Self::PeerPending
                | Self::PeerBytes
                | Self::TotalBytes
                | Self::SlotsFull
                | Self::MessageTooLarge
        )
    }
}

impl AssembleError {
    /// `true` when the part itself is bad (a broken body, a part count or length that
    /// contradicts its message): the sender is faulty or hostile.
    pub const fn is_malformed(&self) -> bool {
        matches!(
            self,
            Self::Body(_) | Self::Geometry | Self::InconsistentTotal
        )
    }
}

impl fmt::Display for AssembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Expired => f.write_str("part deadline passed"),
            Self::PeerPending => f.write_str("too many pending messages from peer"),
            Self::PeerBytes => f.write_str("peer byte budget exceeded"),
            Self::TotalBytes => f.write_str("reassembly storage full"),
            Self::SlotsFull => f.write_str("no free reassembly slot"),
            Self::MessageTooLarge => f.write_str("message exceeds size bound"),
            Self::InconsistentTotal => f.write_str("inconsistent part count"),
            Self::Geometry => f.write_str("part length contradicts message"),
            Self::Body(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl core::error::Error for AssembleError {}

impl From<BodyError> for AssembleError {
    fn from(e: BodyError) -> Self {
        Self::Body(e)
    }
}
