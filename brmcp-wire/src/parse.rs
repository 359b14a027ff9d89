//! Parsing a PM body into a [`Part`].
//!
//! Parsing reads the header and checks the body's length; it never copies. The base64
//! symbols themselves are checked when the body is decoded ([`Part::decode_body`]), so a
//! part is valid when both `parse` and `decode_body` succeed. This keeps the body to one
//! pass over its bytes.
//!
//! Two modes: [`Mode::Compatible`] accepts exactly what the Go implementation accepts
//! (WIRE.md §7); [`Mode::Canonical`] accepts only what the encoder emits.

use crate::envelope::{Header, Language, Part};
use crate::error::{BodyError, Field, ParseError};
use crate::id::{MessageId, SessionId};

/// Which language of envelopes the parser accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Mode {
    /// The Go implementation's language, quirks included (WIRE.md §7).
    #[default]
    Compatible,
    /// Only the encoder's form: no surrounding whitespace, fields `v,sid,mid,seq,exp` once
    /// each in that order, numbers without signs or leading zeros, canonical base64 with
    /// no whitespace (WIRE.md §7).
    Canonical,
}

/// Parses one PM body in [`Mode::Compatible`].
///
/// A caller that keeps the whole part can borrow it from the result (`match
/// &parse(text)`): moving it out copies about 100 bytes, which a decode that follows
/// then waits on.
///
/// # Errors
/// [`ParseError`] says why the text is not a part; [`ParseError::is_foreign`] separates
/// ordinary chat from malformed envelopes.
#[inline]
pub fn parse(text: &str) -> Result<Part<'_>, ParseError> {
    parse_with(text.as_bytes(), Mode::Compatible)
}

/// Parses one PM body given as bytes, in [`Mode::Compatible`].
///
/// # Errors
/// As [`parse`].
#[inline]
pub fn parse_bytes(bytes: &[u8]) -> Result<Part<'_>, ParseError> {
    parse_with(bytes, Mode::Compatible)
}

/// Parses one PM body in [`Mode::Canonical`].
///
/// # Errors
/// As [`parse`], plus the canonical-form refusals.
#[inline]
pub fn parse_canonical(text: &str) -> Result<Part<'_>, ParseError> {
    parse_with(text.as_bytes(), Mode::Canonical)
}

/// Parses one PM body in the given mode.
///
/// # Errors
/// As [`parse`].
#[inline(always)]
pub fn parse_with(bytes: &[u8], mode: Mode) -> Result<Part<'_>, ParseError> {
    let canonical = mode == Mode::Canonical;
    // Nearly every part is in the encoder's form with the ids this crate draws: read at
    // fixed places, inlined into the caller, and built from values right where it is
    // returned, so the caller gets it in place with each field one store (see `Header`).
    if let Some(fields) = grammar::usual_fields(bytes)
        && let Some(body) = bytes.get(fields.body_at..)
    {
        return Ok(fields.part(body, canonical));
    }
    other(bytes, canonical)
}

/// Every text but the usual form: the encoder's form read by a cursor, then the general
/// parser for anything else and every error. Out of line, so the inlined fast path stays
/// small.
#[inline(never)]
fn other(bytes: &[u8], canonical: bool) -> Result<Part<'_>, ParseError> {
    // Text that starts with `-` and ends in a printable ASCII byte has nothing to trim
    // (every other White_Space character ends in a byte of 0x80 or above).
    let trimmed = match bytes {
        [b'-', .., last] if last.is_ascii_graphic() => bytes,
        _ => grammar::trim_space(bytes),
    };
    if (!canonical || trimmed.len() == bytes.len())
        && let Some(part) = grammar::encoder_form(trimmed, canonical)
    {
        return Ok(part);
    }
    general(bytes, trimmed, canonical)
}

/// The full grammar: every form the mode accepts, and the precise reason for a refusal.
fn general<'a>(
    bytes: &'a [u8],
    trimmed: &'a [u8],
    canonical: bool,
) -> Result<Part<'a>, ParseError> {
    let Some((params, body)) = grammar::envelope(trimmed)? else {
        return Err(ParseError::NotEnvelope);
    };
    if canonical && trimmed.len() != bytes.len() {
        return Err(ParseError::SurroundingWhitespace);
    }
    let header = header(params, canonical)?;
    if body.is_empty() {
        return Err(ParseError::Body(BodyError::Empty));
    }
    Ok(Part {
        header,
        body,
        canonical: Language::of(canonical),
    })
}

