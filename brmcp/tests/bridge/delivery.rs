//! A paid answer counts as delivered only once the HTTP response carrying it was
//! written out, and a grace after (a killed bridge's connections are reset, and an
//! agent may not have read what was written). A bridge stopped while a paid call's response has not gone out to its
//! agent keeps the answer for the agent's repeat in the next run, which gets it unpaid
//! and not run again; an answer that did go out makes the repeat a call of its own.
//! Every outcome the bot was paid for reaches the agent once, and nothing is paid
//! twice for one outcome.

use std::net::SocketAddr;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{ConnectInfo, Request};
use axum::response::Response;
use tower::ServiceExt;

use crate::common::{PayMode, Stage, autopay, eventually, initialize, post_on_session};
use brmcp::bridge::Bridge;

const TOKEN: &str = "d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3d3";
const CALL: &str =
    r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"fortune","arguments":{}}}"#;
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;

/// A run of the stage's bridge listening with [`TOKEN`], autopaying its bot.
async fn run(stage: &Stage) -> (Bridge, SocketAddr) {
    run_with_grace(stage, brmcp::bridge::DEFAULT_DELIVERY_GRACE).await
}

/// As [`run`], an answer counting as delivered `grace` after its response ended.
async fn run_with_grace(stage: &Stage, grace: Duration) -> (Bridge, SocketAddr) {
    let mut config = crate::common::base_config(stage.dir.path());
    config.delivery_grace = grace;
    let bridge = stage.bridge_with(config, brmcp::adapters::RouterConfig::client());
    let mut settings = autopay(stage.bot_id);
    settings.enabled = true;
    settings.token = TOKEN.into();
    bridge.apply_settings(settings).await.expect("settings");
    bridge.start().await.expect("start");
    let addr = bridge.listen_addr().expect("listening");
    (bridge, addr)
}

/// An MCP session of the agent on `bridge`'s endpoint for the stage's bot.
async fn session(stage: &Stage, addr: SocketAddr) -> String {
    let bot = stage.bot_id.to_string();
    let (status, session) = initialize(addr, &bot, TOKEN).await;
    assert_eq!(status, 200);
    let session = session.expect("a session id");
    let (status, _, _) = post_on_session(addr, &bot, TOKEN, &session, INITIALIZED).await;
    assert_eq!(status, 202);
    session
}

/// The agent's `fortune` call handed to `bridge`'s HTTP router in this process: the
/// response, whose body only the test reads.
async fn call_in_process(stage: &Stage, bridge: &Bridge, addr: SocketAddr) -> Response {
    let session = session(stage, addr).await;
    let request = Request::post(format!("/mcp/{}", stage.bot_id))
        .header("host", addr.to_string())
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
        .extension(ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000))))
        .body(Body::from(CALL))
        .expect("request");
    let response = bridge
        .http_router()
        .oneshot(request)
        .await
        .expect("response");
    assert_eq!(response.status(), 200);
    response
}

