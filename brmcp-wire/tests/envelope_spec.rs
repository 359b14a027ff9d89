//! Runs the spec cases of `tests/vectors/envelope.json`, written from WIRE.md.
//!
//! Each case is `{"name", "input" | "input_hex", "mode", then "expect" | "error"}`:
//!
//! - `input` is the PM as text; `input_hex` the PM as bytes, for PMs that are not UTF-8.
//! - `mode` is `"compatible"` or `"canonical"`.
//! - `expect` is `{"sid", "mid", "seq", "total", "exp", "body_hex"}`: the part parses and
//!   its body decodes to `body_hex`. An optional `expiry` list of `{"now", "expired"}`
//!   checks the deadline rule of WIRE.md §4.5.
//! - `error` names the refusal as the `Debug` text of the [`ParseError`] begins, so
//!   `"Body"`, `"Body(Invalid)"` and `"Body(Invalid { offset: 3 })"` all match a body
//!   refused at byte 3. A body refused by `Part::decode_body` counts as
//!   `ParseError::Body`. `foreign` is the expected `ParseError::is_foreign`.
//!
//! A part is valid when `parse` and `Part::decode_body` both succeed (WIRE.md §3.5).

use std::collections::BTreeSet;

use brmcp_wire::{
    Header, Mode, ParseError, UnixTime, encode_part, parse, parse_bytes, parse_canonical,
    parse_with,
};
use serde_json::Value;

const CASES: &str = include_str!("vectors/envelope.json");

