//! Our client against the Go implementation's session behaviour (the double in
//! `common::go_router`): after the Go server forgets a session (idle expiry, restart) the
//! next calls recover without the caller noticing, all of them; at the Go router's
//! session limit, where new sessions are dropped silently, `initialize` fails within
//! [`INITIALIZE_TIMEOUT`] instead of the whole request timeout.

use std::time::Duration;

use crate::common::go_router::{GoProbe, GoRouter};
use crate::common::{call, text};
use brmcp_adapters::mem::uid;
use brmcp_adapters::protocol::{SESSION_NOT_FOUND, TOO_MANY_SESSIONS, is_session_lost};
use brmcp_adapters::{DEFAULT_SILENCE_PROBE, INITIALIZE_TIMEOUT, REQUEST_TIMEOUT, RouterConfig};
use rmcp::ServiceExt;
use rmcp::model::{ErrorCode, ErrorData};
use rmcp::service::ClientInitializeError;
use serde_json::json;

#[test]
fn lost_session_is_recognised_whatever_the_implementation() {
    let error = |code, message: &str| ErrorData::new(code, message.to_owned(), None);
    assert!(is_session_lost(&error(
        SESSION_NOT_FOUND,
        "session not found"
    )));
    let go = "method \"tools/call\" is invalid during session initialization";
    assert!(is_session_lost(&error(ErrorCode(0), go)));
    assert!(
        !is_session_lost(&error(ErrorCode(-32602), go)),
        "code 0 only"
    );
    assert!(!is_session_lost(&error(ErrorCode(0), "unknown tool \"x\"")));
    assert!(!is_session_lost(&error(
        ErrorCode(-32003),
        "client is closing"
    )));
    assert!(!is_session_lost(&error(
        TOO_MANY_SESSIONS,
        "too many sessions"
    )));
    // No SDK the agents use reserves our codes (go-sdk: -32000..-32005, -32042).
    for code in [SESSION_NOT_FOUND, TOO_MANY_SESSIONS] {
        assert!((-32019..=-32006).contains(&code.0), "{code:?}");
    }
}

fn go_and_client(idle: Duration, cap: usize) -> (GoRouter, brmcp_adapters::Router) {
    let go = GoRouter::new(uid(1), idle, cap);
    let client = go.link(uid(2), RouterConfig::client());
    (go, client)
}

