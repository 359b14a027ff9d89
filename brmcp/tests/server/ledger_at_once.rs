//! The ledger's calls made at once (`try_held`, `try_charge_from`, `try_complete`):
//! they do what the blocking calls do, decline instead of waiting (another
//! connection's write, upkeep due, a checkpoint due, a ledger that does not serve),
//! never spend money twice beside the blocking calls, and keep the log bounded.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    Billing, CHECKPOINT_PAGES, CallKey, CallRequest, CallState, Charge, Commit, FILE_NAME, Ledger,
    Tip,
};

use crate::support::ledger::document_call;

const NOW: UnixTime = UnixTime(1_767_225_600);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);

fn unkeyed(price_atoms: u64) -> CallRequest<'static> {
    CallRequest {
        caller: ALICE,
        tool: "fortune",
        price_atoms,
        keyed: None,
    }
}

/// A serving ledger in `dir` with `matoms` of Alice's, and its first charge made
/// blocking (the first charge of a second releases expired keys, and a caller's first
/// is due a prune: neither runs at once).
fn funded(dir: &std::path::Path, matoms: u64) -> Ledger {
    let ledger = Ledger::open(dir, NOW).unwrap().ledger;
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms,
    };
    ledger.record_tip(&tip, true, NOW).unwrap();
    let Charge::Run(first) = ledger.charge(&unkeyed(1), NOW).unwrap() else {
        panic!("the first charge did not run");
    };
    ledger.complete(first, "{}", NOW).unwrap();
    ledger
}

#[test]
fn a_call_made_at_once_is_the_blocking_call() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = funded(dir.path(), 10_000);
    let Some(Ok(Charge::Run(call))) = ledger.try_charge_from(&unkeyed(3), None, NOW) else {
        panic!("not charged at once");
    };
    assert_eq!(
        ledger.balance_matoms(&ALICE).unwrap(),
        10_000 - 1_000 - 3_000
    );
    let commit = ledger
        .try_complete(call, "{\"ok\":1}", NOW)
        .unwrap()
        .unwrap();
    ledger.synced(commit).unwrap();
    let journal = ledger.journal(Some(&ALICE), 10).unwrap();
    let entry = journal.iter().find(|e| e.id == call).unwrap();
    assert_eq!(entry.state, CallState::Completed);

    // A keyed call: charged at once, then its key answers at once with the outcome.
    let key = CallKey::new("at-once-key-0001").unwrap();
    let request = document_call(ALICE, &key);
    let keyed = request.keyed.unwrap();
    assert!(matches!(
        ledger.try_held(&ALICE, "document", keyed, NOW),
        Some(Ok(None))
    ));
    let Some(Ok(Charge::Run(call))) = ledger.try_charge_from(&request, None, NOW) else {
        panic!("keyed call not charged at once");
    };
    assert!(matches!(
        ledger.try_held(&ALICE, "document", keyed, NOW),
        Some(Ok(Some(Charge::InProgress)))
    ));
    ledger
        .synced(
            ledger
                .try_complete(call, "{\"kept\":1}", NOW)
                .unwrap()
                .unwrap(),
        )
        .unwrap();
    let replay = ledger.try_held(&ALICE, "document", keyed, NOW);
    assert_eq!(
        replay.unwrap().unwrap(),
        Some(Charge::Replay("{\"kept\":1}".into()))
    );

    // Short of money at once: refused, nothing debited.
    let before = ledger.balance_matoms(&ALICE).unwrap();
    assert!(matches!(
        ledger.try_charge_from(&unkeyed(1_000), None, NOW),
        Some(Ok(Charge::Insufficient(_)))
    ));
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), before);
    // A completion of an unknown call fails at once, as the blocking one does.
    assert!(matches!(
        ledger.try_complete(brmcp::server::CallId::new(9_999), "{}", NOW),
        Some(Err(_))
    ));
}

#[test]
fn another_connections_write_is_declined_not_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = funded(dir.path(), 10_000);
    let Some(Ok(Charge::Run(call))) = ledger.try_charge_from(&unkeyed(1), None, NOW) else {
        panic!("not charged at once");
    };
    let other = rusqlite::Connection::open(dir.path().join(FILE_NAME)).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    // The write lock is the other connection's: each declines at once.
    assert!(ledger.try_charge_from(&unkeyed(1), None, NOW).is_none());
    assert!(ledger.try_complete(call, "{}", NOW).is_none());
    let balance = ledger.balance_matoms(&ALICE).unwrap();

    // The blocking call still waits for the lock: the at-once path gave its wait back.
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        other.execute_batch("COMMIT").unwrap();
    });
    ledger.complete(call, "{}", NOW).unwrap();
    release.join().unwrap();
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), balance);
    assert!(matches!(
        ledger.try_charge_from(&unkeyed(1), None, NOW),
        Some(Ok(Charge::Run(_)))
    ));
}

