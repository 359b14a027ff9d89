//! Where the money lives (Go `TestLedgerOpensOnlyWithoutBilling`): with another
//! billing store the harness opens no ledger and needs no data directory; without
//! either it refuses to build; the built-in ledger persists every credit; and a ledger
//! that is in use, corrupt or not a ledger stops the harness with a clear error instead
//! of being reset.

use std::sync::Arc;

use crate::support::*;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    FILE_NAME, Harness, HarnessError, Ledger, LedgerError, ManualClock, TipOutcome,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_store_means_no_ledger_file_and_no_data_dir() {
    let store_dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Ledger::open(store_dir.path(), UnixTime(T0 as i64))
            .unwrap()
            .ledger,
    );
    let data_dir = tempfile::tempdir().unwrap();
    let harness = Harness::builder()
        .billing(store.clone())
        .data_dir(data_dir.path())
        .allowed_uids([peer(ALICE)])
        .build()
        .unwrap();
    assert!(harness.ledger().is_none());
    assert_eq!(tip(&harness, 1, ALICE, 4_000).await, TipOutcome::Credited);
    assert_eq!(store.balance_matoms(&peer(ALICE)).unwrap(), 4_000);
    assert!(!data_dir.path().join(FILE_NAME).exists());

    // No data directory at all is fine with a store.
    assert!(Harness::builder().billing(store).build().is_ok());
    // Neither is an error.
    assert!(matches!(
        Harness::builder().build(),
        Err(HarnessError::NoStore)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_ledger_persists_credits() {
    let dir = tempfile::tempdir().unwrap();
    let build = || {
        Harness::builder()
            .data_dir(dir.path())
            .clock(ManualClock::at_unix(T0))
            .allowed_uids([peer(ALICE)])
            .build()
    };
    let harness = build().unwrap();
    tip(&harness, 1, ALICE, 1_500).await;
    assert!(dir.path().join(FILE_NAME).is_file());

    // One process at a time: a second harness on the same ledger is refused.
    match build() {
        Err(HarnessError::Ledger(LedgerError::InUse { .. })) => {}
        other => panic!("expected InUse, got {other:?}"),
    }
    drop(harness);
    let harness = build().unwrap();
    assert_eq!(balance(&harness, ALICE).await, 1_500);
}

#[test]
fn a_broken_ledger_is_a_clear_error_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(FILE_NAME);
    let junk = b"this is not a database, and must survive the attempt".repeat(100);
    std::fs::write(&path, &junk).unwrap();
    let err = Harness::builder().data_dir(dir.path()).build().unwrap_err();
    assert!(
        matches!(err, HarnessError::Ledger(LedgerError::NotALedger { .. })),
        "{err:?}"
    );
    assert!(err.to_string().contains("is not a brmcp ledger"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), junk);
}
