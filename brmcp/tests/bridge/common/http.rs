//! Raw HTTP/1.1 exchanges with the bridge's listener.

use std::time::Duration;

/// A raw HTTP/1.1 exchange with the bridge's listener: status, headers, body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    http_on(stream, method, path, headers, body).await
}

/// As [`http`], on a connection already open.
pub async fn http_on(
    mut stream: tokio::net::TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = stream.peer_addr().expect("peer address");
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        request.push_str(&format!("Host: 127.0.0.1:{}\r\n", addr.port()));
    }
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw)).await;
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

/// A JSON-RPC `initialize` body for raw HTTP tests.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#;

/// An `initialize` POST to the bridge's endpoint for `bot` with bearer `token`: the
/// status and the session id the bridge gave, if any.
pub async fn initialize(
    addr: std::net::SocketAddr,
    bot: &str,
    token: &str,
) -> (u16, Option<String>) {
    let auth = format!("Bearer {token}");
    let (status, headers, _) = http(
        addr,
        "POST",
        &format!("/mcp/{bot}"),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ],
        INITIALIZE,
    )
    .await;
    let session = headers
        .iter()
        .find(|(k, _)| k == "mcp-session-id")
        .map(|(_, v)| v.clone());
    (status, session)
}

/// A POST of `body` on the open `session` to the bridge's endpoint for `bot` with
/// bearer `token`: status, headers, body.
pub async fn post_on_session(
    addr: std::net::SocketAddr,
    bot: &str,
    token: &str,
    session: &str,
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let auth = format!("Bearer {token}");
    http(
        addr,
        "POST",
        &format!("/mcp/{bot}"),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Mcp-Session-Id", session),
            ("Mcp-Protocol-Version", "2025-06-18"),
        ],
        body,
    )
    .await
}
