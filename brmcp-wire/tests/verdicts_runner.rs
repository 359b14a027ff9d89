//! The conformance runner (`examples/verdicts.rs`) prints exactly the Go verdict shape.

#[allow(dead_code)]
#[path = "../examples/verdicts.rs"]
mod verdicts;

use brmcp_wire::Mode;
use serde_json::Value;

#[test]
fn runner_output_equals_go_verdicts_field_for_field() {
    let text = include_str!("vectors/go/wire-parse-go.jsonl");
    let mut n = 0;
    for line in text.split('\n').filter(|l| !l.is_empty()) {
        let case: Value = serde_json::from_str(line).expect("json");
        let body = case["body"].as_str().expect("body");
        let printed = verdicts::verdict(body, Mode::Compatible);
        let mut ours: Value = serde_json::from_str(&printed).expect("runner prints JSON");
        let error = ours.as_object_mut().and_then(|o| o.remove("error"));
        assert_eq!(ours, case["go"], "{}", case["case"]);
        // A refusal says why; an acceptance does not carry an error.
        assert_eq!(
            error.is_some(),
            case["go"]["ok"] == false,
            "{}",
            case["case"]
        );
        if case["go"]["ok"] == true {
            // Key order as the Go verdicts print it.
            assert!(printed.starts_with("{\"ok\":true,\"sid\":"), "{printed}");
            assert!(printed.contains(",\"chunk_b64\":"), "{printed}");
        }
        n += 1;
    }
    assert_eq!(n, 276);
}

#[test]
fn canonical_mode_refuses_what_compatible_accepts() {
    let body = "--mcp[v=01,sid=aa,mid=bb,seq=1/1,exp=0]--QUJD";
    assert!(verdicts::verdict(body, Mode::Compatible).starts_with("{\"ok\":true"));
    assert_eq!(
        verdicts::verdict(body, Mode::Canonical),
        "{\"ok\":false,\"error\":\"non-canonical number in v\"}"
    );
}
