//! Eight bytes at a time: checks and decimal conversions on little-endian `u64` words
//! (SWAR), for the header's fast paths in [`parse`](crate::parse) and
//! [`encode_part`](crate::encode_part).
//!
//! Portable and free of `unsafe`: `core::arch`'s vector intrinsics need `unsafe` (or a
//! `#[target_feature]` caller) even where the target has them, which `forbid(unsafe_code)`
//! rules out. Every function is branch-free per byte; a word's byte `i` is the text's
//! byte `at + i`.

/// One in every byte.
const ONES: u64 = u64::from_ne_bytes([1; 8]);
/// The high bit of every byte.
const HIGH: u64 = ONES * 0x80;

/// The 8 bytes of `bytes` at `at` as a little-endian word, if there are 8.
#[inline(always)]
pub(crate) fn word_at(bytes: &[u8], at: usize) -> Option<u64> {
    let w: [u8; 8] = bytes.get(at..at.checked_add(8)?)?.try_into().ok()?;
    Some(u64::from_le_bytes(w))
}

/// The high bit of each byte of `w` that is at least `n`, for words whose bytes are all
/// below 0x80: `byte + (0x80 - n)` then carries into no other byte.
#[inline(always)]
const fn at_least(w: u64, n: u8) -> u64 {
    w.wrapping_add(ONES * (0x80 - n as u64)) & HIGH
}

/// The high bit of each byte of `w` that is an ASCII digit.
#[inline(always)]
pub(crate) const fn digit_bytes(w: u64) -> u64 {
    let low = w & !HIGH;
    at_least(low, b'0') & !at_least(low, b'9' + 1) & !w
}

/// How many ASCII digits start the word `w` (0 to 8).
#[inline(always)]
pub(crate) const fn digits_in(w: u64) -> usize {
    ((digit_bytes(w) ^ HIGH).trailing_zeros() / 8) as usize
}

/// The value of the first `k` (at most 8) bytes of `w`, all ASCII digits.
#[inline(always)]
pub(crate) const fn word_value(w: u64, k: usize) -> u64 {
    if k == 0 {
        return 0;
    }
    // The k digits to the top of the word (the first digit stays most significant),
    // zero digits below them.
    octet_value(w.wrapping_sub(ONES * b'0' as u64) << (8 * (8 - k)))
}

/// The value of the eight decimal digits of `d`, given as digit values (0 to 9) with the
/// most significant in byte 0: pairs, quads, then the octet.
#[inline(always)]
const fn octet_value(d: u64) -> u64 {
    let d = (d.wrapping_mul(10) + (d >> 8)) & 0x00ff_00ff_00ff_00ff;
    let d = (d.wrapping_mul(100) + (d >> 16)) & 0x0000_ffff_0000_ffff;
    (d.wrapping_mul(10_000) + (d >> 32)) & 0xffff_ffff
}

/// Powers of ten up to the eighth.
pub(crate) const POW10: [u64; 9] = [
    1,
    10,
    100,
    1_000,
    10_000,
    100_000,
    1_000_000,
    10_000_000,
    100_000_000,
];

/// The value and length of the run of ASCII digits that starts `bytes`, read eight at a
/// time; `None` when a word cannot be read (too near the end) or the run is longer than
/// 19 digits. The caller reads those byte by byte.
///
/// The first two words are loaded and converted independently of each other, so a
/// deadline's ten digits cost one conversion's latency, not two in a row.
#[inline(always)]
pub(crate) fn digit_run(bytes: &[u8]) -> Option<(u64, usize)> {
    let w0 = word_at(bytes, 0)?;
    let k0 = digits_in(w0);
    let v0 = word_value(w0, k0);
    if k0 < 8 {
        return Some((v0, k0));
    }
    let w1 = word_at(bytes, 8)?;
    let k1 = digits_in(w1);
    let mut value = v0 * POW10[k1] + word_value(w1, k1);
    let mut n = 8 + k1;
    if k1 == 8 {
        // More than 16 digits: the rest a word at a time, in a row.
        loop {
            let w = word_at(bytes, n)?;
            let k = digits_in(w);
            value = value.checked_mul(POW10[k])?.checked_add(word_value(w, k))?;
            n += k;
            if n > 19 {
                return None;
            }
            if k < 8 {
                break;
            }
        }
    }
    Some((value, n))
}

