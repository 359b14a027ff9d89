//! A tip is credited once per sequence id. The host acknowledges a tip only after
//! `record_tip` returns; a process killed between the credit and the acknowledgement
//! gets the tip redelivered, and the restarted harness recognises it and credits
//! nothing (the Go harness credited and journaled separately and double-credited in
//! that window). A tip from a caller the gate refuses is recorded, not credited, and
//! the tip hook hears of every new tip once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use brmcp::server::{Harness, TipEvent, TipOutcome};

const SEQ: u64 = 77;

fn build(dir: &std::path::Path, events: &Arc<Mutex<Vec<TipEvent>>>) -> Harness {
    let events = events.clone();
    Harness::builder()
        .data_dir(dir.join("data"))
        .allowed_uids([peer(ALICE)])
        .on_tip(move |event| events.lock().unwrap().push(event))
        .build()
        .unwrap()
}

/// The child: records the tip, says so, and is killed before it can acknowledge it.
async fn child(dir: std::path::PathBuf) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let harness = build(&dir, &events);
    assert_eq!(tip(&harness, SEQ, ALICE, 5_250).await, TipOutcome::Credited);
    log_line(&dir.join("log"), "credited");
    // The acknowledgement to the host would go here.
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tip_redelivered_after_a_crash_is_not_credited_twice() {
    if let Some(dir) = child_dir() {
        return child(dir).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut process = spawn_child(
        module_path!(),
        "a_tip_redelivered_after_a_crash_is_not_credited_twice",
        dir.path(),
        &[],
    );
    tokio::task::spawn_blocking({
        let log = dir.path().join("log");
        move || wait_for_line(&log, "credited")
    })
    .await
    .unwrap();
    kill(&mut process);

    let events = Arc::new(Mutex::new(Vec::new()));
    let harness = build(dir.path(), &events);
    assert_eq!(balance(&harness, ALICE).await, 5_250);
    // The host redelivers the unacknowledged tip, twice for good measure.
    for _ in 0..2 {
        assert_eq!(
            tip(&harness, SEQ, ALICE, 5_250).await,
            TipOutcome::Duplicate
        );
    }
    assert_eq!(balance(&harness, ALICE).await, 5_250);
    assert!(
        events.lock().unwrap().is_empty(),
        "no hook for a redelivery"
    );

    // A new tip is credited and reported once.
    assert_eq!(
        tip(&harness, SEQ + 1, ALICE, 750).await,
        TipOutcome::Credited
    );
    assert_eq!(
        tip(&harness, SEQ + 1, ALICE, 750).await,
        TipOutcome::Duplicate
    );
    assert_eq!(balance(&harness, ALICE).await, 6_000);
    let record = harness.ledger().unwrap().tip(SEQ).unwrap().unwrap();
    assert!(record.credited);
    assert_eq!(record.tip.matoms, 5_250);
    assert_eq!(events.lock().unwrap().len(), 1);
    assert!(events.lock().unwrap()[0].credited);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_tipper_is_recorded_not_credited_and_the_hook_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let harness = build(dir.path(), &events);
    assert_eq!(
        tip(&harness, 5, MALLORY, 9_000).await,
        TipOutcome::NotCredited
    );
    assert_eq!(
        tip(&harness, 5, MALLORY, 9_000).await,
        TipOutcome::Duplicate
    );
    assert_eq!(balance(&harness, MALLORY).await, 0);
    let events = events.lock().unwrap();
    assert_eq!(events.len(), 1);
    let event = events[0];
    assert_eq!(
        (event.seq, event.caller, event.matoms, event.credited),
        (5, peer(MALLORY), 9_000, false)
    );
}
