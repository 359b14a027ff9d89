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

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name {
            len: u8,
            buf: [u8; MAX_ID_LEN],
        }

        impl $name {
            /// Validates `bytes` as an identifier (1 to 32 lowercase hex characters).
            ///
            /// # Errors
            /// [`IdError`] says which rule the input breaks.
            pub fn from_bytes(bytes: &[u8]) -> Result<Self, IdError> {
                check_id(bytes)?;
                let mut buf = [0u8; MAX_ID_LEN];
                buf[..bytes.len()].copy_from_slice(bytes);
                #[allow(clippy::cast_possible_truncation)] // checked: len <= MAX_ID_LEN
                Ok(Self { len: bytes.len() as u8, buf })
            }

            /// Builds an id from bytes the caller has already checked: 1 to
            /// `MAX_ID_LEN` bytes, each [`is_id_byte`].
            #[inline(always)]
            pub(crate) fn from_checked(bytes: &[u8]) -> Self {
                let mut buf = [0u8; MAX_ID_LEN];
                buf[..bytes.len()].copy_from_slice(bytes);
                #[allow(clippy::cast_possible_truncation)] // checked: len <= MAX_ID_LEN
                Self { len: bytes.len() as u8, buf }
            }

            /// The identifier's bytes and zeros after them, to [`MAX_ID_LEN`]: the
            /// encoder copies the whole array, a fixed-size store.
            #[inline(always)]
            pub(crate) const fn padded(&self) -> &[u8; MAX_ID_LEN] {
                &self.buf
            }

            /// 16 lowercase hex characters from 8 bytes of caller-supplied entropy.
            pub const fn from_entropy(entropy: [u8; 8]) -> Self {
                let mut buf = [0u8; MAX_ID_LEN];
                let mut i = 0;
                while i < 8 {
                    buf[2 * i] = HEX[(entropy[i] >> 4) as usize];
                    buf[2 * i + 1] = HEX[(entropy[i] & 0x0f) as usize];
                    i += 1;
                }
                Self { len: 16, buf }
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
                &self.buf[..usize::from(self.len)]
            }

            /// Length in characters (1 to 32).
            #[allow(clippy::len_without_is_empty)] // never empty
            pub const fn len(&self) -> usize {
                self.len as usize
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