/// The value and length of the run of ASCII digits that starts the sixteen bytes of
/// the words `w0` then `w1`; `None` for a run of 16 (it may go on, which the caller
/// reads otherwise). No loop and no overflow checks: sixteen digits fit in a `u64`.
#[inline(always)]
pub(crate) const fn digit_run16(w0: u64, w1: u64) -> Option<(u64, usize)> {
    let k0 = digits_in(w0);
    if k0 < 8 {
        return Some((word_value(w0, k0), k0));
    }
    let k1 = digits_in(w1);
    if k1 == 8 {
        return None;
    }
    Some((word_value(w0, 8) * POW10[k1] + word_value(w1, k1), 8 + k1))
}

/// The value of a deadline of exactly ten digits followed by `]--` in the words `w0`
/// and `w1` (every second from 2001 to 2286 has ten digits): eight digits, then two and
/// the separator, checked without counting the run. `None` for any other shape.
#[inline(always)]
pub(crate) const fn ten_digits(w0: u64, w1: u64) -> Option<u64> {
    /// The separator in bytes 2 to 4 of the second word.
    const CLOSE: u64 = u64::from_le_bytes(*b"\0\0]--\0\0\0");
    const CLOSE_MASK: u64 = 0xff_ffff << 16;
    /// The pair's two bytes.
    const PAIR: u64 = 0xffff;
    // Digit values. The first byte that is no digit shows: below `0` it borrows and
    // sets its high bit, above `9` adding 0x76 sets it (the bytes before it are digits,
    // so nothing carries or borrows into it).
    let d0 = w0.wrapping_sub(ONES * b'0' as u64);
    let d1 = w1.wrapping_sub(PAIR & (ONES * b'0' as u64));
    let no_digit = (d0 | d0.wrapping_add(ONES * 0x76)) & HIGH;
    let no_digit1 = (d1 | d1.wrapping_add(PAIR & (ONES * 0x76))) & PAIR & HIGH;
    if no_digit | no_digit1 != 0 || w1 & CLOSE_MASK != CLOSE {
        return None;
    }
    let pair = (d1 & 0xff) * 10 + ((d1 >> 8) & 0xff);
    Some(octet_value(d0) * 100 + pair)
}

