//! The base64 body: padded standard base64, decoded into caller buffers.
//!
//! Decoding is optimistic: the whole body goes to the engine in one call, which is the
//! only pass over the bytes in the common case. Only when that fails and the body holds
//! ASCII whitespace (allowed by WIRE.md §3 in compatible mode) are the whitespace-free
//! runs gathered through a small stack buffer and decoded block by block.
//!
//! With the `std` feature on `x86_64`/`aarch64`, the engine is base64's runtime-detected
//! SIMD engine; otherwise the scalar engine. Both accept exactly the same language.

use base64::engine::{DecodePaddingMode, Engine, GeneralPurpose, GeneralPurposeConfig};
use base64::{DecodeError, DecodeSliceError, alphabet};

use crate::error::BodyError;
use crate::parse::Mode;

/// Compatible mode: padding required, non-zero trailing bits tolerated (as Go's decoder).
const COMPAT_CONFIG: GeneralPurposeConfig = GeneralPurposeConfig::new()
    .with_encode_padding(true)
    .with_decode_allow_trailing_bits(true)
    .with_decode_padding_mode(DecodePaddingMode::RequireCanonical);

/// Canonical mode: as compatible, but trailing bits must be zero.
const CANONICAL_CONFIG: GeneralPurposeConfig = COMPAT_CONFIG.with_decode_allow_trailing_bits(false);

// Unused when the SIMD engine serves every call, except by the engine comparison test.
#[cfg_attr(
    all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) static SCALAR_COMPAT: GeneralPurpose =
    GeneralPurpose::new(&alphabet::STANDARD, COMPAT_CONFIG);
#[cfg_attr(
    all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code)
)]
pub(crate) static SCALAR_CANONICAL: GeneralPurpose =
    GeneralPurpose::new(&alphabet::STANDARD, CANONICAL_CONFIG);

#[cfg(all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64")))]
mod simd {
    extern crate std;
    use base64::engine::Simd;
    use std::sync::LazyLock;

    pub(crate) static COMPAT: LazyLock<Simd> =
        LazyLock::new(|| Simd::standard(super::COMPAT_CONFIG));
    pub(crate) static CANONICAL: LazyLock<Simd> =
        LazyLock::new(|| Simd::standard(super::CANONICAL_CONFIG));
}

/// Decodes with the fastest engine this build has. Always inlined, so a caller that
/// parsed the part in place hands the engine the body with no call of its own between.
#[inline(always)]
pub(crate) fn decode(body: &[u8], out: &mut [u8], canonical: bool) -> Result<usize, BodyError> {
    #[cfg(all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        if canonical {
            decode_with(&*simd::CANONICAL, body, out, true)
        } else {
            decode_with(&*simd::COMPAT, body, out, false)
        }
    }
    #[cfg(not(all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    {
        if canonical {
            decode_with(&SCALAR_CANONICAL, body, out, true)
        } else {
            decode_with(&SCALAR_COMPAT, body, out, false)
        }
    }
}

/// Decodes a part's base64 body, as [`Part::body`](crate::Part::body) returns it, into
/// `out`; returns the bytes written.
///
/// The same decoder as [`Part::decode_body`](crate::Part::decode_body), for callers that
/// keep the body apart from its part (the C binding hands out offsets into the PM text).
/// `mode` is the mode the part was parsed in.
///
/// # Errors
/// As [`Part::decode_body`](crate::Part::decode_body).
///
/// # Example
///
/// ```
/// use brmcp_wire::{BodyError, Mode, decode_body, parse};
///
/// let part = parse("--mcp[v=1,sid=aa,mid=bb,seq=1/1,exp=0]--QU JD")?;
/// let mut out = [0u8; 3];
/// assert_eq!(decode_body(part.body(), Mode::Compatible, &mut out), Ok(3));
/// assert_eq!(&out, b"ABC");
/// assert_eq!(
///     decode_body(part.body(), Mode::Canonical, &mut out),
///     Err(BodyError::Whitespace { offset: 2 })
/// );
/// # Ok::<(), brmcp_wire::ParseError>(())
/// ```
pub fn decode_body(body: &[u8], mode: Mode, out: &mut [u8]) -> Result<usize, BodyError> {
    decode(body, out, mode == Mode::Canonical)
}

