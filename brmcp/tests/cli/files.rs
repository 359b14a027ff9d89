//! The data directories' files, as the commands leave them: every directory 0700 and
//! every file 0600 under umask 000, and a symbolic link planted where a file of ours
//! belongs refused with a clear error, nothing written where it points.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const UID: &str = "a1b2c3d4e5f60718a1b2c3d4e5f60718a1b2c3d4e5f60718a1b2c3d4e5f60718";

/// `brmcp args` under umask 000.
fn loose(args: &[&str]) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(r#"umask 000; exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_brmcp"))
        .args(args);
    cmd
}

fn run(args: &[&str]) -> Output {
    loose(args).output().expect("run brmcp")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every directory and file under `root` with a mode other than 0700 / 0600.
fn loose_modes(root: &Path, found: &mut Vec<String>, files: &mut usize) {
    for entry in std::fs::read_dir(root).expect("read dir") {
        let path = entry.expect("entry").path();
        let meta = std::fs::symlink_metadata(&path).expect("lstat");
        let mode = meta.permissions().mode() & 0o777;
        if meta.is_dir() {
            if mode != 0o700 {
                found.push(format!("{} {mode:o}", path.display()));
            }
            loose_modes(&path, found, files);
        } else {
            *files += 1;
            if mode != 0o600 {
                found.push(format!("{} {mode:o}", path.display()));
            }
        }
    }
}

#[test]
fn every_file_is_private_under_umask_000() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().join("data");
    let serve = root.join("serve");
    let bridge = root.join("bridge");
    let (serve, bridge) = (serve.to_str().unwrap(), bridge.to_str().unwrap());
    for args in [
        &["serve", "--datadir", serve][..],
        &[
            "serve",
            "--datadir",
            serve,
            "credit",
            UID,
            "5",
            "--reason",
            "t",
            "--create",
        ],
        &["serve", "--datadir", serve, "balances"],
        &["bridge", "--datadir", bridge, "bots", "add", "alice", UID],
        &["bridge", "--datadir", bridge, "token", "show"],
        &["bridge", "--datadir", bridge, "spend"],
    ] {
        let out = run(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
    }
    // The devnet writes keys, certificates and configs.
    let devnet = root.join("devnet");
    let mut child = loose(&["devnet", "--dir", devnet.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("devnet");
    let stdout = child.stdout.take().expect("stdout");
    let ready = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("In another terminal"))
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(ready.join().unwrap_or(false), "devnet did not start");

    let mut found = Vec::new();
    let mut files = 0;
    let meta = std::fs::metadata(&root).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    loose_modes(&root, &mut found, &mut files);
    assert!(files >= 10, "only {files} files written");
    assert!(found.is_empty(), "not private:\n{}", found.join("\n"));
}

#[test]
fn planted_links_are_refused_and_nothing_is_written_through_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("target");
    let cases: [(&str, &[&str]); 5] = [
        ("mcpclient.json", &["bots", "add", "alice", UID]),
        ("mcpspend.sqlite", &["spend"]),
        ("mcpspend.sqlite-wal", &["spend"]),
        ("brmcp-serve.conf", &[]),
        ("brmcp.sqlite", &["credit", UID, "5", "--reason", "t"]),
    ];
    for (i, (file, args)) in cases.iter().enumerate() {
        let data = dir.path().join(format!("d{i}"));
        std::fs::create_dir(&data).unwrap();
        std::os::unix::fs::symlink(&target, data.join(file)).unwrap();
        let data = data.to_str().unwrap();
        let command = if file.starts_with("mcp") {
            "bridge"
        } else {
            "serve"
        };
        let mut all = vec![command, "--datadir", data];
        all.extend_from_slice(args);
        if *file == "brmcp.sqlite" {
            // The first run writes the templates; then the ledger is opened.
            let _ = run(&["serve", "--datadir", data]);
        }
        let out = run(&all);
        let said = text(&out);
        assert!(!out.status.success(), "{file}: {said}");
        assert!(
            said.contains("symbolic link") && said.contains(file),
            "{file}: {said}"
        );
        assert!(!target.exists(), "{file}: written through the link");
    }
}
