//! Status codes: every error of brmcp-wire, and the boundary's own, as one C enum with
//! static messages. The mapping from the Rust error enums lives here and nowhere else.

use core::ffi::{CStr, c_char};

use brmcp_wire::{AssembleError, BodyError, EncodeError, IdError, ParseError};

/// The result of every fallible function: `BRMCP_WIRE_STATUS_OK` (0) or why not.
///
/// `brmcp_wire_strerror` gives each a short static message. `BRMCP_WIRE_STATUS_NOT_ENVELOPE`
/// and `BRMCP_WIRE_STATUS_UNSUPPORTED_VERSION` mean "not ours" (ordinary chat, or another
/// version): drop those silently.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// A required pointer argument is null.
    NullPointer = 1,
    /// An argument is out of its range (a mode, a length over `isize::MAX`).
    InvalidArgument = 2,
    /// The output buffer is too small; the size out-parameter holds the bytes needed.
    BufferTooSmall = 3,
    /// The library could not allocate memory.
    OutOfMemory = 4,
    /// An internal fault was caught at the boundary (a bug; nothing is known to cause it).
    Internal = 5,

    /// Parse: the text is not an envelope (ordinary chat).
    NotEnvelope = 10,
    /// Parse: an envelope of a version this library does not speak.
    UnsupportedVersion = 11,
    /// Parse, canonical mode: whitespace around the envelope.
    SurroundingWhitespace = 12,
    /// Parse: `--mcp[` is not closed by `]--`.
    UnterminatedTag = 13,
    /// Parse: a header item has no `=`.
    MissingEquals = 14,
    /// Parse: a required field (`v`, `sid`, `mid` or `seq`) is absent.
    MissingField = 15,
    /// Parse: a number (`v`, `seq` or `exp`) does not parse.
    BadNumber = 16,
    /// Parse: `sid` or `mid` is not 1 to 32 lowercase hex characters.
    BadId = 17,
    /// Parse or encode: `seq` is not `n/total` with `1 <= n <= total <= 64`.
    BadSeq = 18,
    /// Parse, canonical mode: a field appears twice.
    DuplicateField = 19,
    /// Parse, canonical mode: a key this version does not define.
    UnknownField = 20,
    /// Parse, canonical mode: fields out of the order `v,sid,mid,seq,exp`.
    FieldOrder = 21,
    /// Parse, canonical mode: a number with a sign, leading zeros or `-0`.
    NonCanonicalNumber = 22,

    /// Body: empty (a part carries at least one byte).
    BodyEmpty = 30,
    /// Body: not padded standard base64.
    BodyInvalid = 31,
    /// Body, canonical mode: whitespace inside.
    BodyWhitespace = 32,
    /// Body, canonical mode: non-zero trailing bits.
    BodyTrailingBits = 33,

    /// Id: empty.
    IdEmpty = 40,
    /// Id: longer than 32 characters.
    IdTooLong = 41,
    /// Id: a byte that is not a lowercase hex digit.
    IdNotLowerHex = 42,

    /// Encode: empty payload or chunk.
    EmptyPayload = 50,
    /// Encode: a chunk length of zero.
    ZeroChunkLen = 51,
    /// Encode: the payload needs more than 64 parts.
    TooManyParts = 52,
    /// Encode: a part would exceed the 1 MiB PM limit.
    PmTooLarge = 53,

    /// Assemble: the part's own deadline has passed; nothing was stored.
    Expired = 60,
    /// Assemble: the peer already has its maximum of partial messages.
    PeerPending = 61,
    /// Assemble: the message would take the peer over its byte budget.
    PeerBytes = 62,
    /// Assemble: the reassembly storage is full.
    TotalBytes = 63,
    /// Assemble: every slot holds a partial message.
    SlotsFull = 64,
    /// Assemble: the message exceeds the size bound.
    MessageTooLarge = 65,
    /// Assemble: the part's count differs from its message's.
    InconsistentTotal = 66,
    /// Assemble: the part's length contradicts its message's.
    Geometry = 67,
}

/// The message of a code; `None` for a value that is no code.
const fn message(code: i32) -> Option<&'static CStr> {
    Some(match code {
        0 => c"ok",
        1 => c"null pointer",
        2 => c"invalid argument",
        3 => c"buffer too small",
        4 => c"out of memory",
        5 => c"internal error",
        10 => c"not an envelope",
        11 => c"unsupported version",
        12 => c"whitespace around envelope",
        13 => c"unterminated tag",
        14 => c"header item has no '='",
        15 => c"missing field",
        16 => c"bad number",
        17 => c"bad id",
        18 => c"bad seq",
        19 => c"duplicate field",
        20 => c"unknown field",
        21 => c"field out of order",
        22 => c"non-canonical number",
        30 => c"empty body",
        31 => c"bad base64 body",
        32 => c"whitespace in body",
        33 => c"non-canonical base64 trailing bits",
        40 => c"empty id",
        41 => c"id longer than 32 characters",
        42 => c"id not lowercase hex",
        50 => c"empty payload",
        51 => c"chunk length is zero",
        52 => c"message needs more than 64 parts",
        53 => c"part exceeds the pm limit",
        60 => c"part deadline passed",
        61 => c"too many pending messages from peer",
        62 => c"peer byte budget exceeded",
        63 => c"reassembly storage full",
        64 => c"no free reassembly slot",
        65 => c"message exceeds size bound",
        66 => c"inconsistent part count",
        67 => c"part length contradicts message",
        _ => return None,
    })
}