/// The agent's `fortune` call over the listener at `addr`: the body it read.
async fn call_over_tcp(stage: &Stage, addr: SocketAddr) -> String {
    let session = session(stage, addr).await;
    let bot = stage.bot_id.to_string();
    let (status, _, body) = post_on_session(addr, &bot, TOKEN, &session, CALL).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// A first run in which the bot runs the agent's `fortune` call and the bridge stops
/// before the response was read; then the response is read to its end
/// (`read_after_stop`) or dropped unread. The stage and what the agent read.
async fn cut_first(seed: u64, read_after_stop: bool) -> (Stage, String) {
    let stage = Stage::new(seed, PayMode::Credit);
    let (first, addr) = run(&stage).await;
    let response = call_in_process(&stage, &first, addr).await;
    assert!(
        eventually(Duration::from_secs(10), || stage.bot.executions("fortune")
            == 1)
        .await,
        "run"
    );
    // The bot's answer reaches the bridge and is handed to the response.
    tokio::time::sleep(Duration::from_millis(300)).await;
    first.close().await;
    let got = if read_after_stop {
        let body = tokio::time::timeout(
            Duration::from_secs(10),
            axum::body::to_bytes(response.into_body(), usize::MAX),
        )
        .await
        .expect("the body ends");
        String::from_utf8_lossy(&body.unwrap_or_default()).into_owned()
    } else {
        drop(response);
        String::new()
    };
    (stage, got)
}

/// As [`cut_first`], then the agent's repeat in the next run: what it read.
async fn stopped_while_answering(seed: u64, read_after_stop: bool) -> (Stage, String, String) {
    let (stage, got) = cut_first(seed, read_after_stop).await;
    let (second, addr) = run(&stage).await;
    let repeat = call_over_tcp(&stage, addr).await;
    second.close().await;
    (stage, got, repeat)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_response_never_went_out_reaches_the_repeat_unpaid() {
    let (stage, got, repeat) = stopped_while_answering(31, false).await;
    assert!(got.is_empty());
    assert!(
        repeat.contains("fortune #1"),
        "the first run's answer: {repeat}"
    );
    assert_eq!(stage.payer.count(), 1, "paid once");
    assert_eq!(stage.bot.executions("fortune"), 1, "run once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_reaches_its_agent_once_whenever_the_stop_falls() {
    // The body is read after the stop: whatever it carried, the agent gets the paid
    // outcome exactly once, and pays again only for a call that runs again.
    let (stage, got, repeat) = stopped_while_answering(37, true).await;
    if got.contains("fortune #1") {
        assert!(repeat.contains("fortune #2"), "a call of its own: {repeat}");
        assert_eq!(stage.payer.count(), 2);
        assert_eq!(stage.bot.executions("fortune"), 2);
    } else {
        assert!(repeat.contains("fortune #1"), "the held answer: {repeat}");
        assert_eq!(stage.payer.count(), 1, "paid once");
        assert_eq!(stage.bot.executions("fortune"), 1, "run once");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_written_out_makes_the_repeat_a_call_of_its_own() {
    let stage = Stage::new(41, PayMode::Credit);
    let (first, addr) = run(&stage).await;
    let got = call_over_tcp(&stage, addr).await;
    assert!(got.contains("fortune #1"), "{got}");
    first.close().await;
    drop(first);
    let (second, addr) = run(&stage).await;
    let repeat = call_over_tcp(&stage, addr).await;
    second.close().await;
    assert!(repeat.contains("fortune #2"), "{repeat}");
    assert_eq!(stage.payer.count(), 2);
    assert_eq!(stage.bot.executions("fortune"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_answer_whose_hand_off_was_cut_is_handed_again() {
    // The repeat's own response never goes out either: the run after hands it again.
    let (stage, got) = cut_first(43, false).await;
    assert!(got.is_empty());
    let (second, addr) = run(&stage).await;
    let response = call_in_process(&stage, &second, addr).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    second.close().await;
    drop(response);
    let (third, addr) = run(&stage).await;
    let repeat = call_over_tcp(&stage, addr).await;
    third.close().await;
    assert!(repeat.contains("fortune #1"), "{repeat}");
    assert_eq!(stage.payer.count(), 1, "paid once");
    assert_eq!(stage.bot.executions("fortune"), 1, "run once");
}

/// A first run, answers delivered `grace` after their response ended, whose agent
/// reads its `fortune` call's answer; the bridge then gone as a killed process goes
/// (no stop) `after` that; then the agent's repeat in the next run: what it read.
async fn repeat_after_a_kill(seed: u64, grace: Duration, after: Duration) -> (Stage, String) {
    let stage = Stage::new(seed, PayMode::Credit);
    let (first, addr) = run_with_grace(&stage, grace).await;
    let got = call_over_tcp(&stage, addr).await;
    assert!(got.contains("fortune #1"), "{got}");
    tokio::time::sleep(after).await;
    drop(first);
    let (second, addr) = run(&stage).await;
    let repeat = call_over_tcp(&stage, addr).await;
    second.close().await;
    (stage, repeat)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_whose_bridge_died_within_the_grace_reaches_the_repeat_unpaid() {
    let (stage, repeat) = repeat_after_a_kill(47, Duration::from_secs(600), Duration::ZERO).await;
    assert!(repeat.contains("fortune #1"), "the held answer: {repeat}");
    assert_eq!(stage.payer.count(), 1, "paid once");
    assert_eq!(stage.bot.executions("fortune"), 1, "run once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_past_its_grace_makes_the_repeat_a_call_of_its_own() {
    let (stage, repeat) =
        repeat_after_a_kill(53, Duration::from_millis(100), Duration::from_secs(1)).await;
    assert!(repeat.contains("fortune #2"), "a call of its own: {repeat}");
    assert_eq!(stage.payer.count(), 2);
    assert_eq!(stage.bot.executions("fortune"), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_delivered_once_its_agent_asks_again_on_the_session() {
    let stage = Stage::new(59, PayMode::Credit);
    let (first, addr) = run_with_grace(&stage, Duration::from_secs(600)).await;
    let session = session(&stage, addr).await;
    let bot = stage.bot_id.to_string();
    let (status, _, got) = post_on_session(addr, &bot, TOKEN, &session, CALL).await;
    assert_eq!(status, 200, "{got}");
    assert!(got.contains("fortune #1"), "{got}");
    // The agent's next request on the session: it took the answer.
    const PING: &str = r#"{"jsonrpc":"2.0","id":8,"method":"ping"}"#;
    let (status, _, pong) = post_on_session(addr, &bot, TOKEN, &session, PING).await;
    assert_eq!(status, 200, "{pong}");
    drop(first);
    let (second, addr) = run(&stage).await;
    let repeat = call_over_tcp(&stage, addr).await;
    second.close().await;
    assert!(repeat.contains("fortune #2"), "a call of its own: {repeat}");
    assert_eq!(stage.payer.count(), 2);
    assert_eq!(stage.bot.executions("fortune"), 2);
}
