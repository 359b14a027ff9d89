//! The grammar's own tests: the fast paths against the general parser, and the
//! number and whitespace rules against Go's.

use super::*;
use proptest::prelude::*;
use std::vec::Vec;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    /// Whatever the fast path accepts, the general parser accepts with the same
    /// header and body, in both modes.
    #[test]
    fn fast_path_agrees_with_general_parser(
        seed in prop::sample::select(std::vec![
            &b"--mcp[v=1,sid=a1b2c3d4e5f60718,mid=0000000000001000,seq=1/1,exp=0]--QQ=="[..],
            &b"--mcp[v=1,sid=0,mid=ffffffffffffffffffffffffffffffff,seq=64/64,exp=-1]--QUJD"[..],
            &b"--mcp[v=1,sid=aa,mid=bb,seq=2/3,exp=9223372036854775807]--AAAA"[..],
            // The usual form: two 16-hex ids and a text of 88 bytes or more.
            &b"--mcp[v=1,sid=a1b2c3d4e5f60718,mid=1032547698badcfe,seq=1/1,exp=1767225600]--QUJDQUJDQUJD"[..],
            &b"--mcp[v=1,sid=a1b2c3d4e5f60718,mid=1032547698badcfe,seq=1/1,exp=0]--QUJDQUJDQUJDQUJDQUJDQUJD"[..],
            &b"--mcp[v=1,sid=0123456789abcdef,mid=fedcba9876543210,seq=12/64,exp=-1767225600]--QUJDQUJD"[..],
            &b"--mcp[v=1,sid=ffffffffffffffff,mid=0000000000000000,seq=9/10,exp=999999999999999]--QQ=="[..],
            &b"--mcp[v=1,sid=a1b2c3d4e5f60718,mid=1032547698badcfe,seq=1/2,exp=17672256001]--QUJD \n"[..],
        ]),
        edits in proptest::collection::vec((any::<u16>(), 0u8..3, prop::sample::select(
            b"-[]=,/+0123456789abf AZvsqexp\n\xc2\x85".to_vec())), 0..3),
    ) {
        let mut text: Vec<u8> = seed.to_vec();
        for (at, op, byte) in edits {
            let at = usize::from(at) % (text.len() + 1);
            match op {
                0 if at < text.len() => text[at] = byte,
                1 => text.insert(at, byte),
                _ if at < text.len() => { text.remove(at); }
                _ => {}
            }
        }
        // As parse_with: compatible mode trims first; canonical takes the fast
        // path only for untrimmed text.
        let trimmed = trim_space(&text);
        for canonical in [false, true] {
            if canonical && trimmed.len() != text.len() {
                continue;
            }
            if let Some(fast) = encoder_form(trimmed, canonical) {
                let general = super::super::general(&text, trimmed, canonical);
                prop_assert_eq!(general, Ok(fast));
            }
        }
        // The usual form reads the text as given, untrimmed, in both modes.
        for canonical in [false, true] {
            if let Some(fast) = usual(&text, canonical) {
                let general = super::super::general(&text, trimmed, canonical);
                prop_assert_eq!(general, Ok(fast));
            }
        }
    }
}

#[test]
fn usual_form_is_read_at_fixed_places() {
    let body = "QUJD".repeat(8);
    let text = |seq: &str, exp: &str| {
        std::format!(
            "--mcp[v=1,sid=a1b2c3d4e5f60718,mid=1032547698badcfe,seq={seq},exp={exp}]--{body}"
        )
    };
    for (seq, exp) in [
        ("1/1", "1767225600"),
        ("64/64", "-999999999999999"),
        ("9/10", "0"),
        ("1/2", "17672256001"),
        ("2/2", "-1767225600"),
    ] {
        let text = text(seq, exp);
        let part = usual(text.as_bytes(), false);
        assert!(part.is_some(), "{text}");
        assert_eq!(part.map(|p| p.body), Some(body.as_bytes()));
        assert_eq!(
            part.map(|p| std::format!("{}", p.exp())).as_deref(),
            Some(exp)
        );
    }
    // Deadlines of 16 digits or more, and short texts, are the cursor's.
    for text in [
        text("1/1", "1000000000000000"),
        text("1/1", "-9223372036854775808"),
    ] {
        assert_eq!(usual(text.as_bytes(), false), None, "{text}");
        assert!(encoder_form(text.as_bytes(), false).is_some(), "{text}");
    }
    let short = "--mcp[v=1,sid=a1b2c3d4e5f60718,mid=1032547698badcfe,seq=1/1,exp=1767225600]--QQ==";
    assert_eq!(usual(short.as_bytes(), false), None);
}

#[test]
fn decimal_matches_go_parse_int() {
    assert_eq!(decimal(b"1"), Some(1));
    assert_eq!(decimal(b"+1"), Some(1));
    assert_eq!(decimal(b"0001"), Some(1));
    assert_eq!(decimal(b"-0"), Some(0));
    assert_eq!(decimal(b"-9223372036854775808"), Some(i64::MIN));
    assert_eq!(decimal(b"9223372036854775807"), Some(i64::MAX));
    assert_eq!(decimal(b"9223372036854775808"), None);
    assert_eq!(decimal(b""), None);
    assert_eq!(decimal(b"+"), None);
    assert_eq!(decimal(b"+-1"), None);
    assert_eq!(decimal(b"1_0"), None);
    assert_eq!(decimal(b" 1"), None);
    assert_eq!(decimal(b"1 "), None);
    assert_eq!(decimal("١".as_bytes()), None);
}

#[test]
fn canonical_decimals() {
    assert!(is_canonical_decimal(b"0", false));
    assert!(is_canonical_decimal(b"10", false));
    assert!(!is_canonical_decimal(b"01", false));
    assert!(!is_canonical_decimal(b"+1", false));
    assert!(!is_canonical_decimal(b"-1", false));
    assert!(is_canonical_decimal(b"-1", true));
    assert!(!is_canonical_decimal(b"-0", true));
    assert!(!is_canonical_decimal(b"-01", true));
}

#[test]
fn trim_matches_go_trim_space() {
    assert_eq!(trim_space(" \t\n\x0b\x0c\rx\r\n".as_bytes()), b"x");
    assert_eq!(
        trim_space(
            "\u{85}\u{a0}\u{1680}\u{2000}\u{200a}\u{2028}\u{2029}\u{202f}\u{205f}\u{3000}x\u{3000}"
                .as_bytes()
        ),
        b"x"
    );
    // Zero-width space and BOM are not White_Space.
    assert_eq!(trim_space("\u{200b}x".as_bytes()), "\u{200b}x".as_bytes());
    assert_eq!(trim_space("\u{feff}x".as_bytes()), "\u{feff}x".as_bytes());
    assert_eq!(trim_space(b"   "), b"");
}