/// The static message of status `code`, NUL-terminated: never null, never to be freed.
/// A value that is no status gives `"unknown status"`.
#[unsafe(no_mangle)]
pub extern "C" fn brmcp_wire_strerror(code: i32) -> *const c_char {
    match message(code) {
        Some(m) => m.as_ptr(),
        None => c"unknown status".as_ptr(),
    }
}

/// Whether `code` means "not ours": ordinary chat or an envelope of another version,
/// to be ignored silently rather than reported.
#[unsafe(no_mangle)]
pub extern "C" fn brmcp_wire_is_foreign(code: i32) -> bool {
    code == Status::NotEnvelope as i32 || code == Status::UnsupportedVersion as i32
}

impl From<BodyError> for Status {
    fn from(e: BodyError) -> Self {
        match e {
            BodyError::Empty => Self::BodyEmpty,
            BodyError::Invalid { .. } => Self::BodyInvalid,
            BodyError::Whitespace { .. } => Self::BodyWhitespace,
            BodyError::TrailingBits { .. } => Self::BodyTrailingBits,
            BodyError::BufferTooSmall { .. } => Self::BufferTooSmall,
            _ => Self::Internal,
        }
    }
}

impl From<ParseError> for Status {
    fn from(e: ParseError) -> Self {
        match e {
            ParseError::NotEnvelope => Self::NotEnvelope,
            ParseError::UnsupportedVersion(_) => Self::UnsupportedVersion,
            ParseError::SurroundingWhitespace => Self::SurroundingWhitespace,
            ParseError::UnterminatedTag => Self::UnterminatedTag,
            ParseError::MissingEquals { .. } => Self::MissingEquals,
            ParseError::MissingField(_) => Self::MissingField,
            ParseError::BadNumber(_) => Self::BadNumber,
            ParseError::BadId(_) => Self::BadId,
            ParseError::BadSeq => Self::BadSeq,
            ParseError::DuplicateField(_) => Self::DuplicateField,
            ParseError::UnknownField => Self::UnknownField,
            ParseError::FieldOrder(_) => Self::FieldOrder,
            ParseError::NonCanonicalNumber(_) => Self::NonCanonicalNumber,
            ParseError::Body(e) => e.into(),
            _ => Self::Internal,
        }
    }
}

impl From<IdError> for Status {
    fn from(e: IdError) -> Self {
        match e {
            IdError::Empty => Self::IdEmpty,
            IdError::TooLong => Self::IdTooLong,
            IdError::NotLowerHex { .. } => Self::IdNotLowerHex,
            _ => Self::Internal,
        }
    }
}

impl From<EncodeError> for Status {
    fn from(e: EncodeError) -> Self {
        match e {
            EncodeError::BufferTooSmall { .. } => Self::BufferTooSmall,
            EncodeError::EmptyPayload => Self::EmptyPayload,
            EncodeError::ZeroChunkLen => Self::ZeroChunkLen,
            EncodeError::TooManyParts { .. } => Self::TooManyParts,
            EncodeError::PmTooLarge { .. } => Self::PmTooLarge,
            EncodeError::BadSeq => Self::BadSeq,
            _ => Self::Internal,
        }
    }
}

impl From<AssembleError> for Status {
    fn from(e: AssembleError) -> Self {
        match e {
            AssembleError::Expired => Self::Expired,
            AssembleError::PeerPending => Self::PeerPending,
            AssembleError::PeerBytes => Self::PeerBytes,
            AssembleError::TotalBytes => Self::TotalBytes,
            AssembleError::SlotsFull => Self::SlotsFull,
            AssembleError::MessageTooLarge => Self::MessageTooLarge,
            AssembleError::InconsistentTotal => Self::InconsistentTotal,
            AssembleError::Geometry => Self::Geometry,
            AssembleError::Body(e) => e.into(),
            _ => Self::Internal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code has its own message, and the messages are those of the Rust errors
    /// where the two name the same thing.
    #[test]
    fn every_code_has_a_distinct_message() {
        let mut seen = std::collections::HashSet::new();
        for code in 0..100 {
            if let Some(m) = message(code) {
                assert!(seen.insert(m), "message of {code} repeated");
            }
        }
        assert_eq!(seen.len(), 38);
        assert_eq!(
            message(Status::from(AssembleError::Expired) as i32).and_then(|m| m.to_str().ok()),
            Some(AssembleError::Expired.to_string().as_str())
        );
        assert_eq!(
            message(Status::from(ParseError::NotEnvelope) as i32).and_then(|m| m.to_str().ok()),
            Some("not an envelope")
        );
        // SAFETY: strerror returns a NUL-terminated static string.
        let unknown = unsafe { CStr::from_ptr(brmcp_wire_strerror(-7)) };
        assert_eq!(unknown.to_str().ok(), Some("unknown status"));
    }
}
