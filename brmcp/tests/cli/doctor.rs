//! `brmcp doctor` against a devnet node's directory: all checks pass, a loose
//! directory mode and a stopped client are each reported with what to fix.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn doctor(datadir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["doctor", "--datadir", datadir.to_str().unwrap()])
        .output()
        .expect("brmcp doctor")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn doctor_checks_permissions_configs_and_the_client() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut devnet = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["devnet", "--dir", dir.path().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("devnet");
    let lines = BufReader::new(devnet.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut alice = None;
    while Instant::now() < deadline {
        let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        let mut words = line.split_whitespace();
        if words.next() == Some("alice") {
            alice = words.next().map(str::to_owned);
        }
        if line.contains("Ctrl-C stops the devnet.") {
            break;
        }
    }
    let alice = alice.expect("alice's uid");
    let node = dir.path().join("alice");

    let out = doctor(&node);
    let said = stdout(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("TLS and auth accepted, brclient"), "{said}");
    assert!(said.contains(&format!("identity: alice {alice}")), "{said}");
    assert!(said.contains("directories 0700, files 0600"), "{said}");

    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = doctor(&node);
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!("`chmod 700 {}`", node.display())),
        "{said}"
    );
    std::fs::set_permissions(&node, std::fs::Permissions::from_mode(0o700)).unwrap();

    let _ = devnet.kill();
    let _ = devnet.wait();
    let out = doctor(&node);
    let said = stdout(&out);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("FIX   clientrpc at wss://127.0.0.1:"),
        "{said}"
    );
    assert!(
        said.contains("is brclient running") || said.contains("check that brclient runs"),
        "{said}"
    );
}

#[test]
fn a_devnet_in_a_relative_directory_writes_paths_that_work_from_anywhere() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut devnet = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["devnet", "--dir", "./net"])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("devnet");
    let lines = BufReader::new(devnet.stdout.take().unwrap());
    let mut ready = false;
    for line in lines.lines().map_while(Result::ok) {
        if line.contains("Ctrl-C stops the devnet.") {
            ready = true;
            break;
        }
    }
    assert!(ready, "devnet did not start");
    let node = dir.path().join("net").join("alice");
    let conf = std::fs::read_to_string(node.join("brmcp-serve.conf")).expect("conf");
    for key in [
        "servercertpath",
        "clientcertpath",
        "clientkeypath",
        "datadir",
    ] {
        let value = conf
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("{key} in {conf}"));
        assert!(Path::new(value).is_absolute(), "{key}={value}");
    }
    // Run from another folder than devnet was: the doctor reaches the client.
    let out = Command::new(env!("CARGO_BIN_EXE_brmcp"))
        .args(["doctor", "--datadir", node.to_str().unwrap()])
        .current_dir("/")
        .output()
        .expect("brmcp doctor");
    let said = stdout(&out);
    let _ = devnet.kill();
    let _ = devnet.wait();
    assert!(out.status.success(), "{said}");
    assert!(said.contains("TLS and auth accepted, brclient"), "{said}");
}
