//! Differential tests against the Go implementation's verdicts.
//!
//! The cases live in `tests/vectors/go/` (copied from the Go reference codec with its
//! verdicts). When a `shared/vectors` directory sits beside the checkout, its cases are
//! checked too, so a newer set is picked up without copying.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use brmcp_wire::{
    Chunks, DEFAULT_CHUNK_LEN, EncodeError, Header, MessageId, Mode, SessionId, encode_part,
    parse_with,
};
use serde_json::Value;

fn vector_files(name: &str) -> Vec<PathBuf> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![here.join("tests/vectors/go").join(name)];
    let shared = here.join("../../shared/vectors").join(name);
    if shared.is_file() {
        files.push(shared);
    }
    files
}

fn lines(name: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for file in vector_files(name) {
        let text = std::fs::read_to_string(&file).expect("vector file");
        for line in text.split('\n').filter(|l| !l.trim().is_empty()) {
            out.push(serde_json::from_str(line).expect("vector line is JSON"));
        }
    }
    assert!(!out.is_empty());
    out
}

/// The full verdict: parse, then decode the body.
fn verdict(body: &str) -> Option<(Header, Vec<u8>)> {
    let part = parse_with(body.as_bytes(), Mode::Compatible).ok()?;
    let mut chunk = vec![0u8; part.decoded_len_max()];
    let n = part.decode_body(&mut chunk).ok()?;
    chunk.truncate(n);
    Some((*part.header(), chunk))
}

#[test]
fn parse_agrees_with_go_on_every_case() {
    let cases = lines("wire-parse-go.jsonl");
    let mut accepted = 0;
    for case in &cases {
        let name = case["case"].as_str().unwrap_or("?");
        let body = case["body"].as_str().expect("body");
        let go = &case["go"];
        let ours = verdict(body);
        let go_ok = go["ok"].as_bool().expect("ok");
        assert_eq!(ours.is_some(), go_ok, "verdict differs on {name}: {body:?}");
        if let Some((h, chunk)) = ours {
            accepted += 1;
            assert_eq!(h.sid().as_str(), go["sid"].as_str().unwrap(), "{name}");
            assert_eq!(h.mid().as_str(), go["mid"].as_str().unwrap(), "{name}");
            assert_eq!(i64::from(h.seq()), go["seq"].as_i64().unwrap(), "{name}");
            assert_eq!(
                i64::from(h.total()),
                go["total"].as_i64().unwrap(),
                "{name}"
            );
            assert_eq!(h.exp(), go["exp"].as_i64().unwrap(), "{name}");
            let want = STANDARD
                .decode(go["chunk_b64"].as_str().unwrap())
                .expect("chunk_b64");
            assert_eq!(chunk, want, "{name}");
        }
    }
    assert!(accepted > 0 && accepted < cases.len());
}

/// The payload generator of the vectors (xorshift64, shifts 13/7/17, little-endian).
fn gen_payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[test]
fn payload_generator_matches_its_spec() {
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(hex(&gen_payload(1, 16)), "41208240000000004114010c06410010");
    assert_eq!(
        hex(&gen_payload(25, 24)),
        "5926b14c0600000055f200ac56590690f1c6cc9292eb04f0"
    );
}

fn payload_of(case: &Value) -> Vec<u8> {
    if let Some(b64) = case["payload_b64"].as_str() {
        return STANDARD.decode(b64).expect("payload_b64");
    }
    let g = &case["payload_gen"];
    let len = usize::try_from(g["len"].as_u64().unwrap()).unwrap();
    gen_payload(g["seed"].as_u64().unwrap(), len)
}

#[test]
fn encode_reproduces_go_output_and_refusals() {
    let cases = lines("wire-encode-go.jsonl");
    for case in &cases {
        let name = case["case"].as_str().unwrap_or("?");
        let payload = payload_of(case);
        assert_eq!(
            payload.len() as u64,
            case["payload_len"].as_u64().unwrap(),
            "{name}"
        );
        let chunk = case["chunk"].as_i64().unwrap();
        let chunk = if chunk <= 0 {
            DEFAULT_CHUNK_LEN
        } else {
            usize::try_from(chunk).unwrap()
        };
        let exp = case["exp"].as_i64().unwrap();
        let mid: MessageId = case["mid"].as_str().unwrap().parse().expect("mid");
        let ok = case["ok"].as_bool().unwrap();
        // Go checks the sid first, then the payload, then the part count.
        let sid = case["sid"].as_str().unwrap().parse::<SessionId>();
        let planned = sid
            .map_err(|_| None)
            .and_then(|sid| Chunks::new(sid, mid, exp, &payload, chunk).map_err(Some));
        match (ok, planned) {
            (true, Ok(chunks)) => {
                let want: Vec<&str> = case["parts"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| p.as_str().unwrap())
                    .collect();
                let mut buf = vec![0u8; chunks.max_pm_len()];
                let got: Vec<String> = chunks
                    .map(|(h, c)| {
                        let n = encode_part(&h, c, &mut buf).expect("encode");
                        assert_eq!(n, h.encoded_len(c.len()));
                        String::from_utf8(buf[..n].to_vec()).unwrap()
                    })
                    .collect();
                assert_eq!(got, want, "{name}");
            }
            (false, Err(why)) => {
                let go = case["error"].as_str().unwrap();
                match why {
                    None => assert!(go.starts_with("wire: invalid sid"), "{name}: {go}"),
                    Some(EncodeError::EmptyPayload) => assert_eq!(go, "wire: empty payload"),
                    Some(EncodeError::TooManyParts { .. }) => {
                        assert_eq!(go, "message exceeds size bounds", "{name}")
                    }
                    Some(other) => panic!("{name}: unexpected refusal {other}"),
                }
            }
            (ok, got) => panic!("{name}: go ok={ok}, ours {got:?}"),
        }
    }
}
