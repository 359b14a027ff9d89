//! Session and message identifiers: 1 to [`MAX_ID_LEN`] lowercase hex characters, inline.

use core::fmt;
use core::str::FromStr;

use crate::limits::MAX_ID_LEN;

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IdError {
    /// The identifier is empty.
    Empty,
    /// The identifier is longer than [`MAX_ID_LEN`].
    TooLong,
    /// The byte at `offset` is not a lowercase hex digit.
    NotLowerHex {
        /// Offset of the offending byte.
        offset: usize,
    },
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => f.write_str("empty id"),
            Self::TooLong => f.write_str("id longer than 32 characters"),
            Self::NotLowerHex { offset } => write!(f, "id not lowercase hex at byte {offset}"),
        }
    }
}

impl core::error::Error for IdError {}

/// The operating system's entropy source failed (feature `getrandom`).
#[cfg(feature = "getrandom")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntropyError(getrandom::Error);

#[cfg(feature = "getrandom")]
impl fmt::Display for EntropyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "entropy source failed: {}", self.0)
    }
}

#[cfg(feature = "getrandom")]
impl core::error::Error for EntropyError {}

/// Checks the id syntax of WIRE.md §4: `1*32(DIGIT / %x61-66)`.
pub(crate) const fn check_id(bytes: &[u8]) -> Result<(), IdError> {
    if bytes.is_empty() {
        return Err(IdError::Empty);
    }
    if bytes.len() > MAX_ID_LEN {
        return Err(IdError::TooLong);
    }
    let mut i = 0;
    while i < bytes.len() {
        if !is_id_byte(bytes[i]) {
            return Err(IdError::NotLowerHex { offset: i });
        }
        i += 1;
    }
    Ok(())
}

/// Whether `b` may appear in an id: a lowercase hex digit.
pub(crate) const fn is_id_byte(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Half an id's storage: the digits of an id of 16, the length this crate draws.
const HALF: usize = MAX_ID_LEN / 2;

/// The storage of an id: its digits, then zeros to [`MAX_ID_LEN`]. No digit is a zero
/// byte, so the digits give the length ([`digits_len`]) and an id is exactly 32 bytes:
/// a header's two ids are 64 bytes at its start, which a parsed part gets as four
/// 16-byte stores (digits and zeros) and a copy of the part reads back as the same four
/// (a length byte between them would put the second id across those places, and each
/// wide load of a copy would then wait for the narrower stores under it to retire).
type Digits = [[u8; HALF]; 2];

/// The bytes of an id's storage as one array.
#[inline(always)]
const fn flat(buf: &Digits) -> &[u8; MAX_ID_LEN] {
    match buf.as_flattened().first_chunk::<MAX_ID_LEN>() {
        Some(all) => all,
        None => &[0; MAX_ID_LEN],
    }
}

/// How many digits an id's storage holds: the place after its last non-zero byte, from
/// the leading zero bits of each half read as a little-endian integer (its last byte
/// is the most significant).
#[inline(always)]
const fn digits_len(buf: &Digits) -> usize {
    let (low, high) = (u128::from_le_bytes(buf[0]), u128::from_le_bytes(buf[1]));
    if high != 0 {
        MAX_ID_LEN - high.leading_zeros() as usize / 8
    } else {
        HALF - low.leading_zeros() as usize / 8
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq)]
        #[repr(C)]
        pub struct $name {
            /// The digits, then zeros ([`Digits`]).
            buf: Digits,
        }

        impl $name {
            /// Validates `bytes` as an identifier (1 to 32 lowercase hex characters).
            ///
            /// # Errors
            /// [`IdError`] says which rule the input breaks.
            pub fn from_bytes(bytes: &[u8]) -> Result<Self, IdError> {
                check_id(bytes)?;
                Ok(Self::from_checked(bytes))
            }

            /// Builds an id from bytes the caller has already checked: 1 to
            /// `MAX_ID_LEN` bytes, each [`is_id_byte`].
            #[inline(always)]
            pub(crate) fn from_checked(bytes: &[u8]) -> Self {
                let mut id = Self { buf: [[0; HALF]; 2] };
                if let Some(to) = id.buf.as_flattened_mut().get_mut(..bytes.len()) {
                    to.copy_from_slice(bytes);
                }
                id
            }

            /// An id of the 16 digits the caller has checked, as one little-endian
            /// integer: a value the compiler keeps in a register and stores whole,
            /// where an array would be assembled in a temporary first.
            #[inline(always)]
            pub(crate) const fn from_sixteen(digits: u128) -> Self {
                Self { buf: [digits.to_le_bytes(), [0; HALF]] }
            }

            /// The identifier's bytes and zeros after them, to [`MAX_ID_LEN`]: the
            /// encoder copies the whole array, a fixed-size store.
            #[inline(always)]
            pub(crate) const fn padded(&self) -> &[u8; MAX_ID_LEN] {
                flat(&self.buf)
            }

            /// 16 lowercase hex characters from 8 bytes of caller-supplied entropy.
            pub const fn from_entropy(entropy: [u8; 8]) -> Self {
                let mut digits = [0u8; HALF];
                let mut i = 0;
                while i < 8 {
                    digits[2 * i] = HEX[(entropy[i] >> 4) as usize];
                    digits[2 * i + 1] = HEX[(entropy[i] & 0x0f) as usize];
                    i += 1;
                }
                Self::from_sixteen(u128::from_le_bytes(digits))
            }

            /// A fresh 16-hex identifier from the operating system's entropy source.
            ///
            /// # Errors
            /// [`EntropyError`] when the entropy source failed.
            #[cfg(feature = "getrandom")]
            pub fn random() -> Result<Self, EntropyError> {
                let mut entropy = [0u8; 8];
                getrandom::fill(&mut entropy).map_err(EntropyError)?;
                Ok(Self::from_entropy(entropy))
            }

            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                // Only lowercase hex is ever stored, so this cannot fail.
                core::str::from_utf8(self.as_bytes()).unwrap_or("")
            }

            /// The identifier's ASCII bytes.
            pub fn as_bytes(&self) -> &[u8] {
                let all = self.buf.as_flattened();
                all.get(..self.len()).unwrap_or(all)
            }

            /// Length in characters (1 to 32).
            #[allow(clippy::len_without_is_empty)] // never empty
            #[inline(always)]
            pub const fn len(&self) -> usize {
                digits_len(&self.buf)
            }
        }

        // By length, then by digits; hashed as the length then the 32 bytes: the order
        // and the hash of the derived impls when the length was a field of its own.
        impl Ord for $name {
            fn cmp(&self, other: &Self) -> core::cmp::Ordering {
                (self.len(), self.padded()).cmp(&(other.len(), other.padded()))
            }
        }

        impl PartialOrd for $name {
            fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl core::hash::Hash for $name {
            fn hash<H: core::hash::Hasher>(&self, state: &mut H) {
                #[allow(clippy::cast_possible_truncation)] // at most MAX_ID_LEN
                (self.len() as u8).hash(state);
                self.padded().hash(state);
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                Self::from_bytes(s.as_bytes())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!(stringify!($name), "({})"), self.as_str())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }
    };
}

