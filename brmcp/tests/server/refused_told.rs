//! A refused caller is told at once: a peer not on the allowlist gets a JSON-RPC
//! `NOT_ALLOWED` error to the request it sent, on its session, within one round trip,
//! also for a request that came in several parts;
//! the operator's `"tell_refused": false` keeps the bot silent; a flood from a refused
//! peer gets one reply per interval, and the gate still keeps every state out.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::*;
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::protocol::NOT_ALLOWED;
use brmcp::adapters::{NOT_ALLOWED_MESSAGE, Router, RouterConfig};
use brmcp::server::{Harness, ServeConfig};
use rmcp::ServiceExt;

/// Generous on a loaded machine; the answer takes milliseconds.
const WITHIN: Duration = Duration::from_secs(10);

fn harness(dir: &std::path::Path, config: &str) -> Harness {
    let config = ServeConfig::parse(config, &dir.join("brmcp.json")).unwrap();
    let probe = Arc::new(Probe::default());
    Harness::builder()
        .data_dir(dir)
        .config(&config)
        .allowed_uids([peer(ALICE)])
        .tool(echo(&probe))
        .build()
        .unwrap()
}

/// Dials the server as `who` and initializes: `Ok(())` when it got in, else the
/// error's JSON-RPC code and message (`None` when it timed out unanswered).
async fn dial(fabric: &Fabric, who: u32, wait: Duration) -> Result<(), Option<(i32, String)>> {
    let router = fabric.router(uid(who), RouterConfig::client());
    dial_on(&router, wait).await
}

/// [`dial`] through `router` (one identity's router, which may dial many sessions).
async fn dial_on(router: &Router, wait: Duration) -> Result<(), Option<(i32, String)>> {
    let transport = router.dial(uid(SERVER)).unwrap();
    match tokio::time::timeout(wait, ().serve(transport)).await {
        Err(_) => Err(None),
        Ok(Ok(_running)) => Ok(()),
        Ok(Err(e)) => Err(Some(error_of(&e.to_string()))),
    }
}

/// The code and message an rmcp initialize error names (it is only a display string).
fn error_of(display: &str) -> (i32, String) {
    let code = if display.contains(&NOT_ALLOWED.0.to_string()) {
        NOT_ALLOWED.0
    } else {
        0
    };
    (code, display.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_not_allowed_is_told_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let harness = harness(dir.path(), "{}");
    let fabric = Fabric::new(41);
    let router = start(&fabric, &harness);
    let started = Instant::now();
    let refused = dial(&fabric, MALLORY, WITHIN).await;
    let (code, message) = refused
        .expect_err("refused")
        .expect("answered, not timed out");
    assert_eq!(code, NOT_ALLOWED.0, "{message}");
    assert!(message.contains(NOT_ALLOWED_MESSAGE), "{message}");
    assert!(started.elapsed() < WITHIN);
    // Told, and still nothing of it kept: no session, no part reassembled.
    let stats = router.stats();
    assert_eq!(stats.sessions_accepted, 0);
    assert_eq!(stats.parts_received, 0);
    assert!(stats.dropped_disallowed > 0);
    // The allowed caller is served as before.
    assert_eq!(dial(&fabric, ALICE, WITHIN).await, Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_not_allowed_is_told_when_its_request_comes_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let harness = harness(dir.path(), "{}");
    let fabric = Fabric::new(44);
    let router = start(&fabric, &harness);
    // Chunks of 64 bytes: the initialize request takes several parts.
    let mut config = RouterConfig::client();
    config.chunk_len = 64;
    let mallory = fabric.router(uid(MALLORY), config);
    let carried = fabric.carried();
    let refused = dial_on(&mallory, WITHIN).await;
    let (code, message) = refused
        .expect_err("refused")
        .expect("answered, not timed out");
    assert_eq!(code, NOT_ALLOWED.0, "{message}");
    assert!(message.contains(NOT_ALLOWED_MESSAGE), "{message}");
    assert!(fabric.carried() - carried > 2, "the request came in parts");
    // Nothing of it was kept.
    let stats = router.stats();
    assert_eq!(stats.sessions_accepted, 0);
    assert_eq!(stats.parts_received, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_who_prefers_silence_sends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let harness = harness(dir.path(), r#"{"tell_refused": false}"#);
    let fabric = Fabric::new(42);
    let _router = start(&fabric, &harness);
    let carried = fabric.carried();
    assert_eq!(
        dial(&fabric, MALLORY, Duration::from_secs(2)).await,
        Err(None),
        "silence: the request times out"
    );
    // Only Mallory's own part crossed the fabric: nothing came back.
    assert_eq!(fabric.carried() - carried, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_peers_flood_gets_one_reply_per_interval() {
    let dir = tempfile::tempdir().unwrap();
    let harness = harness(dir.path(), "{}");
    let fabric = Fabric::new(43);
    let _router = start(&fabric, &harness);
    const DIALS: usize = 40;
    // One router for Mallory (the fabric delivers to an identity's latest router), a
    // session per request.
    let mallory = fabric.router(uid(MALLORY), RouterConfig::client());
    let dials: Vec<_> = (0..DIALS)
        .map(|_| {
            let mallory = mallory.clone();
            tokio::spawn(async move { dial_on(&mallory, Duration::from_secs(3)).await })
        })
        .collect();
    let mut told = 0;
    for dial in dials {
        match dial.await.unwrap() {
            Err(Some((code, _))) if code == NOT_ALLOWED.0 => told += 1,
            Err(None) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(told, 1, "one reply per refused peer per interval");
    // Another refused peer is told on its own account.
    let bob = dial(&fabric, BOB, WITHIN).await;
    assert!(
        matches!(bob, Err(Some((code, _))) if code == NOT_ALLOWED.0),
        "{bob:?}"
    );
}