/// Encodes `chunk` as padded standard base64 into `out`, which is exactly
/// [`encoded_len`]`(chunk.len())` long and `chunk` not empty.
///
/// The engine gets exactly the unpadded text's place, so it writes nothing else, and
/// the padding is stored beforehand as two `=` at the end, which the engine overwrites
/// where the text reaches. `internal_encode` is the engine's own step that
/// `encode_slice` wraps; calling it skips the wrapper's second length computation, its
/// size check and its padding loop, and yields the same bytes.
#[inline]
pub(crate) fn encode_exact(chunk: &[u8], out: &mut [u8]) {
    // Characters without padding: 4 per 3 bytes, then 2 or 3 for a tail of 1 or 2.
    let tail = chunk.len() % 3;
    let unpadded = chunk.len() / 3 * 4 + tail + usize::from(tail != 0);
    if let Some(tail) = out.last_chunk_mut::<2>() {
        *tail = *b"==";
    }
    let Some(text) = out.get_mut(..unpadded) else {
        return;
    };
    #[cfg(all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64")))]
    simd::COMPAT.internal_encode(chunk, text);
    #[cfg(not(all(feature = "std", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    SCALAR_COMPAT.internal_encode(chunk, text);
}

/// Length of the padded base64 text for `n` raw bytes.
pub(crate) const fn encoded_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// A buffer length that always holds the decoded body (exact when the body has no
/// whitespace and is valid).
pub(crate) fn decoded_len_max(body: &[u8]) -> usize {
    let pads = match body {
        [.., b'=', b'='] => 2,
        [.., b'='] => 1,
        _ => 0,
    };
    (body.len().div_ceil(4) * 3).saturating_sub(pads)
}

/// The decoded length of a valid body, from its symbols alone: symbols / 4 * 3 less the
/// padding. For an invalid body it is still a well-defined number, which the reassembler
/// uses to order its checks (WIRE.md §6). Scans the body: used off the hot path only.
pub(crate) fn decoded_len_exact(body: &[u8]) -> usize {
    let symbols = body.iter().filter(|&&b| !is_body_space(b)).count();
    let pads = body
        .iter()
        .rev()
        .filter(|&&b| !is_body_space(b))
        .take(2)
        .filter(|&&b| b == b'=')
        .count();
    (symbols / 4 * 3).saturating_sub(pads)
}

/// The ASCII whitespace WIRE.md allows inside a body (RE2's `\s`; not vertical tab).
#[inline]
pub(crate) const fn is_body_space(b: u8) -> bool {
    // One shift and mask instead of five compares: counting loops over bodies vectorize.
    const SPACES: u64 = 1 << b'\t' | 1 << b'\n' | 1 << 0x0c | 1 << b'\r' | 1 << b' ';
    b < 64 && SPACES & (1 << b) != 0
}

/// Bytes gathered per block on the whitespace path: a multiple of 4 so every block but
/// the last is whole quads; small enough to live on any stack.
const GATHER_LEN: usize = 1024;

#[inline(always)]
pub(crate) fn decode_with<E: Engine>(
    engine: &E,
    body: &[u8],
    out: &mut [u8],
    canonical: bool,
) -> Result<usize, BodyError> {
    if body.is_empty() {
        return Err(BodyError::Empty);
    }
    match engine.decode_slice(body, out) {
        Ok(n) => Ok(n),
        Err(e) => retry(engine, body, out, canonical, e),
    }
}

