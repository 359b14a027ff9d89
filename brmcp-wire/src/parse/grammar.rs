//! The envelope grammar (WIRE.md §3), on nom combinators kept private to the parse
//! module: the envelope split, the encoder-form fast paths, and numbers and whitespace
//! as Go reads them. A file of its own, apart from the header checks in `parse` that
//! use it.

use nom::Parser;
use nom::bytes::complete::{tag, take_till};
use nom::character::complete::{digit0, one_of};
use nom::combinator::{all_consuming, recognize};
use nom::sequence::pair;

use crate::envelope::{Header, Language, Part};
use crate::error::ParseError;
use crate::id::{MessageId, SessionId, is_id_byte};
use crate::words::{digit_run, digit_run16, ten_digits, word_at};

type Res<'a, T> = nom::IResult<&'a [u8], T, nom::error::Error<&'a [u8]>>;

/// The header params and the body of an envelope.
pub(super) type Split<'a> = (&'a [u8], &'a [u8]);

/// Splits `--mcp[<params>]--<body>` into params and body.
///
/// `Ok(None)`: not an envelope at all (no `--mcp[` prefix).
pub(super) fn envelope(text: &[u8]) -> Result<Option<Split<'_>>, ParseError> {
    let prefix: Res<'_, &[u8]> = tag(&b"--mcp["[..]).parse(text);
    let Ok((rest, _)) = prefix else {
        return Ok(None);
    };
    // Params run to the first `]`, which must open the `]--` separator.
    let tail: Res<'_, (&[u8], &[u8])> =
        pair(take_till(|b| b == b']'), tag(&b"]--"[..])).parse(rest);
    match tail {
        Ok((body, (params, _))) => Ok(Some((params, body))),
        Err(_) => Err(ParseError::UnterminatedTag),
    }
}

/// A cursor for the encoder-form fast path.
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    #[inline(always)]
    fn literal(&mut self, lit: &[u8]) -> Option<()> {
        let end = self.at + lit.len();
        (self.text.get(self.at..end)? == lit).then(|| self.at = end)
    }

    /// Bytes up to `end` (consumed, excluded), at most `max` of them, all matching `ok`.
    #[inline(always)]
    fn until(&mut self, end: u8, max: usize, ok: fn(u8) -> bool) -> Option<&'a [u8]> {
        let start = self.at;
        let limit = self.text.len().min(start + max + 1);
        let mut i = start;
        while i < limit {
            let b = self.text[i];
            if b == end {
                self.at = i + 1;
                return (i > start).then(|| &self.text[start..i]);
            }
            if !ok(b) {
                return None;
            }
            i += 1;
        }
        None
    }

    #[inline(always)]
    fn id(&mut self) -> Option<&'a [u8]> {
        self.until(b',', crate::MAX_ID_LEN, is_id_byte)
    }

    /// A canonical number of one or two digits ended by `end`: a part number, as
    /// every valid one is at most [`MAX_PARTS`](crate::MAX_PARTS).
    #[inline(always)]
    fn small(&mut self, end: u8) -> Option<u16> {
        let digit = |at: usize| {
            let d = self.text.get(at)?.wrapping_sub(b'0');
            (d <= 9).then_some(u16::from(d))
        };
        let first = digit(self.at)?;
        let (value, next) = match digit(self.at + 1) {
            Some(second) if first != 0 => (first * 10 + second, self.at + 2),
            Some(_) => return None,
            None => (first, self.at + 1),
        };
        (self.text.get(next) == Some(&end)).then(|| {
            self.at = next + 1;
            value
        })
    }

    /// A canonical unsigned number (no sign, no leading zero) ended by `end`.
    #[inline(always)]
    fn number(&mut self, end: u8) -> Option<u64> {
        if let Some((value, n)) = self.text.get(self.at..).and_then(digit_run) {
            let first = self.text[self.at];
            let next = self.at + n;
            return (n > 0 && (n == 1 || first != b'0') && self.text.get(next) == Some(&end)).then(
                || {
                    self.at = next + 1;
                    value
                },
            );
        }
        let digits = self.until(end, 19, |b| b.is_ascii_digit())?;
        if digits.len() > 1 && digits[0] == b'0' {
            return None;
        }
        Some(
            digits
                .iter()
                .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')),
        )
    }
}

