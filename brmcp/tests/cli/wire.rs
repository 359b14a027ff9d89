//! `brmcp wire encode` and `brmcp wire inspect`, run as a user would.

use std::io::Write;
use std::process::{Command, Stdio};

fn brmcp(args: &[&str], stdin: &[u8]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn brmcp");
    // A command that refuses its arguments exits without reading: a closed pipe is fine.
    if let Err(e) = child.stdin.take().expect("stdin").write_all(stdin) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "write stdin: {e}");
    }
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn encode_then_inspect_round_trips() {
    let message = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello over Bison Relay"}}}"#;
    let (code, pms, err) = brmcp(
        &[
            "wire",
            "encode",
            "--sid",
            "0123456789abcdef",
            "--chunk",
            "40",
        ],
        message,
    );
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = pms.lines().collect();
    assert_eq!(lines.len(), message.len().div_ceil(40));
    assert!(
        lines
            .iter()
            .all(|l| l.starts_with("--mcp[v=1,sid=0123456789abcdef,"))
    );

    let (code, report, err) = brmcp(&["wire", "inspect", "--canonical"], pms.as_bytes());
    assert_eq!(code, 0, "{err}");
    let report: Vec<&str> = report.lines().collect();
    assert_eq!(report.len(), lines.len());
    let total: usize = report
        .iter()
        .map(|l| {
            assert!(l.starts_with("part sid=0123456789abcdef "), "{l}");
            l.rsplit("bytes=")
                .next()
                .and_then(|n| n.parse::<usize>().ok())
                .expect("bytes")
        })
        .sum();
    assert_eq!(total, message.len());
}

#[test]
fn inspect_explains_refusals_and_fails() {
    let input = b"hello, plain chat\n--mcp[v=1,sid=aa,mid=bb,seq=3/2,exp=0]--QUJD\n--mcp[v=1,sid=aa,mid=bb,seq=1/1,exp=0]--QUJD\n";
    let (code, report, _) = brmcp(&["wire", "inspect"], input);
    assert_eq!(code, 1, "a refused line makes the command fail");
    assert_eq!(
        report,
        "chat: not an envelope\nrefused: bad seq\npart sid=aa mid=bb seq=1/1 exp=0 bytes=3\n"
    );
}

#[test]
fn encode_refuses_bad_input_clearly() {
    let (code, _, err) = brmcp(&["wire", "encode"], b"not json");
    assert_eq!(code, 1);
    assert!(err.starts_with("brmcp: the message is not JSON"), "{err}");
    let (code, _, err) = brmcp(&["wire", "encode", "--sid", "XYZ"], b"{}");
    assert_eq!(code, 1);
    assert!(err.contains("--sid \"XYZ\""), "{err}");
    let (code, _, err) = brmcp(&["wire", "encode", "--chunk", "1"], &[b'1'; 65]);
    assert_eq!(code, 1);
    assert!(err.contains("65 parts"), "{err}");
    let (code, _, err) = brmcp(&["wire", "frobnicate"], b"");
    assert_eq!(code, 2, "usage errors exit 2: {err}");
}
