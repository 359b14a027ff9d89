//! `allowed_ips`: a remote agent outside the list is refused exactly as a wrong token
//! is (same status, headers that matter and body), whatever token it presents; one
//! inside passes; loopback agents are never remote; the last refused address is kept
//! for `bridge status`. The peer address is set the way a host's own server sets it
//! (axum's `ConnectInfo`), so remote IPv4 and IPv6 peers are tested on any machine.

use std::net::SocketAddr;

use brmcp::bridge::SETTINGS_FILE;

use crate::common::{INITIALIZE, autopay, env, http, served_as_from};

const TOKEN: &str = "a11a11a11a11a11a11a11a11a11a11a1";

async fn initialize(
    addr: SocketAddr,
    path: &str,
    token: &str,
) -> (u16, Vec<(String, String)>, String) {
    let auth = format!("Bearer {token}");
    let (status, headers, body) = http(
        addr,
        "POST",
        path,
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        INITIALIZE,
    )
    .await;
    // Only what a client can tell apart: the date differs from one answer to the next.
    let headers = headers.into_iter().filter(|(k, _)| k != "date").collect();
    (status, headers, body)
}

#[tokio::test]
async fn outside_the_list_is_refused_as_a_wrong_token_and_inside_passes() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.enabled = true;
        s.token = TOKEN.into();
        s.allowed_ips = vec![
            "192.0.2.0/24".into(),
            "2001:db8::/32".into(),
            "198.51.100.7".into(),
        ];
        s
    })
    .await;
    let path = format!("/mcp/{}", env.bot_id);
    for (peer, allowed) in [
        ("192.0.2.200:5000", true),
        ("198.51.100.7:5000", true),
        ("[2001:db8:1::5]:5000", true),
        ("[::ffff:192.0.2.9]:5000", true),
        ("127.0.0.1:5000", true),
        ("[::1]:5000", true),
        ("192.0.3.1:5000", false),
        ("198.51.100.8:5000", false),
        ("[2001:db9::1]:5000", false),
    ] {
        let peer: SocketAddr = peer.parse().unwrap();
        let addr = served_as_from(&env.bridge, peer).await;
        let right = initialize(addr, &path, TOKEN).await;
        if allowed {
            assert_eq!(right.0, 200, "{peer}: {}", right.2);
            continue;
        }
        let wrong = initialize(addr, &path, "wrong-wrong-wrong-wrong-wrong-wrong").await;
        assert_eq!(wrong.0, 401, "{peer}");
        assert_eq!(
            right, wrong,
            "{peer}: the refusal says nothing of the address"
        );
        let refused = env.bridge.last_refused_address().expect("recorded");
        assert_eq!(refused.ip, peer.ip(), "the last refused address");
        // The approval routes too.
        let (status, _, _) = http(
            addr,
            "GET",
            "/payments",
            &[("Authorization", "Bearer x")],
            "",
        )
        .await;
        assert_eq!(status, 401, "{peer}");
    }
    env.bridge.close().await;
}

#[tokio::test]
async fn an_empty_list_lets_any_address_in_and_the_list_applies_live() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.enabled = true;
        s.token = TOKEN.into();
        s
    })
    .await;
    let path = format!("/mcp/{}", env.bot_id);
    let addr = served_as_from(&env.bridge, "203.0.113.5:1".parse().unwrap()).await;
    assert_eq!(initialize(addr, &path, TOKEN).await.0, 200);
    assert!(env.bridge.last_refused_address().is_none());
    let mut settings = env.bridge.settings();
    settings.allowed_ips = vec!["10.0.0.0/8".into()];
    env.bridge.apply_settings(settings).await.unwrap();
    assert_eq!(initialize(addr, &path, TOKEN).await.0, 401);
    assert_eq!(
        env.bridge.last_refused_address().map(|r| r.ip.to_string()),
        Some("203.0.113.5".into())
    );
    env.bridge.close().await;
}

#[tokio::test]
async fn a_non_canonical_entry_is_refused_naming_the_file_key_and_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(SETTINGS_FILE);
    for (list, shown) in [
        (
            r#"["10.0.0.0/8", "10.1.2.3/16"]"#,
            r#"allowed_ips[1]: "10.1.2.3/16" is not canonical (write "10.1.0.0/16")"#,
        ),
        (
            r#"["2001:DB8::/32"]"#,
            r#"allowed_ips[0]: "2001:DB8::/32" is not canonical (write "2001:db8::/32")"#,
        ),
        (
            r#"["10.0.0.9/32"]"#,
            r#"allowed_ips[0]: "10.0.0.9/32" is not canonical (write "10.0.0.9")"#,
        ),
        (
            r#"["localhost"]"#,
            r#"allowed_ips[0]: "localhost" is not an IP address or CIDR range"#,
        ),
    ] {
        std::fs::write(&path, format!(r#"{{"allowed_ips": {list}}}"#)).unwrap();
        let err = brmcp::bridge::Settings::load(&path)
            .unwrap_err()
            .to_string();
        assert_eq!(err, format!("{}: {shown}", path.display()));
    }
    std::fs::write(
        &path,
        r#"{"allowed_ips": ["10.0.0.0/8", "fd00::/8", "192.0.2.1"]}"#,
    )
    .unwrap();
    let s = brmcp::bridge::Settings::load(&path).unwrap();
    assert_eq!(s.allowed_ips, ["10.0.0.0/8", "fd00::/8", "192.0.2.1"]);
}
