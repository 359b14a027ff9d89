//! Spec drift guard: the examples and tables of `WIRE.md` must be what the crate does.
//!
//! Every line of WIRE.md that begins with `--mcp[` (after trimming) is an example PM. The
//! lines right after it state its outcome (WIRE.md §11):
//!
//! - `=> OUTCOME` holds in both modes; `compatible => OUTCOME` and `canonical => OUTCOME`
//!   hold in one mode each. Every example must state an outcome for both modes.
//! - `OUTCOME` is `sid=S mid=M seq=N/T exp=E payload=TEXT` (TEXT is the rest of the line)
//!   or the same with `payload_hex=HEX`; `refused: REASON` for a malformed part; or
//!   `ignored: REASON` for a foreign one. REASON is the `Display` text of the error.
//!
//! The PM is the example line exactly as written, leading spaces included.

use brmcp_wire::limits::{
    DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_PEER_BYTES, DEFAULT_MAX_PENDING_PER_PEER,
    DEFAULT_MAX_TOTAL_BYTES, DEFAULT_PARTIAL_TIMEOUT_SECS,
};
use brmcp_wire::{
    DEFAULT_CHUNK_LEN, Header, MAX_ID_LEN, MAX_PARTS, MAX_PM_LEN, Mode, ParseError, VERSION,
    encode_part, parse_with,
};

const WIRE_MD: &str = include_str!("../../WIRE.md");

/// What a PM is, in one mode.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Part {
        sid: String,
        mid: String,
        seq: u16,
        total: u16,
        exp: i64,
        payload: Vec<u8>,
    },
    Refused(String),
    Ignored(String),
}

/// The crate's verdict: parse, then decode the body.
fn verdict(pm: &str, mode: Mode) -> (Outcome, Option<Header>) {
    let failed = |e: ParseError| {
        if e.is_foreign() {
            Outcome::Ignored(e.to_string())
        } else {
            Outcome::Refused(e.to_string())
        }
    };
    let part = match parse_with(pm.as_bytes(), mode) {
        Ok(part) => part,
        Err(e) => return (failed(e), None),
    };
    let mut chunk = vec![0u8; part.decoded_len_max()];
    match part.decode_body(&mut chunk) {
        Ok(n) => {
            chunk.truncate(n);
            let h = *part.header();
            let outcome = Outcome::Part {
                sid: h.sid().to_string(),
                mid: h.mid().to_string(),
                seq: h.seq(),
                total: h.total(),
                exp: h.exp(),
                payload: chunk,
            };
            (outcome, Some(h))
        }
        Err(e) => (failed(e.into()), None),
    }
}

fn unhex(hex: &str) -> Result<Vec<u8>, String> {
    if !hex.len().is_multiple_of(2) {
        return Err(format!("odd-length hex {hex:?}"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| format!("{hex:?}: {e}")))
        .collect()
}

/// Parses the text after `=>`.
fn parse_outcome(text: &str) -> Result<Outcome, String> {
    let text = text.trim_start();
    if let Some(reason) = text.strip_prefix("refused: ") {
        return Ok(Outcome::Refused(reason.trim_end().to_string()));
    }
    if let Some(reason) = text.strip_prefix("ignored: ") {
        return Ok(Outcome::Ignored(reason.trim_end().to_string()));
    }
    let mut rest = text;
    let mut field = |key: &str| -> Result<String, String> {
        let value = rest
            .strip_prefix(key)
            .ok_or_else(|| format!("expected {key:?} in {text:?}"))?;
        let (value, tail) = value.split_once(' ').ok_or("outcome ends too early")?;
        rest = tail;
        Ok(value.to_string())
    };
    let sid = field("sid=")?;
    let mid = field("mid=")?;
    let seq = field("seq=")?;
    let exp = field("exp=")?;
    let (seq, total) = seq.split_once('/').ok_or("seq without '/'")?;
    let number = |s: &str| s.parse::<u16>().map_err(|e| format!("{s:?}: {e}"));
    let payload = if let Some(hex) = rest.strip_prefix("payload_hex=") {
        unhex(hex.trim_end())?
    } else if let Some(text) = rest.strip_prefix("payload=") {
        text.as_bytes().to_vec()
    } else {
        return Err(format!("expected payload= or payload_hex= in {text:?}"));
    };
    Ok(Outcome::Part {
        sid,
        mid,
        seq: number(seq)?,
        total: number(total)?,
        exp: exp.parse().map_err(|e| format!("exp {exp:?}: {e}"))?,
        payload,
    })
}

/// One example of WIRE.md: its line number, the PM, and the outcome in each mode.
struct Example<'a> {
    line: usize,
    pm: &'a str,
    compatible: Outcome,
    canonical: Outcome,
}

