//! `ChatService.UserNick`'s choice of id, with brclient's error texts.
//!
//! brclient's `chatServer.UserNick` reads `uid` when it holds exactly 32 bytes and
//! `hex_uid` only otherwise, and then only when it is 64 characters; either one is
//! decoded by zkidentity's `ShortID`, so a bad hex string fails with Go's
//! `encoding/hex` text.

/// The length of a user id in bytes (zkidentity's `ShortID`).
const UID_LEN: usize = 32;

/// The id a `UserNickRequest` names, or the error text brclient answers with.
pub(crate) fn user_nick_uid(uid: &[u8], hex_uid: &str) -> Result<[u8; UID_LEN], String> {
    if let Ok(uid) = <[u8; UID_LEN]>::try_from(uid) {
        return Ok(uid);
    }
    // Go's `len` of a string counts bytes, as Rust's does.
    if hex_uid.len() != UID_LEN * 2 {
        return Err("invalid uid and hex_uid".to_owned());
    }
    let mut out = [0u8; UID_LEN];
    for (i, pair) in hex_uid.as_bytes().chunks_exact(2).enumerate() {
        let hi = go_hex_digit(pair[0])?;
        let lo = go_hex_digit(pair[1])?;
        out[i] = hi << 4 | lo;
    }
    Ok(out)
}

/// One hex digit as Go's `hex.Decode` reads it (either case), or its
/// `InvalidByteError` text for the first byte it refuses.
fn go_hex_digit(b: u8) -> Result<u8, String> {
    match b {
        b'0'..=b'9' => Ok(b - b'0'),
        b'a'..=b'f' => Ok(b - b'a' + 10),
        b'A'..=b'F' => Ok(b - b'A' + 10),
        _ => Err(format!("encoding/hex: invalid byte: {}", go_sharp_u(b))),
    }
}

/// Go's `%#U` of `rune(b)`: `U+0067 'g'`, the quoted character only when Go's
/// `strconv.IsPrint` holds (ASCII graphic and space, Latin-1 graphic but the soft
/// hyphen).
fn go_sharp_u(b: u8) -> String {
    let printable = matches!(b, 0x20..=0x7e | 0xa1..=0xff) && b != 0xad;
    if printable {
        format!("U+{:04X} '{}'", b, char::from(b))
    } else {
        format!("U+{b:04X}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uid_of_32_bytes_wins_over_any_hex_uid() {
        let hex = "ab".repeat(32);
        assert_eq!(user_nick_uid(&[7; 32], &hex), Ok([7; 32]));
        assert_eq!(user_nick_uid(&[7; 32], "junk"), Ok([7; 32]));
    }

    #[test]
    fn hex_uid_is_read_only_when_uid_is_not_32_bytes() {
        let hex = "aB".repeat(32);
        assert_eq!(user_nick_uid(&[], &hex), Ok([0xab; 32]));
        assert_eq!(user_nick_uid(&[1; 31], &hex), Ok([0xab; 32]));
        assert_eq!(user_nick_uid(&[1; 33], &hex), Ok([0xab; 32]));
    }

    #[test]
    fn neither_usable_is_brclients_error() {
        let bad = Err("invalid uid and hex_uid".to_owned());
        assert_eq!(user_nick_uid(&[], ""), bad);
        assert_eq!(user_nick_uid(&[1; 31], &"ab".repeat(31)), bad);
        assert_eq!(user_nick_uid(&[], &"ab".repeat(33)), bad);
        // A hex prefix does not resolve here, unlike a PM's `user`.
        assert_eq!(user_nick_uid(&[], "abcdef"), bad);
    }

    #[test]
    fn bad_hex_is_gos_encoding_hex_text_for_the_first_bad_byte() {
        let with = |s: &str| format!("{s}{}", "0".repeat(64 - s.len()));
        assert_eq!(
            user_nick_uid(&[], &with("0g")),
            Err("encoding/hex: invalid byte: U+0067 'g'".to_owned())
        );
        assert_eq!(
            user_nick_uid(&[], &with("zg")),
            Err("encoding/hex: invalid byte: U+007A 'z'".to_owned())
        );
        assert_eq!(
            user_nick_uid(&[], &with("0\n")),
            Err("encoding/hex: invalid byte: U+000A".to_owned())
        );
        // 'é' is two bytes; Go reports the first as a Latin-1 rune.
        let e = format!("é{}", "0".repeat(62));
        assert_eq!(
            user_nick_uid(&[], &e),
            Err("encoding/hex: invalid byte: U+00C3 'Ã'".to_owned())
        );
        assert_eq!(go_sharp_u(0xad), "U+00AD");
        assert_eq!(go_sharp_u(0xa0), "U+00A0");
    }
}
