//! What the gates answer, as a client shows it: on `/mcp` a JSON-RPC error object whose
//! message says what was wrong (no or a wrong token, an unknown bot by the name asked
//! for, a bot unavailable with the reason), plain text elsewhere; and a bot's endpoint
//! by its name is the same as by its uid.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{INITIALIZE, autopay, env_with, http, initialize, post_on_session};
use brmcp::adapters::PeerId;
use brmcp::bridge::Settings;

const TOKEN: &str = "refusal-s3cret-refusal-s3cret-refusal";

fn named(bot: PeerId) -> Settings {
    let mut s = autopay(bot);
    s.enabled = true;
    s.token = TOKEN.into();
    s.bot_names.insert("fortune".into(), bot.to_string());
    s
}

async fn started() -> (crate::common::Env, std::net::SocketAddr) {
    let env = env_with(named, |mut c| {
        c.connect_timeout = Duration::from_millis(400);
        c.retry_after = Duration::from_millis(100);
        c
    })
    .await;
    env.bridge.start().await.expect("start");
    let addr = env.bridge.listen_addr().expect("listening");
    (env, addr)
}

/// POSTs `initialize` to `path` with `auth`: status, content type, body.
async fn post(
    addr: std::net::SocketAddr,
    path: &str,
    auth: Option<&str>,
) -> (u16, Option<String>, String) {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    headers.extend(auth.map(|a| ("Authorization", a)));
    let (status, headers, body) = http(addr, "POST", path, &headers, INITIALIZE).await;
    let kind = headers
        .iter()
        .find(|(k, _)| k == "content-type")
        .map(|(_, v)| v.clone());
    (status, kind, body)
}

/// The message of a JSON-RPC error body (id null: the request's is not read).
fn message(kind: Option<&str>, body: &str) -> String {
    assert_eq!(kind, Some("application/json"), "{body}");
    let value: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(value["jsonrpc"], json!("2.0"), "{body}");
    assert_eq!(value["id"], Value::Null, "{body}");
    assert!(value["error"]["code"].is_i64(), "{body}");
    value["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message: {body}"))
        .to_owned()
}

#[tokio::test]
async fn refusals_say_what_was_wrong() {
    let (env, addr) = started().await;
    let bearer = format!("Bearer {TOKEN}");
    for (auth, says) in [
        (None, "no bearer token"),
        (Some("Bearer wrong"), "wrong bearer token"),
        (Some(TOKEN), "must be `Bearer <token>`"),
    ] {
        let (status, kind, body) = post(addr, "/mcp/fortune", auth).await;
        assert_eq!(status, 401, "{auth:?}");
        let said = message(kind.as_deref(), &body);
        assert!(said.contains(says), "{auth:?}: {said}");
        assert!(!body.contains(TOKEN), "the token is never shown: {body}");
    }
    let (status, kind, body) = post(addr, "/mcp/nosuch", Some(&bearer)).await;
    assert_eq!(status, 404);
    let said = message(kind.as_deref(), &body);
    assert!(said.contains("unknown bot \"nosuch\""), "{said}");
    let (status, kind, body) = post(addr, "/mcp/directory/x", Some(&bearer)).await;
    assert_eq!(status, 404);
    assert!(
        message(kind.as_deref(), &body).contains("unknown directory \"x\""),
        "{body}"
    );
    // A hostile path is echoed bounded and escaped.
    let long = format!("/mcp/{}%1b%5b2A", "x".repeat(300));
    let (status, kind, body) = post(addr, &long, Some(&bearer)).await;
    assert_eq!(status, 404);
    let said = message(kind.as_deref(), &body);
    assert!(said.len() < 300 && !said.contains('\u{1b}'), "{said}");
    // Outside /mcp: plain text.
    let (status, kind, body) = post(addr, "/other", Some(&bearer)).await;
    assert_eq!(status, 404);
    assert_eq!(kind.as_deref(), Some("text/plain; charset=utf-8"));
    assert!(body.contains("/mcp/<bot name or uid>"), "{body}");
    let (status, kind, body) = post(addr, "/payments", None).await;
    assert_eq!(status, 401);
    assert_eq!(kind.as_deref(), Some("text/plain; charset=utf-8"), "{body}");
    let (status, kind, body) = post(addr, "/payments", Some(&bearer)).await;
    assert_eq!(status, 403);
    assert!(body.contains("approval secret"), "{kind:?} {body}");

    // Unavailable: the bot by its name, and why.
    env.fabric.set_online(&env.bot_id, false);
    let (status, kind, body) = post(addr, "/mcp/fortune", Some(&bearer)).await;
    assert_eq!(status, 503, "{body}");
    let said = message(kind.as_deref(), &body);
    assert!(
        said.contains(&format!("bot unavailable: \"fortune\" ({}): ", env.bot_id))
            && said.contains("retry"),
        "{said}"
    );
    env.bridge.close().await;
}

#[tokio::test]
async fn a_bot_by_name_and_by_uid_is_one_endpoint() {
    let (env, addr) = started().await;
    let (status, session) = initialize(addr, "fortune", TOKEN).await;
    assert_eq!(status, 200);
    let session = session.expect("a session");
    let uid = env.bot_id.to_string();
    let (status, _, body) = post_on_session(
        addr,
        &uid,
        TOKEN,
        &session,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    )
    .await;
    assert!(status == 202 || status == 200, "{status} {body}");
    let (status, _, body) = post_on_session(
        addr,
        &uid,
        TOKEN,
        &session,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(status, 200, "the name's session, by the uid: {body}");
    assert!(body.contains("fortune"), "{body}");
    // Renamed: the new name reaches the same session, the old one is unknown.
    let mut settings = env.bridge.settings();
    settings.bot_names.clear();
    settings.bot_names.insert("oracle".into(), uid.clone());
    env.bridge.apply_settings(settings).await.expect("renamed");
    let (status, _, body) = post_on_session(
        addr,
        "oracle",
        TOKEN,
        &session,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, kind, body) = post(addr, "/mcp/fortune", Some(&format!("Bearer {TOKEN}"))).await;
    assert_eq!(status, 404);
    assert!(message(kind.as_deref(), &body).contains("unknown bot \"fortune\""));
    env.bridge.close().await;
}
