//! A bridge listening for remote agents (`--allow-remote`) with `allowed_ips`: an
//! agent from outside the list gets a wrong token's answer, and `bridge status` shows
//! the address refused and when. The remote agent is this machine dialing its own
//! non-loopback address; a machine without one skips the test, saying so.

use std::net::{IpAddr, UdpSocket};
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::processes::{bridge_settings, brmcp, free_port, spawn, start_devnet, wait_for};

/// This machine's address on its default route, if it has one (no packet is sent).
fn own_remote_address() -> Option<IpAddr> {
    let socket = UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect("203.0.113.1:9").ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

fn status_json(dir: &str) -> Value {
    let out = brmcp(&["bridge", "--datadir", dir, "status", "--json"])
        .output()
        .expect("status");
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_agent_outside_allowed_ips_is_refused_and_shown_in_status() {
    let Some(own) = own_remote_address() else {
        eprintln!("skipped: this machine has no non-loopback address to dial itself on");
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    let (mut procs, alice, _bob) = start_devnet(dir);
    let bridge_dir = bridge_settings(dir, &alice, "autopay");
    // A list that holds some other address only.
    let other = if own.to_string() == "198.51.100.7" {
        "198.51.100.8"
    } else {
        "198.51.100.7"
    };
    let settings_path = Path::new(&bridge_dir).join("mcpclient.json");
    let mut settings: Value =
        serde_json::from_slice(&std::fs::read(&settings_path).expect("settings")).expect("json");
    settings["allowed_ips"] = Value::from(vec![other]);
    std::fs::write(&settings_path, settings.to_string()).expect("write settings");
    let port = free_port();
    let rpc = dir.join("bob").join("brmcp-serve.conf");
    let bridge = spawn(
        &mut procs,
        brmcp(&[
            "bridge",
            "--datadir",
            &bridge_dir,
            "--rpc-config",
            rpc.to_str().expect("utf-8"),
            "--listen",
            &format!("0.0.0.0:{port}"),
            "--allow-remote",
        ]),
    );
    wait_for(&bridge, "Ctrl-C stops the bridge.");
    let token = String::from_utf8_lossy(
        &brmcp(&["bridge", "--datadir", &bridge_dir, "token", "show"])
            .output()
            .expect("token show")
            .stdout,
    )
    .trim()
    .to_owned();
    let host = match own {
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let client = reqwest::Client::new();
    let post = |token: String| {
        client
            .post(format!("http://{host}:{port}/mcp/alice"))
            .bearer_auth(token)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream")
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#)
            .send()
    };
    let right = post(token.clone()).await.expect("answered");
    let wrong = post("x".repeat(32)).await.expect("answered");
    assert_eq!(right.status(), 401);
    assert_eq!(wrong.status(), 401);
    assert_eq!(right.text().await.unwrap(), wrong.text().await.unwrap());

    let mut shown = Value::Null;
    for _ in 0..300 {
        shown = status_json(&bridge_dir);
        if shown["snapshot"]["refused_address"]["address"] == own.to_string() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        shown["snapshot"]["refused_address"]["address"],
        own.to_string(),
        "{shown:#}"
    );
    assert!(
        shown["snapshot"]["refused_address"]["at"].as_i64() > Some(0),
        "{shown:#}"
    );
    let out = brmcp(&["bridge", "--datadir", &bridge_dir, "status"])
        .output()
        .expect("status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "last remote address refused (not in allowed_ips): {own} at 20"
        )),
        "{text}"
    );
}