/// The encoder's exact form, `--mcp[v=1,sid=S,mid=M,seq=N/T,exp=E]--BODY`, with
/// canonical numbers and a valid seq, as a part of the given mode; `None` for
/// anything else. Every text it accepts parses to the same header in both modes.
///
/// Inlined into the caller, so the part is built in the caller's return slot: built
/// on a stack of its own and copied out, its stores and the wider loads copying it
/// stall store forwarding, which cost more than the scan itself.
#[inline(always)]
pub(super) fn encoder_form(text: &[u8], canonical: bool) -> Option<Part<'_>> {
    let mut c = Cursor { text, at: 0 };
    c.literal(b"--mcp[v=1,sid=")?;
    let sid = SessionId::from_checked(c.id()?);
    c.literal(b"mid=")?;
    let mid = MessageId::from_checked(c.id()?);
    c.literal(b"seq=")?;
    let seq = c.small(b'/')?;
    let total = c.small(b',')?;
    c.literal(b"exp=")?;
    let negative = c.literal(b"-").is_some();
    let magnitude = c.number(b']')?;
    c.literal(b"--")?;
    let body = text.get(c.at..).filter(|b| !b.is_empty())?;
    let exp = signed(negative, magnitude)?;
    let header = Header::new(sid, mid, seq, total, exp).ok()?;
    Some(Part {
        header,
        body,
        canonical: Language::of(canonical),
    })
}

/// The deadline from its sign and magnitude, in the encoder's form: "-0" is not.
#[inline(always)]
fn signed(negative: bool, magnitude: u64) -> Option<i64> {
    if negative {
        0i64.checked_sub_unsigned(magnitude).filter(|&e| e != 0)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// How much of the text the usual form reads: the deadline starts at 67 at the latest
/// (after `seq=64/64,exp=-`) and is read as two words, to 83, so 88 covers it with
/// room. Deadlines of 16 digits or more are left to the cursor.
const USUAL_HEAD: usize = 88;

/// Where the seq field's value starts in the usual form.
const USUAL_SEQ: usize = 56;

/// Where a one-part message's deadline starts in the usual form (after `1/1,exp=`).
const ONE_EXP: usize = USUAL_SEQ + 8;

/// Eight bytes of literal text as the little-endian word [`word_at`] reads.
const fn lit(bytes: &[u8; 8]) -> u64 {
    u64::from_le_bytes(*bytes)
}

/// A one-part message's part numbers and the deadline's key, at [`USUAL_SEQ`].
const ONE_PART: u64 = lit(b"1/1,exp=");

/// The word of `head` at `at`; every word the usual form reads is inside the head.
#[inline(always)]
fn head_word(head: &[u8; USUAL_HEAD], at: usize) -> u64 {
    word_at(head, at).unwrap_or(0)
}

/// The encoder's form with both ids of 16 hex digits, the form of every id this crate
/// draws (`SessionId::random`, `MessageId::random`), in a text of at least
/// [`USUAL_HEAD`] bytes that needs no trimming: `--mcp[v=1,sid=<16 hex>,mid=<16 hex>,
/// seq=` at fixed places, the literals a word at a time and the 32 id digits in one
/// pass without a branch (which the compiler vectorizes); then the numbers, a
/// one-part message's `1/1,exp=` as one word and a ten-digit deadline as a word and a
/// pair. `None` for anything else, which the byte-wise cursor then reads.
///
/// Kept to few instructions: the decoder that follows runs at several per cycle, so
/// every instruction here adds to the call's time. [`parse_with`](super::parse_with)
/// reads it as [`usual_fields`] and builds the part where it returns it.
#[cfg(any(fuzzing, test))]
pub(super) fn usual(text: &[u8], canonical: bool) -> Option<Part<'_>> {
    let fields = usual_fields(text)?;
    let body = text.get(fields.body_at..)?;
    Some(fields.part(body, canonical))
}

/// The length of both ids in the usual form.
const USUAL_ID_LEN: u16 = 16;

/// The fields of the usual form, as values. A part built from them where it is
/// returned gets its ids as four 16-byte stores; one built inside the inlined reader
/// (or its ids assembled as arrays) went through a temporary on the stack and was
/// copied, each copy waiting on the stores before it.
pub(super) struct Usual {
    /// The session id's 16 digits, little-endian.
    sid: u128,
    /// The message id's 16 digits, little-endian.
    mid: u128,
    seq: u16,
    total: u16,
    exp: i64,
    /// Where the body starts.
    pub(super) body_at: usize,
}

impl Usual {
    /// The part of these fields and `body`.
    #[inline(always)]
    pub(super) const fn part(self, body: &[u8], canonical: bool) -> Part<'_> {
        // Every check of `Header::new` is made by `usual_fields`.
        Part {
            header: Header {
                sid: SessionId::from_sixteen(self.sid),
                mid: MessageId::from_sixteen(self.mid),
                exp: self.exp,
                seq: self.seq,
                total: self.total,
                id_lens: [USUAL_ID_LEN; 2],
            },
            body,
            canonical: Language::of(canonical),
        }
    }
}