fn cases() -> Vec<Value> {
    let doc: Value = serde_json::from_str(CASES).expect("envelope.json is JSON");
    doc["cases"].as_array().expect("a cases array").clone()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    assert!(text.len().is_multiple_of(2), "odd-length hex {text:?}");
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The PM of a case, and its text when it is UTF-8.
fn input(case: &Value) -> (Vec<u8>, Option<String>) {
    if let Some(text) = case["input"].as_str() {
        return (text.as_bytes().to_vec(), Some(text.to_string()));
    }
    let bytes = unhex(case["input_hex"].as_str().expect("input or input_hex"));
    let text = String::from_utf8(bytes.clone()).ok();
    (bytes, text)
}

/// Parses with every entry point that serves `mode`, checks they agree, then decodes.
fn run(bytes: &[u8], text: Option<&str>, mode: Mode) -> Result<(Header, Vec<u8>), ParseError> {
    let part = parse_with(bytes, mode);
    match (mode, text) {
        (Mode::Compatible, Some(t)) => {
            assert_eq!(parse(t), part, "parse and parse_with differ");
            assert_eq!(
                parse_bytes(bytes),
                part,
                "parse_bytes and parse_with differ"
            );
        }
        (Mode::Compatible, None) => {
            assert_eq!(
                parse_bytes(bytes),
                part,
                "parse_bytes and parse_with differ"
            );
        }
        (Mode::Canonical, Some(t)) => {
            assert_eq!(
                parse_canonical(t),
                part,
                "parse_canonical and parse_with differ"
            );
        }
        (Mode::Canonical, None) => {}
        (other, _) => panic!("no entry point check for mode {other:?}"),
    }
    let part = part?;
    let mut chunk = vec![0u8; part.decoded_len_max()];
    let n = part.decode_body(&mut chunk)?;
    chunk.truncate(n);
    Ok((*part.header(), chunk))
}

/// Whether `debug` (an error's `Debug` text) is named by `want` (see the module docs).
fn names(debug: &str, want: &str) -> bool {
    let want = want.trim_end_matches(')');
    debug.strip_prefix(want).is_some_and(|rest| {
        !rest
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// Checks one case; returns what is wrong with it.
fn check(case: &Value) -> Result<(), String> {
    let (bytes, text) = input(case);
    let mode = match case["mode"].as_str() {
        Some("compatible") => Mode::Compatible,
        Some("canonical") => Mode::Canonical,
        other => return Err(format!("unknown mode {other:?}")),
    };
    let got = run(&bytes, text.as_deref(), mode);
    if let Some(want) = case["error"].as_str() {
        let e = match got {
            Ok((h, chunk)) => {
                return Err(format!(
                    "accepted as {h:?} with body {}, want {want}",
                    hex(&chunk)
                ));
            }
            Err(e) => e,
        };
        let debug = format!("{e:?}");
        if !names(&debug, want) {
            return Err(format!("refused as {debug}, want {want}"));
        }
        if let Some(foreign) = case["foreign"].as_bool()
            && e.is_foreign() != foreign
        {
            return Err(format!("{debug}: is_foreign() is {}", e.is_foreign()));
        }
        return Ok(());
    }
    let want = &case["expect"];
    let (h, chunk) = got.map_err(|e| format!("refused as {e:?} ({e}), want {want}"))?;
    let seen = serde_json::json!({
        "sid": h.sid().as_str(),
        "mid": h.mid().as_str(),
        "seq": h.seq(),
        "total": h.total(),
        "exp": h.exp(),
        "body_hex": hex(&chunk),
    });
    if &seen != want {
        return Err(format!("accepted as {seen}, want {want}"));
    }
    if mode == Mode::Canonical {
        // Canonical parts are exactly the encoder's output (WIRE.md §7).
        let mut out = vec![0u8; h.encoded_len(chunk.len())];
        let n = encode_part(&h, &chunk, &mut out).map_err(|e| format!("encode: {e}"))?;
        if out[..n] != bytes[..] {
            return Err(format!(
                "canonical part re-encodes as {:?}",
                String::from_utf8_lossy(&out[..n])
            ));
        }
    }
    for check in case["expiry"].as_array().into_iter().flatten() {
        let now = check["now"].as_i64().ok_or("expiry.now")?;
        let expired = check["expired"].as_bool().ok_or("expiry.expired")?;
        if h.is_expired(UnixTime(now)) != expired {
            return Err(format!("is_expired at {now} is not {expired}"));
        }
        if brmcp_wire::is_expired(h.exp(), UnixTime(now)) != expired {
            return Err(format!("is_expired({}, {now}) is not {expired}", h.exp()));
        }
    }
    Ok(())
}

#[test]
fn envelope_cases() {
    let cases = cases();
    assert!(cases.len() >= 40, "only {} cases", cases.len());
    let mut failures = Vec::new();
    let mut names_seen = BTreeSet::new();
    for case in &cases {
        let name = case["name"].as_str().expect("every case has a name");
        assert!(names_seen.insert(name), "two cases named {name}");
        if let Err(why) = check(case) {
            failures.push(format!("{name}: {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases fail:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The cases exercise every refusal, both modes, both kinds of refusal and the byte path.
#[test]
fn cases_cover_every_refusal() {
    let cases = cases();
    let errors: Vec<&str> = cases.iter().filter_map(|c| c["error"].as_str()).collect();
    let every = [
        "NotEnvelope",
        "UnsupportedVersion",
        "SurroundingWhitespace",
        "UnterminatedTag",
        "MissingEquals",
        "MissingField(Version)",
        "MissingField(Sid)",
        "MissingField(Mid)",
        "MissingField(Seq)",
        "MissingField(Exp)",
        "BadNumber(Version)",
        "BadNumber(Seq)",
        "BadNumber(Exp)",
        "BadId(Sid)",
        "BadId(Mid)",
        "BadSeq",
        "DuplicateField",
        "UnknownField",
        "FieldOrder",
        "NonCanonicalNumber(Version)",
        "NonCanonicalNumber(Seq)",
        "NonCanonicalNumber(Exp)",
        "Body(Empty)",
        "Body(Invalid",
        "Body(Whitespace",
        "Body(TrailingBits",
    ];
    for variant in every {
        assert!(
            errors.iter().any(|e| e.starts_with(variant)),
            "no case is refused as {variant}"
        );
    }
    for mode in ["compatible", "canonical"] {
        for outcome in ["expect", "error"] {
            assert!(
                cases
                    .iter()
                    .any(|c| c["mode"] == mode && !c[outcome].is_null()),
                "no {mode} case with {outcome}"
            );
        }
    }
    for foreign in [true, false] {
        assert!(cases.iter().any(|c| c["foreign"] == foreign));
    }
    assert!(cases.iter().any(|c| c["input_hex"].is_string()));
    assert!(cases.iter().any(|c| c["expiry"].is_array()));
}