fn examples() -> Result<Vec<Example<'static>>, String> {
    let lines: Vec<&str> = WIRE_MD.split('\n').collect();
    let mut out = Vec::new();
    for (i, &raw) in lines.iter().enumerate() {
        let pm = raw.strip_suffix('\r').unwrap_or(raw);
        if !pm.trim().starts_with("--mcp[") {
            continue;
        }
        let (mut compatible, mut canonical) = (None, None);
        for next in lines[i + 1..].iter().map(|l| l.trim()) {
            let (modes, text) = if let Some(t) = next.strip_prefix("=>") {
                ((true, true), t)
            } else if let Some(t) = next.strip_prefix("compatible =>") {
                ((true, false), t)
            } else if let Some(t) = next.strip_prefix("canonical =>") {
                ((false, true), t)
            } else {
                break;
            };
            let outcome = parse_outcome(text).map_err(|e| format!("line {}: {e}", i + 1))?;
            for (wanted, slot) in [(modes.0, &mut compatible), (modes.1, &mut canonical)] {
                if wanted && slot.replace(outcome.clone()).is_some() {
                    return Err(format!("line {}: two outcomes for one mode", i + 1));
                }
            }
        }
        let (Some(compatible), Some(canonical)) = (compatible, canonical) else {
            return Err(format!(
                "line {}: example without an outcome for each mode: {pm:?}",
                i + 1
            ));
        };
        out.push(Example {
            line: i + 1,
            pm,
            compatible,
            canonical,
        });
    }
    Ok(out)
}