/// The fields of the usual form (see `usual`); `None` for any other text.
#[inline(always)]
pub(super) fn usual_fields(text: &[u8]) -> Option<Usual> {
    let head: &[u8; USUAL_HEAD] = text.first_chunk()?;
    // Starting with `-` and ending in a printable ASCII byte: nothing to trim.
    if !text.last().is_some_and(u8::is_ascii_graphic) {
        return None;
    }
    let w = |at: usize| head_word(head, at);
    /// The top five bytes of a word: the literal after the last three bytes of an id.
    const TOP5: u64 = !0 << 24;
    let fixed = (w(0) ^ lit(b"--mcp[v="))
        | (w(6) ^ lit(b"v=1,sid="))
        | ((w(27) ^ lit(b"\0\0\0,mid=")) & TOP5)
        | ((w(48) ^ lit(b"\0\0\0,seq=")) & TOP5);
    let (sid_bytes, mid_bytes): (&[u8; 16], &[u8; 16]) =
        (head[14..30].try_into().ok()?, head[35..51].try_into().ok()?);
    let not_hex = sid_bytes
        .iter()
        .zip(mid_bytes)
        .fold(false, |bad, (&s, &m)| bad | !is_id_byte(s) | !is_id_byte(m));
    if fixed != 0 || not_hex {
        return None;
    }
    // Most of all: a one-part message with a ten-digit deadline, every place fixed.
    let (seq, total, exp, body_at) = if w(USUAL_SEQ) == ONE_PART
        && head[ONE_EXP] != b'0'
        && let Some(exp) = ten_digits(w(ONE_EXP), w(ONE_EXP + 8))
    {
        (1, 1, i64::try_from(exp).ok()?, ONE_EXP + 13)
    } else {
        numbers(head)?
    };
    Some(Usual {
        sid: u128::from_le_bytes(*sid_bytes),
        mid: u128::from_le_bytes(*mid_bytes),
        seq,
        total,
        exp,
        body_at,
    })
}

/// The usual form's `N/T,exp=E]--` at [`USUAL_SEQ`] for any part and deadline: the
/// part number, the part count, the deadline and where the body starts.
#[inline(always)]
fn numbers(head: &[u8; USUAL_HEAD]) -> Option<(u16, u16, i64, usize)> {
    let w = |at: usize| head_word(head, at);
    // `N/T,exp=`: one or two digits each, no leading zero; a one-part message's
    // `1/1,exp=` is one word, and needs no range check.
    let (seq, total, exp_at) = if w(USUAL_SEQ) == ONE_PART {
        (1, 1, USUAL_SEQ + 8)
    } else {
        let (seq, total, at) = seq_total(head)?;
        if seq > total || total > crate::MAX_PARTS {
            return None;
        }
        (seq, total, at)
    };
    let negative = head[exp_at] == b'-';
    let digits = exp_at + usize::from(negative);
    let (w0, w1) = (w(digits), w(digits + 8));
    // The deadline's digits run to the `]--`, which `ten_digits` checks itself.
    let (magnitude, close) = match ten_digits(w0, w1) {
        Some(value) => (value, digits + 10),
        None => {
            let (value, n) = digit_run16(w0, w1)?;
            let close = digits + n;
            if n == 0 || head.get(close..close + 3) != Some(b"]--") {
                return None;
            }
            (value, close)
        }
    };
    // No leading zero, but for the deadline `0` itself.
    if close - digits > 1 && head[digits] == b'0' {
        return None;
    }
    Some((seq, total, signed(negative, magnitude)?, close + 3))
}