/// After the one-call decode failed: whitespace (gathered in compatible mode) or the
/// engine's error. Out of line, so the hot call keeps a small frame.
#[cold]
#[inline(never)]
fn retry<E: Engine>(
    engine: &E,
    body: &[u8],
    out: &mut [u8],
    canonical: bool,
    e: DecodeSliceError,
) -> Result<usize, BodyError> {
    if let Some(offset) = body.iter().position(|&b| is_body_space(b)) {
        if canonical {
            return Err(BodyError::Whitespace { offset });
        }
        return decode_gathered(engine, body, out);
    }
    Err(map_error(e, body, body))
}

/// Slow path: decode the whitespace-free runs of `body` through a stack buffer.
fn decode_gathered<E: Engine>(engine: &E, body: &[u8], out: &mut [u8]) -> Result<usize, BodyError> {
    let mut buf = [0u8; GATHER_LEN];
    let mut filled = 0;
    let mut written = 0;
    // Offset in `body` of the first byte in `buf`.
    let mut block_start = 0;
    for (i, &b) in body.iter().enumerate() {
        if is_body_space(b) {
            continue;
        }
        if filled == GATHER_LEN {
            // More symbols follow, so this block is not the last: padding here is misplaced.
            if let Some(k) = buf.iter().position(|&c| c == b'=') {
                return Err(BodyError::Invalid {
                    offset: body_offset(body, block_start, k),
                });
            }
            written += decode_block(engine, &buf, body, block_start, out, written)?;
            filled = 0;
        }
        if filled == 0 {
            block_start = i;
        }
        buf[filled] = b;
        filled += 1;
    }
    if filled == 0 {
        return Err(BodyError::Empty);
    }
    written += decode_block(engine, &buf[..filled], body, block_start, out, written)?;
    Ok(written)
}

fn decode_block<E: Engine>(
    engine: &E,
    block: &[u8],
    body: &[u8],
    block_start: usize,
    out: &mut [u8],
    written: usize,
) -> Result<usize, BodyError> {
    let dest = out.get_mut(written..).unwrap_or_default();
    engine.decode_slice(block, dest).map_err(|e| {
        let e = map_error(e, block, body);
        match e {
            BodyError::Invalid { offset } => BodyError::Invalid {
                offset: body_offset(body, block_start, offset),
            },
            BodyError::TrailingBits { offset } => BodyError::TrailingBits {
                offset: body_offset(body, block_start, offset),
            },
            other => other,
        }
    })
}

/// Offset in `body` of the `k`-th non-space byte at or after `start`.
fn body_offset(body: &[u8], start: usize, k: usize) -> usize {
    body.iter()
        .enumerate()
        .skip(start)
        .filter(|&(_, &b)| !is_body_space(b))
        .nth(k)
        .map_or(body.len(), |(i, _)| i)
}