#[test]
fn every_example_matches_its_outcome() {
    let examples = examples().unwrap_or_else(|e| panic!("WIRE.md: {e}"));
    assert!(
        examples.len() >= 8,
        "WIRE.md has only {} examples",
        examples.len()
    );
    let mut failures = Vec::new();
    let mut parts = 0;
    let mut canonical_parts = 0;
    let mut refusals = 0;
    for ex in &examples {
        for (mode, want) in [
            (Mode::Compatible, &ex.compatible),
            (Mode::Canonical, &ex.canonical),
        ] {
            let (got, header) = verdict(ex.pm, mode);
            if &got != want {
                failures.push(format!(
                    "line {} ({mode:?}): {:?}\n  WIRE.md says {want:?}\n  the crate says {got:?}",
                    ex.line, ex.pm
                ));
                continue;
            }
            match (&got, header) {
                (Outcome::Part { payload, .. }, Some(h)) => {
                    parts += 1;
                    if mode == Mode::Canonical {
                        // A canonical part is exactly what the encoder emits (WIRE.md §7).
                        canonical_parts += 1;
                        let mut buf = vec![0u8; h.encoded_len(payload.len())];
                        let n = encode_part(&h, payload, &mut buf);
                        if n != Ok(buf.len()) || buf != ex.pm.as_bytes() {
                            failures.push(format!(
                                "line {}: canonical example is not the encoder's output: {:?}",
                                ex.line,
                                String::from_utf8_lossy(&buf)
                            ));
                        }
                    }
                }
                _ => refusals += 1,
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(parts > 0 && canonical_parts > 0 && refusals > 0);
}

/// The number at the start of a table cell, such as `16777216 (16 MiB)`.
fn leading_number(cell: &str) -> Option<u64> {
    let digits: String = cell
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[test]
fn limits_table_matches_the_code() {
    let expected: [(&str, u64); 10] = [
        (
            "DEFAULT_MAX_PENDING_PER_PEER",
            DEFAULT_MAX_PENDING_PER_PEER as u64,
        ),
        (
            "DEFAULT_MAX_MESSAGE_BYTES",
            DEFAULT_MAX_MESSAGE_BYTES as u64,
        ),
        ("DEFAULT_MAX_PEER_BYTES", DEFAULT_MAX_PEER_BYTES as u64),
        ("DEFAULT_MAX_TOTAL_BYTES", DEFAULT_MAX_TOTAL_BYTES as u64),
        ("DEFAULT_PARTIAL_TIMEOUT_SECS", DEFAULT_PARTIAL_TIMEOUT_SECS),
        ("VERSION", u64::from(VERSION)),
        ("MAX_PARTS", u64::from(MAX_PARTS)),
        ("MAX_ID_LEN", MAX_ID_LEN as u64),
        ("DEFAULT_CHUNK_LEN", DEFAULT_CHUNK_LEN as u64),
        ("MAX_PM_LEN", MAX_PM_LEN as u64),
    ];
    for (name, value) in expected {
        let tick = format!("`{name}`");
        // The row whose second-last cell names the constant; its last cell is the value.
        let row = WIRE_MD
            .lines()
            .filter(|l| l.trim_start().starts_with('|'))
            .map(|l| l.trim().trim_matches('|').split('|').collect::<Vec<_>>())
            .find(|cells| cells.iter().any(|c| c.trim() == tick))
            .unwrap_or_else(|| panic!("WIRE.md has no table row for {name}"));
        let at = row.iter().position(|c| c.trim() == tick).unwrap_or(0);
        let cell = row
            .get(at + 1)
            .unwrap_or_else(|| panic!("row for {name} has no value"));
        assert_eq!(
            leading_number(cell),
            Some(value),
            "WIRE.md gives {name} as {cell:?}"
        );
    }
}

#[test]
fn sections_are_numbered_as_the_code_cites_them() {
    // The crate's doc comments cite §3 to §7 by number; the rest follow in order.
    let titles: Vec<&str> = WIRE_MD
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .collect();
    let want = [
        "1. Stability",
        "2. Overview",
        "3. Envelope grammar",
        "4. Fields",
        "5. Chunking and encoding",
        "6. Reassembly and limits",
        "7. Compatible and canonical mode",
        "8. Sessions",
        "9. Identity and authorization",
        "10. The `_meta` keys",
        "11. Worked examples",
        "12. Conformance",
        "13. Announcements in posts",
    ];
    assert_eq!(titles, want);
}

#[test]
fn cited_tests_and_cases_exist() {
    // Every `path.rs::name` in WIRE.md names a test function in that file, and every
    // `sN-*` case pattern matches a case of tests/vectors/envelope.json.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut cited = 0;
    for token in WIRE_MD.split('`') {
        let Some((file, name)) = token.split_once(".rs::") else {
            continue;
        };
        let path = root.join(format!("{file}.rs"));
        let source = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("WIRE.md cites {token}: {}: {e}", path.display()));
        assert!(
            source.contains(&format!("fn {name}(")),
            "WIRE.md cites {token}, which {file}.rs does not define"
        );
        cited += 1;
    }
    assert!(cited > 20, "only {cited} tests cited");

    let cases = include_str!("vectors/envelope.json");
    for token in WIRE_MD.split('`') {
        let Some(prefix) = token.strip_suffix('*') else {
            continue;
        };
        if prefix.starts_with('s') && prefix.ends_with('-') {
            assert!(
                cases.contains(&format!("\"name\": \"{prefix}")),
                "WIRE.md cites cases {token}, and envelope.json has none"
            );
        }
    }
}