/// `N/T,exp=` at [`USUAL_SEQ`]: the part number, the part count and where the
/// deadline starts.
#[inline(always)]
fn seq_total(head: &[u8; USUAL_HEAD]) -> Option<(u16, u16, usize)> {
    let digit = |at: usize| head.get(at).map_or(10, |b| b.wrapping_sub(b'0'));
    let small = |at: usize, end: u8| {
        let (first, second) = (digit(at), digit(at + 1));
        let (value, next) = if second <= 9 {
            (u16::from(first) * 10 + u16::from(second), at + 2)
        } else {
            (u16::from(first), at + 1)
        };
        ((1..=9).contains(&first) && head.get(next) == Some(&end)).then_some((value, next + 1))
    };
    let (seq, at) = small(USUAL_SEQ, b'/')?;
    let (total, at) = small(at, b',')?;
    (head.get(at..at + 4) == Some(b"exp=")).then_some((seq, total, at + 4))
}

/// A decimal integer as Go's `strconv.ParseInt(s, 10, 64)`: an optional sign, one or
/// more ASCII digits (leading zeros allowed), within `i64`.
pub(super) fn decimal(value: &[u8]) -> Option<i64> {
    // Hand-rolled: this runs three to four times per part on the hot path.
    let (negative, digits) = match value {
        [b'-', rest @ ..] => (true, rest),
        [b'+', rest @ ..] => (false, rest),
        _ => (false, value),
    };
    if digits.is_empty() {
        return None;
    }
    let mut magnitude: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        magnitude = magnitude
            .checked_mul(10)?
            .checked_add(u64::from(d - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// The encoder's form: `0`, or a non-zero digit then digits; `-` allowed before a
/// non-zero magnitude when `signed`.
pub(super) fn is_canonical_decimal(value: &[u8], signed: bool) -> bool {
    let body = if signed {
        value
            .strip_prefix(b"-")
            .filter(|rest| rest != b"0")
            .unwrap_or(value)
    } else {
        value
    };
    let parsed: Res<'_, &[u8]> = all_consuming(nom::branch::alt((
        tag(&b"0"[..]),
        recognize(pair(one_of("123456789"), digit0)),
    )))
    .parse(body);
    parsed.is_ok()
}

/// Strips leading and trailing Unicode `White_Space`, as Go's `strings.TrimSpace`.
pub(super) fn trim_space(mut text: &[u8]) -> &[u8] {
    loop {
        let n = match text {
            [0x09..=0x0d | 0x20, ..] => 1,
            [0xc2, 0x85 | 0xa0, ..] => 2,
            [0xe1, 0x9a, 0x80, ..]
            | [0xe2, 0x80, 0x80..=0x8a | 0xa8 | 0xa9 | 0xaf, ..]
            | [0xe2, 0x81, 0x9f, ..]
            | [0xe3, 0x80, 0x80, ..] => 3,
            _ => break,
        };
        text = &text[n..];
    }
    loop {
        let n = match text {
            [.., 0x09..=0x0d | 0x20] => 1,
            [.., 0xc2, 0x85 | 0xa0] => 2,
            [.., 0xe1, 0x9a, 0x80]
            | [.., 0xe2, 0x80, 0x80..=0x8a | 0xa8 | 0xa9 | 0xaf]
            | [.., 0xe2, 0x81, 0x9f]
            | [.., 0xe3, 0x80, 0x80] => 3,
            _ => break,
        };
        text = &text[..text.len() - n];
    }
    text
}

#[cfg(test)]
mod tests;
