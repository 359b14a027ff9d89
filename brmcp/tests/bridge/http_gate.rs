//! The HTTP endpoint's gates: Host (403), bearer token (401 with `WWW-Authenticate`),
//! path and allowlist (404), reachability (503 after a bounded wait), and what passes.

use std::time::{Duration, Instant};

use crate::common::{INITIALIZE, autopay, env, env_with, http};
use brmcp::adapters::mem::uid;
use brmcp::bridge::{Bridge, SETTINGS_FILE};

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, Vec<(String, String)>, String) {
    let mut all: Vec<(&str, &str)> = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    all.extend_from_slice(headers);
    http(addr, "POST", path, &all, INITIALIZE).await
}

async fn started(token: &str) -> (crate::common::Env, std::net::SocketAddr) {
    let token = token.to_owned();
    let env = env(move |bot| {
        let mut s = autopay(bot);
        s.enabled = true;
        s.token = token;
        s
    })
    .await;
    env.bridge.start().await.expect("start");
    let addr = env.bridge.listen_addr().expect("listening");
    (env, addr)
}

#[tokio::test]
async fn token_gate() {
    let (env, addr) = started("s3cret-s3cret-s3cret-s3cret-s3cret").await;
    let path = format!("/mcp/{}", env.bot_id);
    for auth in [
        None,
        Some("Bearer wrong"),
        Some("s3cret-s3cret-s3cret-s3cret-s3cret"),
        Some("Basic s3cret-s3cret-s3cret-s3cret-s3cret"),
    ] {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
        let (status, headers, _) = post(addr, &path, &headers).await;
        assert_eq!(status, 401, "{auth:?}");
        assert_eq!(header(&headers, "www-authenticate"), Some("Bearer"));
    }
    for auth in [
        "Bearer s3cret-s3cret-s3cret-s3cret-s3cret",
        "bearer s3cret-s3cret-s3cret-s3cret-s3cret",
        "BEARER s3cret-s3cret-s3cret-s3cret-s3cret",
    ] {
        let (status, _, body) = post(addr, &path, &[("Authorization", auth)]).await;
        assert_eq!(status, 200, "{auth}: {body}");
        assert!(body.contains("\"result\""), "{body}");
    }
    env.bridge.close().await;
}

#[tokio::test]
async fn path_and_allowlist_gate() {
    let (env, addr) = started("s3cret-s3cret-s3cret-s3cret-s3cret").await;
    let auth = [("Authorization", "Bearer s3cret-s3cret-s3cret-s3cret-s3cret")];
    let unlisted = uid(9).to_string();
    let upper = env.bot_id.to_string().to_uppercase();
    let cases = [
        "/mcp/".to_owned(),
        "/mcp/abc".to_owned(),
        format!("/mcp/{unlisted}"),
        format!("/mcp/{}/extra", env.bot_id),
    ];
    for path in cases {
        let (status, _, body) = post(addr, &path, &auth).await;
        assert_eq!(status, 404, "{path}");
        assert!(body.contains("unknown bot"), "{body}");
    }
    // The uid's case does not matter.
    let (status, _, _) = post(addr, &format!("/mcp/{upper}"), &auth).await;
    assert_eq!(status, 200);
    env.bridge.close().await;
}

#[tokio::test]
async fn host_header_gate() {
    let (env, addr) = started("s3cret-s3cret-s3cret-s3cret-s3cret").await;
    let path = format!("/mcp/{}", env.bot_id);
    for host in ["evil.example", "evil.example:8891", "127.0.0.2"] {
        let (status, _, _) = post(
            addr,
            &path,
            &[
                ("Host", host),
                ("Authorization", "Bearer s3cret-s3cret-s3cret-s3cret-s3cret"),
            ],
        )
        .await;
        assert_eq!(status, 403, "{host}");
    }
    for host in ["localhost", "127.0.0.1:1", "[::1]:8891"] {
        let (status, _, body) = post(
            addr,
            &path,
            &[
                ("Host", host),
                ("Authorization", "Bearer s3cret-s3cret-s3cret-s3cret-s3cret"),
            ],
        )
        .await;
        assert_eq!(status, 200, "{host}: {body}");
    }
    env.bridge.close().await;
}

#[tokio::test]
async fn empty_token_never_authorizes() {
    let env = env(autopay).await;
    // A hand-written file: enabled, empty token. It loads as written (no mint).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(SETTINGS_FILE),
        format!(
            r#"{{"enabled": true, "token": "", "allowed_bots": ["{}"]}}"#,
            env.bot_id
        ),
    )
    .unwrap();
    let router = env
        .fabric
        .router(uid(3), brmcp::adapters::RouterConfig::client());
    let payer = crate::common::TestPayer(env.payer.clone());
    let bridge = Bridge::new(crate::common::base_config(dir.path()), router, payer).unwrap();
    assert!(bridge.settings().enabled && bridge.settings().token.is_empty());
    bridge.start().await.unwrap();
    let addr = bridge.listen_addr().unwrap();
    let path = format!("/mcp/{}", env.bot_id);
    for auth in ["Bearer ", "Bearer x", "Bearer"] {
        let (status, _, _) = post(addr, &path, &[("Authorization", auth)]).await;
        assert_eq!(status, 401, "{auth:?}");
    }
    bridge.close().await;
}

#[tokio::test]
async fn unreachable_bot_is_503_after_a_bounded_wait() {
    let env = env_with(
        |bot| {
            let mut s = autopay(bot);
            s.enabled = true;
            s.token = "s3cret-s3cret-s3cret-s3cret-s3cret".into();
            s
        },
        |mut c| {
            c.connect_timeout = Duration::from_millis(400);
            c.retry_after = Duration::from_millis(100);
            c
        },
    )
    .await;
    env.bridge.start().await.unwrap();
    let addr = env.bridge.listen_addr().unwrap();
    let path = format!("/mcp/{}", env.bot_id);
    env.fabric.set_online(&env.bot_id, false);
    let started = Instant::now();
    let (status, headers, body) = post(
        addr,
        &path,
        &[("Authorization", "Bearer s3cret-s3cret-s3cret-s3cret-s3cret")],
    )
    .await;
    let waited = started.elapsed();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("bot unavailable"));
    assert!(header(&headers, "retry-after").is_some());
    assert!(waited >= Duration::from_millis(400), "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    // Back online: the same endpoint serves.
    env.fabric.set_online(&env.bot_id, true);
    tokio::time::sleep(Duration::from_millis(150)).await;
    let (status, _, body) = post(
        addr,
        &path,
        &[("Authorization", "Bearer s3cret-s3cret-s3cret-s3cret-s3cret")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // A bot nobody hosts fails fast too.
    let mut settings = env.bridge.settings();
    settings.allowed_bots.push(uid(8).to_string());
    env.bridge.apply_settings(settings).await.unwrap();
    let (status, _, _) = post(
        addr,
        &format!("/mcp/{}", uid(8)),
        &[("Authorization", "Bearer s3cret-s3cret-s3cret-s3cret-s3cret")],
    )
    .await;
    assert_eq!(status, 503);
    env.bridge.close().await;
}