/// Whether each fast path that accepts `bytes` gives what the general parser gives, in
/// both modes: the fuzz harness's check of the fast paths.
#[cfg(any(fuzzing, test))]
pub(crate) fn fast_paths_agree(bytes: &[u8]) -> bool {
    let trimmed = grammar::trim_space(bytes);
    [false, true].into_iter().all(|canonical| {
        let general = general(bytes, trimmed, canonical);
        let usual = grammar::usual(bytes, canonical).is_none_or(|p| general == Ok(p));
        let cursor = (canonical && trimmed.len() != bytes.len())
            || grammar::encoder_form(trimmed, canonical).is_none_or(|p| general == Ok(p));
        usual && cursor
    })
}

/// The header fields in the order the encoder writes them.
const CANONICAL_ORDER: [Field; 5] = [
    Field::Version,
    Field::Sid,
    Field::Mid,
    Field::Seq,
    Field::Exp,
];

fn header(params: &[u8], canonical: bool) -> Result<Header, ParseError> {
    let mut version = None;
    let mut sid = None;
    let mut mid = None;
    let mut seq = None;
    let mut exp = 0i64;
    let mut seen = 0u8;
    for (index, item) in params.split(|&b| b == b',').enumerate() {
        let Some(eq) = item.iter().position(|&b| b == b'=') else {
            return Err(ParseError::MissingEquals { index });
        };
        let (key, value) = (&item[..eq], &item[eq + 1..]);
        let field = match key {
            b"v" => Field::Version,
            b"sid" => Field::Sid,
            b"mid" => Field::Mid,
            b"seq" => Field::Seq,
            b"exp" => Field::Exp,
            // Unknown keys are ignored for forward compatibility (compatible mode).
            _ if canonical => return Err(ParseError::UnknownField),
            _ => continue,
        };
        if canonical {
            let bit = 1u8 << (field as u8);
            if seen & bit != 0 {
                return Err(ParseError::DuplicateField(field));
            }
            seen |= bit;
            if CANONICAL_ORDER.get(index) != Some(&field) {
                return Err(ParseError::FieldOrder(field));
            }
        }
        // Duplicates in compatible mode: each must be valid, the last one wins.
        match field {
            Field::Version => version = Some(number(value, field, canonical)?),
            Field::Sid => {
                sid = Some(SessionId::from_bytes(value).map_err(|_| ParseError::BadId(field))?);
            }
            Field::Mid => {
                mid = Some(MessageId::from_bytes(value).map_err(|_| ParseError::BadId(field))?);
            }
            Field::Seq => {
                let slash = value
                    .iter()
                    .position(|&b| b == b'/')
                    .ok_or(ParseError::BadSeq)?;
                let n = number(&value[..slash], field, canonical)?;
                let total = number(&value[slash + 1..], field, canonical)?;
                seq = Some((n, total));
            }
            Field::Exp => exp = number(value, field, canonical)?,
        }
    }
    let version = version.ok_or(ParseError::MissingField(Field::Version))?;
    if version != i64::from(crate::VERSION) {
        return Err(ParseError::UnsupportedVersion(version));
    }
    let sid = sid.ok_or(ParseError::MissingField(Field::Sid))?;
    let mid = mid.ok_or(ParseError::MissingField(Field::Mid))?;
    let (seq, total) = seq.ok_or(ParseError::MissingField(Field::Seq))?;
    if canonical && seen & (1 << (Field::Exp as u8)) == 0 {
        return Err(ParseError::MissingField(Field::Exp));
    }
    match (u16::try_from(seq), u16::try_from(total)) {
        (Ok(seq), Ok(total)) => {
            Header::new(sid, mid, seq, total, exp).map_err(|_| ParseError::BadSeq)
        }
        _ => Err(ParseError::BadSeq),
    }
}

fn number(value: &[u8], field: Field, canonical: bool) -> Result<i64, ParseError> {
    let n = grammar::decimal(value).ok_or(ParseError::BadNumber(field))?;
    if canonical && !grammar::is_canonical_decimal(value, field == Field::Exp) {
        return Err(ParseError::NonCanonicalNumber(field));
    }
    Ok(n)
}

mod grammar;