#[test]
fn upkeep_due_is_declined_for_the_blocking_call() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open(dir.path(), NOW).unwrap().ledger;
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms: 10_000,
    };
    ledger.record_tip(&tip, true, NOW).unwrap();
    // The first charge of this second releases expired keys, and Alice's first prunes.
    assert!(ledger.try_charge_from(&unkeyed(1), None, NOW).is_none());
    assert!(matches!(
        ledger.charge(&unkeyed(1), NOW),
        Ok(Charge::Run(_))
    ));
    assert!(matches!(
        ledger.try_charge_from(&unkeyed(1), None, NOW),
        Some(Ok(Charge::Run(_)))
    ));
    // A new second: the release is due again.
    let later = NOW.saturating_add(1);
    assert!(ledger.try_charge_from(&unkeyed(1), None, later).is_none());
    // Another caller's first charge is due its prune.
    let bob = PeerId::from_bytes([0xb0; 32]);
    let _ = ledger.charge(&unkeyed(1), later).unwrap();
    let bobs = CallRequest {
        caller: bob,
        ..unkeyed(0)
    };
    assert!(ledger.try_charge_from(&bobs, None, later).is_none());
}

#[test]
fn a_ledger_that_does_not_serve_declines() {
    let dir = tempfile::tempdir().unwrap();
    let serving = funded(dir.path(), 10_000);
    let attached = Ledger::attach(dir.path()).unwrap();
    assert!(attached.try_charge_from(&unkeyed(1), None, NOW).is_none());
    assert!(
        attached
            .try_complete(brmcp::server::CallId::new(1), "{}", NOW)
            .is_none()
    );
    drop(serving);
}

#[test]
fn a_made_up_commit_is_waited_for_no_longer_than_every_commit_so_far() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = funded(dir.path(), 10_000);
    ledger.synced(Commit::new(u64::MAX)).unwrap();
    ledger.synced(Commit::new(0)).unwrap();
}

#[test]
fn the_log_stays_bounded_when_every_call_is_made_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = funded(dir.path(), 1 << 40);
    let wal = dir.path().join(format!("{FILE_NAME}-wal"));
    // Outcomes of 16 KiB: four pages or more a completion, so the log passes the
    // checkpoint's size within a few hundred calls.
    let outcome = format!("{{\"text\":\"{}\"}}", "x".repeat(16 << 10));
    let (mut declined, mut largest) = (0, 0);
    for n in 0..2_000 {
        let key = CallKey::new(&format!("bounded-log-{n:06}")).unwrap();
        let request = document_call(ALICE, &key);
        let charged = match ledger.try_charge_from(&request, None, NOW) {
            Some(charged) => charged.unwrap(),
            None => {
                declined += 1;
                ledger.charge(&request, NOW).unwrap()
            }
        };
        let Charge::Run(call) = charged else {
            panic!("call {n} did not run");
        };
        match ledger.try_complete(call, &outcome, NOW) {
            Some(commit) => ledger.synced(commit.unwrap()).unwrap(),
            None => {
                declined += 1;
                ledger.complete(call, &outcome, NOW).unwrap();
            }
        }
        largest = largest.max(std::fs::metadata(&wal).map_or(0, |m| m.len()));
    }
    // Checkpointed as it went: the log never held much more than a checkpoint's worth.
    let bound = (CHECKPOINT_PAGES + 64) * 4_096 + 4_096 * 16;
    assert!(
        largest <= bound,
        "log reached {largest} bytes, bound {bound}"
    );
    // Calls were declined only for upkeep: a few in 4,000.
    assert!(declined < 400, "{declined} of 4000 declined");
}

#[test]
fn at_once_and_blocking_charges_together_spend_each_milliatom_once() {
    const THREADS: usize = 16;
    const AFFORDABLE: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    // Funded for the first charge plus five more.
    let ledger = Arc::new(funded(dir.path(), 1_000 + 3_000 * AFFORDABLE as u64));
    let billing: Arc<dyn Billing> = ledger.clone();
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|n| {
            let (billing, barrier) = (Arc::clone(&billing), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let request = unkeyed(3);
                // Half try at once first, as the harness does; half only block.
                let at_once = if n % 2 == 0 {
                    billing.try_charge_from(&request, None, NOW)
                } else {
                    None
                };
                at_once
                    .unwrap_or_else(|| billing.charge_from(&request, None, NOW))
                    .unwrap()
            })
        })
        .collect();
    let ran = threads
        .into_iter()
        .map(|t| t.join().unwrap())
        .filter(|c| matches!(c, Charge::Run(_)))
        .count();
    assert_eq!(ran, AFFORDABLE);
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 0);
}