#[tokio::test(start_paused = true)]
async fn client_recovers_after_go_idle_expiry() {
    let (go, router) = go_and_client(Duration::from_secs(60), 8);
    let probe = go.probe();
    let client = ().serve(router.dial(go.id()).unwrap()).await.expect("initialize");
    let first = client
        .call_tool(call("echo", json!({"text": "before"})))
        .await
        .unwrap();
    assert_eq!(text(&first), "before");

    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(GoProbe::get(&probe.expired), 1);
    assert_eq!(go.sessions(), 0);

    let second = tokio::time::timeout(
        Duration::from_secs(5),
        client.call_tool(call("echo", json!({"text": "after"}))),
    )
    .await
    .expect("the call after expiry hung")
    .expect("the call after expiry failed");
    assert_eq!(text(&second), "after");
    assert_eq!(
        GoProbe::get(&probe.refusals),
        1,
        "refused once on the fresh session"
    );
    assert_eq!(GoProbe::get(&probe.initializes), 2, "re-initialized once");
    assert_eq!(GoProbe::get(&probe.calls), 2, "each call ran once");
    assert_eq!(go.sessions(), 1, "the fresh session is the one recovered");

    // And again, an hour later: every expiry recovers.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    let third = client
        .call_tool(call("echo", json!({"text": "later"})))
        .await
        .unwrap();
    assert_eq!(text(&third), "later");
    assert_eq!(GoProbe::get(&probe.initializes), 3);
    client.cancel().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn every_outstanding_call_recovers_after_a_go_restart() {
    let (go, router) = go_and_client(Duration::from_secs(600), 8);
    let probe = go.probe();
    let client = ().serve(router.dial(go.id()).unwrap()).await.expect("initialize");
    client
        .call_tool(call("echo", json!({"text": "up"})))
        .await
        .unwrap();

    go.restart();
    let peer = client.peer().clone();
    let calls: Vec<_> = (0..4)
        .map(|i| {
            let peer = peer.clone();
            let args = json!({"text": format!("c{i}")});
            tokio::spawn(async move { peer.call_tool(call("echo", args)).await })
        })
        .collect();
    let all = async {
        let mut results = Vec::new();
        for handle in calls {
            results.push(handle.await.unwrap());
        }
        results
    };
    let outcomes = tokio::time::timeout(Duration::from_secs(5), all)
        .await
        .expect("a call waited out its timeout");
    for (i, outcome) in outcomes.into_iter().enumerate() {
        let result = outcome.expect("recovered");
        assert_eq!(text(&result), format!("c{i}"));
    }
    assert_eq!(
        GoProbe::get(&probe.initializes),
        2,
        "one re-initialize for all four"
    );
    assert_eq!(GoProbe::get(&probe.calls), 5, "each call ran once");
    client.cancel().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn go_session_limit_fails_initialize_quickly() {
    let (go, router) = go_and_client(Duration::from_secs(600), 1);
    let probe = go.probe();
    let first = ().serve(router.dial(go.id()).unwrap()).await.expect("initialize");

    let started = tokio::time::Instant::now();
    let refused = ().serve(router.dial(go.id()).unwrap()).await;
    let waited = started.elapsed();
    match refused {
        Err(ClientInitializeError::JsonRpcError(e)) => {
            assert_eq!(e.code, REQUEST_TIMEOUT);
            assert!(e.message.contains("initialize"), "{}", e.message);
        }
        other => panic!("expected the initialize timeout, got {other:?}"),
    }
    assert!(waited >= INITIALIZE_TIMEOUT, "{waited:?}");
    assert!(
        waited < INITIALIZE_TIMEOUT + Duration::from_secs(1),
        "{waited:?}"
    );
    assert_eq!(GoProbe::get(&probe.dropped_at_cap), 1, "dropped silently");

    // The admitted session still works; once it idles out, a new one is admitted.
    let r = first
        .call_tool(call("echo", json!({"text": "in"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "in");
    first.cancel().await.unwrap();
    tokio::time::sleep(Duration::from_secs(11 * 60)).await;
    let again = ().serve(router.dial(go.id()).unwrap()).await.expect("a place freed up");
    let r = again
        .call_tool(call("echo", json!({"text": "again"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "again");
}

#[tokio::test(start_paused = true)]
async fn a_long_call_on_a_go_server_is_probed_with_ping_and_goes_on() {
    let (go, router) = go_and_client(Duration::from_secs(600), 8);
    let probe = go.probe();
    let client = ().serve(router.dial(go.id()).unwrap()).await.expect("initialize");
    // Silent for 95 s: the session is pinged every DEFAULT_SILENCE_PROBE and answers.
    let result = client
        .call_tool(call("slow", json!({"secs": 95})))
        .await
        .expect("the call's own answer");
    assert_eq!(text(&result), "slept");
    let pings = GoProbe::get(&probe.pings);
    let expected = (95 / DEFAULT_SILENCE_PROBE.as_secs()) as usize;
    assert!(
        (expected - 1..=expected).contains(&pings),
        "{pings} pings, about {expected}"
    );
    assert_eq!(
        GoProbe::get(&probe.refusals),
        0,
        "the Go session took every ping"
    );
    assert_eq!(GoProbe::get(&probe.initializes), 1, "nothing recovered");
    assert_eq!(GoProbe::get(&probe.calls), 1, "the call ran once");
    // No call open: no more pings.
    tokio::time::sleep(Duration::from_secs(600)).await;
    assert_eq!(GoProbe::get(&probe.pings), pings);
    client.cancel().await.unwrap();
}
