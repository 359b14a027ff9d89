//! A call left pending by a process that died mid-call is refunded exactly once when
//! the ledger is next opened, and journaled as refunded with reason "interrupted".

use std::process::Command;

use brmcp::adapters::PeerId;
use brmcp::adapters::wire::UnixTime;
use brmcp::server::{
    ArgsHash, CallKey, CallRequest, CallState, Charge, INTERRUPTED, Keyed, Ledger, Tip,
};

const NOW: UnixTime = UnixTime(1_767_225_600);
const LATER: UnixTime = UnixTime(1_767_225_600 + 60);
const ALICE: PeerId = PeerId::from_bytes([0xa1; 32]);

/// Set for the child process of [`a_killed_process_is_refunded_on_restart`].
const CRASH_DIR_ENV: &str = "BRMCP_LEDGER_CRASH_DIR";

/// Fund Alice with 2500 matoms and charge a 2-atom keyed call, leaving it pending.
/// Alice's keyed, argument-less call of `fortune` for 2 atoms.
fn fortune_call(key: &CallKey) -> CallRequest<'_> {
    CallRequest {
        caller: ALICE,
        tool: "fortune",
        price_atoms: 2,
        keyed: Some(Keyed {
            key,
            args: ArgsHash::of_arguments(None),
        }),
    }
}

fn fund_and_charge(ledger: &Ledger, key: &CallKey) {
    let tip = Tip {
        seq: 1,
        caller: ALICE,
        matoms: 2_500,
    };
    ledger.record_tip(&tip, true, NOW).unwrap();
    let request = fortune_call(key);
    assert!(matches!(
        ledger.charge(&request, NOW).unwrap(),
        Charge::Run(_)
    ));
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 500);
}

fn assert_refunded_once(dir: &std::path::Path, key: &CallKey) {
    let opened = Ledger::open(dir, LATER).unwrap();
    assert_eq!(opened.refunded, 1);
    let ledger = opened.ledger;
    assert_eq!(ledger.balance_matoms(&ALICE).unwrap(), 2_500);
    let journal = ledger.journal(None, 10).unwrap();
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].state, CallState::Refunded);
    assert_eq!(journal[0].reason.as_deref(), Some(INTERRUPTED));
    assert_eq!(journal[0].finished_at, Some(LATER));
    assert!(!journal[0].key_held);
    drop(ledger);

    // Reopening again refunds nothing more.
    let opened = Ledger::open(dir, LATER).unwrap();
    assert_eq!(opened.refunded, 0);
    assert_eq!(opened.ledger.balance_matoms(&ALICE).unwrap(), 2_500);

    // The key was released with the refund: the caller's retry runs (and pays) afresh.
    let request = fortune_call(key);
    assert!(matches!(
        opened.ledger.charge(&request, LATER).unwrap(),
        Charge::Run(_)
    ));
    assert_eq!(opened.ledger.balance_matoms(&ALICE).unwrap(), 500);
}

#[test]
fn a_dropped_store_is_refunded_on_reopen_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let key = CallKey::new("crash-key-1").unwrap();
    let opened = Ledger::open(dir.path(), NOW).unwrap();
    assert_eq!(opened.refunded, 0);
    fund_and_charge(&opened.ledger, &key);
    drop(opened);

    assert_refunded_once(dir.path(), &key);
}

#[test]
fn a_killed_process_is_refunded_on_restart() {
    let dir = tempfile::tempdir().unwrap();
    let key = CallKey::new("crash-key-2").unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &crate::support::test_name(module_path!(), "crash_child"),
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_DIR_ENV, dir.path())
        .output()
        .unwrap();
    // Died of the abort, not of a failed assertion before it.
    let stderr = String::from_utf8_lossy(&child.stderr);
    assert!(
        !child.status.success() && !stderr.contains("panicked"),
        "{stderr}"
    );
    #[cfg(unix)]
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&child.status),
        Some(6),
        "SIGABRT"
    );

    assert_refunded_once(dir.path(), &key);
}

/// The child of [`a_killed_process_is_refunded_on_restart`]: charges, then aborts with
/// the call pending and the connection still open. Does nothing in a normal run.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CRASH_DIR_ENV) else {
        return;
    };
    let ledger = Ledger::open(dir.as_ref(), NOW).unwrap().ledger;
    fund_and_charge(&ledger, &CallKey::new("crash-key-2").unwrap());
    std::process::abort();
}
