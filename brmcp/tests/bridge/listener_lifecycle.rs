//! Settings apply live: the owned listener starts on enable, keeps running through a
//! token change (the old token's streams are severed and the old token refused, while a
//! connection opened before it is still answered), and stops on disable; a de-listed bot's sessions close; a non-loopback bind is refused unless
//! asked for, and never without a token.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{INITIALIZE, autopay, env, env_with, http_on, initialize, post_on_session};
use brmcp::bridge::BridgeError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Opens the session's standalone SSE stream; returns the open connection after its
/// response head.
async fn open_stream(
    addr: SocketAddr,
    bot: &str,
    token: &str,
    session: &str,
) -> tokio::net::TcpStream {
    let auth = format!("Bearer {token}");
    let (status, _, _) = post_on_session(
        addr,
        bot,
        token,
        session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert_eq!(status, 202);
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "GET /mcp/{bot} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nAuthorization: {auth}\r\nAccept: text/event-stream\r\nConnection: close\r\nMcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n\r\n",
        addr.port()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        stream.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream
}

/// Whether the stream ends (EOF or reset) within `limit`.
async fn ends_within(stream: &mut tokio::net::TcpStream, limit: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_follows_the_settings() {
    let env = env(autopay).await;
    let bot = env.bot_id.to_string();
    env.bridge.start().await.unwrap();
    assert_eq!(env.bridge.listen_addr(), None, "disabled: no listener");

    let mut on = env.bridge.settings();
    on.enabled = true;
    let on = env.bridge.apply_settings(on).await.unwrap();
    let addr = env.bridge.listen_addr().expect("enabled: listening");
    let (status, session) = initialize(addr, &bot, &on.token).await;
    assert_eq!(status, 200);
    let session = session.expect("a legacy session id");
    let mut old_stream = open_stream(addr, &bot, &on.token, &session).await;

    // Rotate the token: the old stream is severed; the listener runs on, so a
    // connection opened before the change is answered after it.
    let early = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut rotated = on.clone();
    rotated.token = "fresh-token-fresh-token-fresh-token".into();
    env.bridge.apply_settings(rotated).await.unwrap();
    assert!(
        ends_within(&mut old_stream, Duration::from_secs(5)).await,
        "the old token's stream stayed open"
    );
    assert_eq!(
        env.bridge.listen_addr(),
        Some(addr),
        "the listener kept its address"
    );
    let headers = [
        (
            "Authorization",
            "Bearer fresh-token-fresh-token-fresh-token",
        ),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    let (status, _, body) =
        http_on(early, "POST", &format!("/mcp/{bot}"), &headers, INITIALIZE).await;
    assert_eq!(status, 200, "the early connection was dropped: {body}");
    let (status, _) = initialize(addr, &bot, &on.token).await;
    assert_eq!(status, 401, "the old token is refused");
    let (status, _) = initialize(addr, &bot, "fresh-token-fresh-token-fresh-token").await;
    assert_eq!(status, 200);

    // Disable: no more connections.
    let mut off = env.bridge.settings();
    off.enabled = false;
    env.bridge.apply_settings(off).await.unwrap();
    assert_eq!(env.bridge.listen_addr(), None);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
    env.bridge.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delisted_bot_sessions_close() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.enabled = true;
        s.token = "t0ken-t0ken-t0ken-t0ken-t0ken-t0ken".into();
        s
    })
    .await;
    env.bridge.start().await.unwrap();
    let addr = env.bridge.listen_addr().unwrap();
    let bot = env.bot_id.to_string();
    let (status, session) = initialize(addr, &bot, "t0ken-t0ken-t0ken-t0ken-t0ken-t0ken").await;
    assert_eq!(status, 200);
    let mut stream = open_stream(
        addr,
        &bot,
        "t0ken-t0ken-t0ken-t0ken-t0ken-t0ken",
        &session.unwrap(),
    )
    .await;
    // A stdio-style session of the same bot ends too.
    let agent = crate::common::agent(&env).await;
    env.bridge.remove_bot(&bot).await.unwrap();
    assert!(ends_within(&mut stream, Duration::from_secs(5)).await);
    let (status, _) = initialize(addr, &bot, "t0ken-t0ken-t0ken-t0ken-t0ken-t0ken").await;
    assert_eq!(status, 404);
    let closed = tokio::time::timeout(Duration::from_secs(5), agent.waiting()).await;
    assert!(closed.is_ok(), "the in-process agent session stayed open");
    env.bridge.close().await;
}

#[tokio::test]
async fn non_loopback_bind_is_refused_unless_asked_and_never_without_a_token() {
    let any: SocketAddr = "0.0.0.0:0".parse().unwrap();
    let env = env_with(
        |bot| {
            let mut s = autopay(bot);
            s.enabled = true;
            s
        },
        move |c| c.with_listen(any),
    )
    .await;
    assert!(matches!(
        env.bridge.start().await,
        Err(BridgeError::RemoteRefused(a)) if a == any
    ));
    assert_eq!(env.bridge.listen_addr(), None);

    // Asked for, but the (hand-written) settings have no token.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(brmcp::bridge::SETTINGS_FILE),
        r#"{"enabled": true, "token": ""}"#,
    )
    .unwrap();
    let mut config = crate::common::base_config(dir.path()).with_listen(any);
    config.allow_remote = true;
    let router = env.fabric.router(
        brmcp::adapters::mem::uid(5),
        brmcp::adapters::RouterConfig::client(),
    );
    let bridge =
        brmcp::bridge::Bridge::new(config, router, crate::common::TestPayer(env.payer.clone()))
            .unwrap();
    assert!(matches!(
        bridge.start().await,
        Err(BridgeError::RemoteRefused(_))
    ));
    assert_eq!(bridge.listen_addr(), None);
}