/// The eight decimal digits of `n` (below 10^8), leading zeros included, as ASCII in a
/// little-endian word: the most significant digit is byte 0.
///
/// Splits into halves, quarters and digits in parallel lanes, with multiplications by
/// reciprocals exact for the lane's range (a division chain costs ten times as much).
#[inline(always)]
pub(crate) const fn eight_digits(n: u32) -> u64 {
    let n = n as u64;
    // Two lanes of 32 bits: the high four digits first (byte 0 is the first digit).
    let quads = (n / 10_000) | ((n % 10_000) << 32);
    // Per lane, x / 100 is (x * 10486) >> 20 for x < 10_000.
    let hi = ((quads * 10_486) >> 20) & 0x0000_007f_0000_007f;
    let pairs = ((quads - hi * 100) << 16) | hi;
    // Per 16-bit lane, x / 10 is (x * 103) >> 10 for x < 100.
    let tens = ((pairs * 103) >> 10) & 0x000f_000f_000f_000f;
    let digits = ((pairs - tens * 10) << 8) | tens;
    digits + ONES * b'0' as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags of a `*_bytes` check as one bool per byte.
    fn flags(f: u64) -> [bool; 8] {
        f.to_le_bytes().map(|b| b & 0x80 != 0)
    }

    #[test]
    fn digit_flags_match_the_byte_check() {
        for b in 0..=255u8 {
            for at in 0..8 {
                let mut w = *b"0123abcd";
                w[at] = b;
                let w64 = u64::from_le_bytes(w);
                assert_eq!(flags(digit_bytes(w64)), w.map(|x| x.is_ascii_digit()));
            }
        }
    }

    #[test]
    fn byte_flags_are_exact_next_to_each_other() {
        // Neighbouring bytes must not borrow from or carry into each other.
        for a in 0..=255u8 {
            for b in [
                0u8,
                b']',
                b']' + 1,
                b']' - 1,
                0x80,
                0xdd,
                0xff,
                b'0',
                b'9',
                b'f',
            ] {
                let w = u64::from_le_bytes([a, b, a, b, b, a, a, b]);
                let bytes = w.to_le_bytes();
                assert_eq!(flags(digit_bytes(w)), bytes.map(|x| x.is_ascii_digit()));
            }
        }
    }

    #[test]
    fn digit_runs_read_by_words() {
        let run = |s: &str| digit_run(s.as_bytes());
        assert_eq!(run("1767225600]--QQ=="), Some((1_767_225_600, 10)));
        assert_eq!(run("0]--QQ==xx"), Some((0, 1)));
        assert_eq!(run("12345678,exp=0]--QQ=="), Some((12_345_678, 8)));
        assert_eq!(run("12345678,e"), None, "no second word");
        assert_eq!(run("]--QQ==xxx"), Some((0, 0)));
        assert_eq!(
            run("9223372036854775807]--QQ=="),
            Some((i64::MAX as u64, 19))
        );
        assert_eq!(
            run("9999999999999999999]--QQ=="),
            Some((9_999_999_999_999_999_999, 19))
        );
        assert_eq!(run("12345678901234567890]--QQ=="), None, "20 digits");
        assert_eq!(run("1]--"), None, "fewer than 8 bytes");
        assert_eq!(run("1\u{e9}234567"), Some((1, 1)));
        for n in 0..=u16::MAX {
            let text = std::format!("{n},exp=0]--");
            let want = (u64::from(n), text.find(',').unwrap_or(0));
            assert_eq!(run(&text), Some(want), "{text}");
        }
    }

    #[test]
    fn sixteen_and_ten_digit_runs_match_the_byte_reader() {
        let words = |s: &[u8]| {
            let mut b = [b'x'; 16];
            b[..s.len().min(16)].copy_from_slice(&s[..s.len().min(16)]);
            (word_at(&b, 0).unwrap_or(0), word_at(&b, 8).unwrap_or(0))
        };
        for text in [
            &b"1767225600]--QQ"[..],
            b"0]--QQ==",
            b"]--",
            b"12345678]--",
            b"123456789012345]--",
            b"1234567890123456]",
            b"176722560]--QQ",
            b"17672256000]--",
            b"1767225600]-",
            b"1767225600]-x",
            b"1767225600,--",
            b"17672256x0]--",
            b"x767225600]--",
            b"0000000000]--",
            b"9999999999]--",
            b"1767225600]--\xff",
            b"17672\xb5560]--",
        ] {
            let (w0, w1) = words(text);
            let run = text.iter().take_while(|b| b.is_ascii_digit()).count();
            let value = text[..run]
                .iter()
                .fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'));
            let want16 = (run < 16).then_some((value, run));
            assert_eq!(digit_run16(w0, w1), want16, "{text:?}");
            let want10 = (run == 10 && text[10..].starts_with(b"]--")).then_some(value);
            assert_eq!(ten_digits(w0, w1), want10, "{text:?}");
        }
    }

    #[test]
    fn ten_digits_refuse_every_other_byte_in_every_place() {
        // The digit check works by borrows and carries between bytes: every byte value in
        // every place of the digits and the separator, and two at once at the edges.
        let reference = |b: &[u8; 16]| {
            (b[..10].iter().all(u8::is_ascii_digit) && &b[10..13] == b"]--").then(|| {
                b[..10]
                    .iter()
                    .fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'))
            })
        };
        let check = |b: &[u8; 16]| {
            let (w0, w1) = (word_at(b, 0).unwrap_or(0), word_at(b, 8).unwrap_or(0));
            assert_eq!(ten_digits(w0, w1), reference(b), "{b:?}");
        };
        for base in [
            *b"1767225600]--QUJ",
            *b"0000000000]--===",
            *b"9999999999]--xyz",
        ] {
            for at in 0..16 {
                for byte in 0..=255u8 {
                    let mut b = base;
                    b[at] = byte;
                    check(&b);
                    for other in [0, 7, 8, 9] {
                        let mut c = b;
                        c[other] = byte.wrapping_add(1);
                        check(&c);
                    }
                }
            }
        }
    }

    fn check_eight(n: u32) {
        let ascii = eight_digits(n);
        let want = std::format!("{n:08}");
        assert_eq!(&ascii.to_le_bytes(), want.as_bytes(), "{n}");
    }

    #[test]
    fn eight_digits_match_formatting() {
        // Every boundary of every digit, then a stride through the whole range.
        for k in 0..8 {
            let p = 10u32.pow(k);
            for n in [
                p - 1,
                p,
                p + 1,
                2 * p - 1,
                9 * p,
                (10 * p).min(100_000_000) - 1,
            ] {
                check_eight(n);
            }
        }
        let mut n = 0u32;
        while n < 100_000_000 {
            check_eight(n);
            n += 9_973;
        }
        for n in 0..100_000 {
            check_eight(n);
            check_eight(99_999_999 - n);
        }
    }
}
