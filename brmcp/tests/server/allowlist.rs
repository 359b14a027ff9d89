//! Authorization: a default-deny allowlist installed as the router's allow gate. An
//! allowed uid matches whatever the case of its hex in `brmcp.json` (the Go harness
//! compared strings, weakness §4.10.6); a peer not on the list gets no session and no
//! reassembly state; an empty list refuses everyone and is warned about at start; a
//! predicate replaces the list.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::server::{Harness, ServeConfig};
use rmcp::ServiceExt;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Whether a session from `who` gets through `initialize` within half a second.
async fn can_connect(fabric: &Fabric, who: u32) -> bool {
    let router = fabric.router(uid(who), RouterConfig::client());
    let transport = router.dial(uid(SERVER)).unwrap();
    tokio::time::timeout(Duration::from_millis(500), ().serve(transport))
        .await
        .is_ok_and(|r| r.is_ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_listed_uids_in_any_case_get_in() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("brmcp.json");
    let alice_upper = peer(ALICE).to_string().to_uppercase();
    std::fs::write(&path, format!(r#"{{"allowed_uids": ["{alice_upper}"]}}"#)).unwrap();
    let config = ServeConfig::load(&path).unwrap();
    let probe = Arc::new(Probe::default());
    let harness = Harness::builder()
        .data_dir(dir.path())
        .config(&config)
        .tool(echo(&probe))
        .build()
        .unwrap();
    let fabric = Fabric::new(1);
    let router = start(&fabric, &harness);

    let alice = client(&fabric, ALICE).await;
    let echoed = call(&alice, "echo", serde_json::json!({"text": "in"}), None).await;
    assert!(!is_error(&echoed));
    let before = router.stats();

    assert!(!can_connect(&fabric, MALLORY).await);
    let after = router.stats();
    assert!(after.dropped_disallowed > before.dropped_disallowed);
    assert_eq!(after.sessions_accepted, before.sessions_accepted);
    assert_eq!(after.sessions_open, before.sessions_open);
    assert_eq!(after.messages_buffered, 0);
    assert_eq!(after.parts_received, before.parts_received);
    assert!(harness.allows(&peer(ALICE)));
    assert!(!harness.allows(&peer(MALLORY)));
}

/// Collects the messages of WARN and ERROR events.
struct Capture(Arc<Mutex<Vec<String>>>);

struct Message<'a>(&'a mut Vec<String>);

impl Visit for Message<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0.push(format!("{value:?}"));
        }
    }
}

impl Subscriber for Capture {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        *metadata.level() <= Level::WARN
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        event.record(&mut Message(&mut self.0.lock().unwrap()));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_allowlist_refuses_everyone_and_is_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let probe = Arc::new(Probe::default());
    let harness = Harness::builder()
        .data_dir(dir.path())
        .config(&ServeConfig::default())
        .tool(echo(&probe))
        .build()
        .unwrap();
    assert!(harness.gate().refuses_everyone());
    let fabric = Fabric::new(2);
    let warnings = Arc::new(Mutex::new(Vec::new()));
    let router =
        tracing::subscriber::with_default(Capture(warnings.clone()), || start(&fabric, &harness));
    assert_eq!(
        *warnings.lock().unwrap(),
        ["the allowlist (allowed_uids) is empty: every caller is refused"]
    );
    for who in [ALICE, BOB] {
        assert!(!can_connect(&fabric, who).await);
    }
    assert_eq!(router.stats().sessions_accepted, 0);
    assert_eq!(probe.runs(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_predicate_replaces_the_list() {
    let dir = tempfile::tempdir().unwrap();
    let bob = peer(BOB);
    let harness = Harness::builder()
        .data_dir(dir.path())
        .allowed_uids([peer(ALICE)])
        .allow(move |p| *p == bob)
        .build()
        .unwrap();
    let fabric = Fabric::new(3);
    let _router = start(&fabric, &harness);
    assert!(can_connect(&fabric, BOB).await);
    assert!(!can_connect(&fabric, ALICE).await);
    // The gate also decides which tips are credited.
    assert_eq!(
        tip(&harness, 1, ALICE, 1_000).await,
        brmcp::server::TipOutcome::NotCredited
    );
    assert_eq!(
        tip(&harness, 2, BOB, 1_000).await,
        brmcp::server::TipOutcome::Credited
    );
}
