//! Bison Relay user ids: 32 bytes, written as 64 hex characters.

use std::fmt;
use std::str::FromStr;

/// A Bison Relay user id (the 32-byte public identity of a peer).
///
/// Parsed from 64 hex characters in either case; always shown in lowercase.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId([u8; 32]);

/// Why a string is not a peer id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerIdError {
    /// The text is not 64 characters long.
    #[error("peer id is {len} characters, not 64")]
    Length {
        /// Length of the text, in bytes.
        len: usize,
    },
    /// The byte at `offset` is not a hex digit.
    #[error("peer id not hex at byte {offset}")]
    NotHex {
        /// Offset of the offending byte.
        offset: usize,
    },
}

impl PeerId {
    /// The id with these bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The id's bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The id's bytes, by value.
    pub const fn to_bytes(self) -> [u8; 32] {
        self.0
    }
}

const fn nibble(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

impl FromStr for PeerId {
    type Err = PeerIdError;

    fn from_str(s: &str) -> Result<Self, PeerIdError> {
        let text = s.as_bytes();
        if text.len() != 64 {
            return Err(PeerIdError::Length { len: text.len() });
        }
        let mut out = [0u8; 32];
        for (i, pair) in text.chunks_exact(2).enumerate() {
            let hi = nibble(pair[0]).ok_or(PeerIdError::NotHex { offset: 2 * i })?;
            let lo = nibble(pair[1]).ok_or(PeerIdError::NotHex { offset: 2 * i + 1 })?;
            out[i] = hi << 4 | lo;
        }
        Ok(Self(out))
    }
}

impl fmt::Display for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PeerId({self})")
    }
}

impl From<[u8; 32]> for PeerId {
    fn from(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_either_case_and_shows_lowercase() {
        let upper = "AB".repeat(32);
        let id: PeerId = upper.parse().unwrap();
        assert_eq!(id.as_bytes(), &[0xab; 32]);
        assert_eq!(id.to_string(), "ab".repeat(32));
        assert_eq!("aB".repeat(32).parse::<PeerId>(), Ok(id));
    }

    #[test]
    fn rejects_wrong_length_and_non_hex() {
        assert_eq!("ab".parse::<PeerId>(), Err(PeerIdError::Length { len: 2 }));
        let mut bad = "0".repeat(64);
        bad.replace_range(5..6, "g");
        assert_eq!(
            bad.parse::<PeerId>(),
            Err(PeerIdError::NotHex { offset: 5 })
        );
    }
}