id_type!(
    /// Identifies one MCP session between two Bison Relay users (field `sid`).
    SessionId
);
id_type!(
    /// Identifies one message within a session; groups its parts (field `mid`).
    MessageId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_gives_sixteen_lowercase_hex() {
        let id = MessageId::from_entropy([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        assert_eq!(id.as_str(), "0123456789abcdef");
        assert_eq!(id.len(), 16);
    }

    #[test]
    fn ids_parse_within_bounds_only() {
        assert_eq!("".parse::<SessionId>(), Err(IdError::Empty));
        assert!("0".parse::<SessionId>().is_ok());
        assert!(
            "0123456789abcdef0123456789abcdef"
                .parse::<SessionId>()
                .is_ok()
        );
        assert_eq!(
            "0123456789abcdef0123456789abcdef0".parse::<SessionId>(),
            Err(IdError::TooLong)
        );
        assert_eq!(
            "aA".parse::<MessageId>(),
            Err(IdError::NotLowerHex { offset: 1 })
        );
        assert_eq!(
            " a".parse::<MessageId>(),
            Err(IdError::NotLowerHex { offset: 0 })
        );
    }

    #[test]
    fn digits_len_matches_the_last_non_zero_byte() {
        // The length is read from leading zero bits: every byte value in every place,
        // after a run of digits, against a byte-wise search.
        let reference =
            |buf: &[u8; MAX_ID_LEN]| buf.iter().rposition(|&b| b != 0).map_or(0, |last| last + 1);
        for at in 0..MAX_ID_LEN {
            for byte in 0..=255u8 {
                for fill in [b'0', b'f', 0xff, 0x01] {
                    let mut buf = [0u8; MAX_ID_LEN];
                    buf[..at].fill(fill);
                    buf[at] = byte;
                    let mut halves = [[0u8; HALF]; 2];
                    halves[0].copy_from_slice(&buf[..HALF]);
                    halves[1].copy_from_slice(&buf[HALF..]);
                    assert_eq!(digits_len(&halves), reference(&buf), "{buf:?}");
                }
            }
        }
        for len in 1..=MAX_ID_LEN {
            let text = "0123456789abcdef".repeat(2);
            let id: SessionId = text[..len].parse().unwrap_or_else(|_| unreachable!());
            assert_eq!(id.len(), len);
            assert_eq!(id.as_str(), &text[..len]);
        }
    }

    #[test]
    fn order_and_hash_are_by_length_then_digits() {
        use core::hash::{Hash, Hasher};
        use std::collections::hash_map::DefaultHasher;
        let id = |s: &str| s.parse::<MessageId>().unwrap_or_else(|_| unreachable!());
        // Shorter first, whatever the digits.
        assert!(id("f") < id("00"));
        assert!(id("0a") < id("0b"));
        assert_eq!(id("ab").cmp(&id("ab")), core::cmp::Ordering::Equal);
        // The hash of the length byte then the 32 bytes of storage.
        let hash = |h: &dyn Fn(&mut DefaultHasher)| {
            let mut state = DefaultHasher::new();
            h(&mut state);
            state.finish()
        };
        let mut padded = [0u8; MAX_ID_LEN];
        padded[..3].copy_from_slice(b"abc");
        assert_eq!(
            hash(&|s| id("abc").hash(s)),
            hash(&|s| {
                3u8.hash(s);
                padded.hash(s);
            })
        );
    }

    #[test]
    fn display_roundtrips() {
        let id: SessionId = "00ff".parse().unwrap_or_else(|_| unreachable!());
        assert_eq!(std::format!("{id}"), "00ff");
        assert_eq!(std::format!("{id:?}"), "SessionId(00ff)");
    }

    #[cfg(feature = "getrandom")]
    #[test]
    fn random_ids_differ() {
        let a = MessageId::random().unwrap_or_else(|_| unreachable!());
        let b = MessageId::random().unwrap_or_else(|_| unreachable!());
        assert_ne!(a, b);
        assert_eq!(a.len(), 16);
    }
}