/// Maps an engine error on `input` (all of `body`, or one block of it) to a
/// [`BodyError`]; offsets are relative to `input`.
fn map_error(e: DecodeSliceError, input: &[u8], body: &[u8]) -> BodyError {
    match e {
        DecodeSliceError::OutputSliceTooSmall => BodyError::BufferTooSmall {
            required: decoded_len_exact(body),
        },
        DecodeSliceError::DecodeError(e) => match e {
            DecodeError::InvalidByte(offset, _) => BodyError::Invalid { offset },
            DecodeError::InvalidLastSymbol { offset, .. } => BodyError::TrailingBits { offset },
            DecodeError::InvalidLength(len) => BodyError::Invalid { offset: len },
            DecodeError::InvalidPadding => BodyError::Invalid {
                offset: input.iter().position(|&b| b == b'=').unwrap_or(input.len()),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::vec;
    use std::vec::Vec;

    fn dec(body: &str) -> Result<Vec<u8>, BodyError> {
        let mut out = vec![0u8; decoded_len_max(body.as_bytes())];
        let n = decode(body.as_bytes(), &mut out, false)?;
        out.truncate(n);
        Ok(out)
    }

    #[test]
    fn whitespace_anywhere_is_skipped() {
        assert_eq!(dec("QU JD").as_deref(), Ok(&b"ABC"[..]));
        assert_eq!(dec("QQ=\n=").as_deref(), Ok(&b"A"[..]));
        assert_eq!(dec("Q\tU\rJ\x0cD").as_deref(), Ok(&b"ABC"[..]));
    }

    #[test]
    fn vertical_tab_is_not_whitespace() {
        assert!(matches!(
            dec("QU\x0bJD"),
            Err(BodyError::Invalid { offset: 2 })
        ));
    }

    #[test]
    fn padding_then_data_is_refused_across_blocks() {
        // "QQ==" fills a block boundary exactly; data after it must still be refused.
        let mut body = std::string::String::new();
        for _ in 0..(GATHER_LEN / 4 - 1) {
            body.push_str("QUJD");
        }
        body.push_str("QQ==");
        body.push(' ');
        body.push_str("QUJD");
        assert!(matches!(dec(&body), Err(BodyError::Invalid { .. })));
    }

    #[test]
    fn non_canonical_trailing_bits_are_tolerated_in_compat_only() {
        assert_eq!(dec("QR==").as_deref(), Ok(&b"A"[..]));
        let mut out = [0u8; 3];
        assert!(matches!(
            decode(b"QR==", &mut out, true),
            Err(BodyError::TrailingBits { offset: 1 })
        ));
    }

    #[test]
    fn exact_output_buffer_suffices() {
        // Two padding symbols: three bytes of estimate, one byte of output.
        let mut out = [0u8; 1];
        assert_eq!(decode(b"QQ==", &mut out, false), Ok(1));
        let mut out = [0u8; 0];
        assert_eq!(
            decode(b"QQ==", &mut out, false),
            Err(BodyError::BufferTooSmall { required: 1 })
        );
    }

    fn with_spaces(b64: &[u8], mask: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        for (i, &c) in b64.iter().enumerate() {
            if mask.get(i).is_some_and(|m| m % 7 == 0) {
                v.push(b" \n\t\r\x0c"[usize::from(mask[i] % 5)]);
            }
            v.push(c);
        }
        v
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The SIMD engine (where this build has it) and the scalar engine agree on
        /// every input, valid or not, with or without whitespace.
        #[test]
        fn simd_and_scalar_engines_agree(
            data in proptest::collection::vec(any::<u8>(), 0..3000),
            mask in proptest::collection::vec(any::<u8>(), 0..5000),
            junk in proptest::collection::vec(any::<u8>(), 0..64),
            canonical in any::<bool>(),
        ) {
            let b64 = base64::engine::general_purpose::STANDARD.encode(&data);
            let inputs = [b64.as_bytes().to_vec(), with_spaces(b64.as_bytes(), &mask), junk.clone(), {
                let mut v = b64.as_bytes().to_vec();
                if let Some(&j) = junk.first() { let at = usize::from(j) % (v.len() + 1); v.insert(at, j); }
                v
            }];
            for input in inputs {
                let mut a = vec![0u8; decoded_len_max(&input)];
                let mut b = a.clone();
                let scalar = if canonical { &SCALAR_CANONICAL } else { &SCALAR_COMPAT };
                let ra = decode_with(scalar, &input, &mut a, canonical);
                let rb = decode(&input, &mut b, canonical);
                prop_assert_eq!(ra, rb);
                if let Ok(n) = ra {
                    prop_assert_eq!(&a[..n], &b[..n]);
                }
            }
            let mut out = vec![0u8; decoded_len_max(b64.as_bytes())];
            if data.is_empty() {
                prop_assert_eq!(decode(b64.as_bytes(), &mut out, canonical), Err(BodyError::Empty));
            } else {
                let n = decode(&with_spaces(b64.as_bytes(), &mask), &mut out, false);
                prop_assert_eq!(n, Ok(data.len()));
                prop_assert_eq!(&out[..data.len()], &data[..]);
            }
        }
    }
}
