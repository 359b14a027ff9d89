//! Restarts: a registration stored in any state resumes where it stopped; a test
//! interrupted mid-payment resumes with the same call key and runs once.

use std::sync::atomic::Ordering;
use std::time::Duration;

use brmcp::adapters::mem::uid;
use brmcp::directory::{SpendState, State, Store};
use serde_json::json;

use super::*;

/// Closes the directory and starts another on the same data directory.
async fn restart(w: &mut World, mode: Mode) {
    let old = w.dir.take().unwrap();
    old.close().await;
    drop(old);
    let payer = FakePayer {
        mode,
        ..w.payer.clone()
    };
    w.payer = payer.clone();
    let (directory, router) = start_directory(&w.fabric, &w.clock, w.data.path(), payer).await;
    w.dir = Some(directory);
    w.dir_router = router;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn awaiting_funding_survives_a_restart() {
    let mut w = world().await;
    let provider = w.as_provider().await;
    ok(&provider, "register", registration(2000)).await;
    drop(provider);
    restart(&mut w, Mode::Pay).await;
    assert_eq!(w.entry().reg.unwrap().state, State::AwaitingFunding);
    w.tip(3000).await;
    w.wait_reg(Some(State::PendingReview)).await;
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 1);
    assert_eq!(w.balance().await, 1500);
}

/// Waits up to 10 s until the directory's payer was asked for exactly one payment.
async fn wait_one_payment(w: &World) {
    for _ in 0..1000 {
        if w.payer.calls.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(w.payer.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_interrupted_mid_payment_resumes_with_the_same_call_key() {
    let mut w = world_with(Mode::Hang).await;
    let provider = w.as_provider().await;
    ok(&provider, "register", registration(2000)).await;
    w.tip(3000).await;
    // The tip is on its way (it never lands).
    wait_one_payment(&w).await;
    drop(provider);
    w.directory().close().await;
    w.directory().settle().await;
    let reg = w.entry().reg.unwrap();
    assert_eq!(reg.state, State::Testing, "a shutdown is not a failure");
    assert!(!reg.call_key.is_empty());
    assert_eq!(
        reg.paid_atoms, 500,
        "the unconfirmed tip counts against the budget"
    );
    let key = reg.call_key.clone();

    restart(&mut w, Mode::Pay).await;
    let entry = w.wait_reg(Some(State::PendingReview)).await;
    let reg = entry.reg.unwrap();
    assert_eq!(reg.test_err, "");
    assert_eq!(reg.call_key, key, "the same key after the restart");
    assert_eq!(
        w.provider.runs.load(Ordering::SeqCst),
        1,
        "exactly one execution"
    );
    let stats = w.directory().stats().unwrap();
    assert_eq!((stats.spend_entries, stats.spend_atoms), (2, 1000));
    // The provider saw one key from the directory, on every call.
    let journal = w
        .provider
        .harness
        .ledger()
        .unwrap()
        .journal(Some(&uid(DIR)), 100)
        .unwrap();
    assert!(!journal.is_empty());
    assert!(
        journal
            .iter()
            .all(|e| e.call_key.as_deref() == Some(key.as_str()))
    );
    // Money: tipped 3000 = fee 1000 + two launched payments + 1000 left.
    assert_eq!(w.balance().await, 1000);
    let (_a, admin) = w.as_user(ADMIN).await;
    assert_eq!(ok(&admin, "stats", json!({})).await["spendEntries"], 2);
}

/// A shutdown while a tip is on its way lets it confirm: the payment is recorded paid,
/// and the resumed test is not paid for again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_payment_confirming_during_a_shutdown_is_not_repeated_after_the_restart() {
    let mut w = world_with(Mode::Slow).await;
    let provider = w.as_provider().await;
    ok(&provider, "register", registration(2000)).await;
    w.tip(3000).await;
    wait_one_payment(&w).await;
    drop(provider);
    w.directory().close().await;
    let reg = w.entry().reg.unwrap();
    assert_eq!(reg.state, State::Testing, "a shutdown is not a failure");
    let spends = Store::open(w.data.path()).unwrap().spends().unwrap();
    assert_eq!(spends.len(), 1);
    assert_eq!(
        spends[0].state,
        SpendState::Paid,
        "confirmed while stopping"
    );

    restart(&mut w, Mode::Pay).await;
    let entry = w.wait_reg(Some(State::PendingReview)).await;
    let reg = entry.reg.unwrap();
    assert_eq!(reg.test_err, "");
    assert_eq!(w.payer.calls.load(Ordering::SeqCst), 1, "paid once in all");
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 1);
    let stats = w.directory().stats().unwrap();
    assert_eq!((stats.spend_entries, stats.spend_atoms), (1, 500));
    // Money: tipped 3000 = fee 1000 + one payment + 1500 left.
    assert_eq!(w.balance().await, 1500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debit_whose_tip_was_never_sent_is_refunded_at_restart() {
    let mut w = world_with(Mode::Hang).await;
    let provider = w.as_provider().await;
    ok(&provider, "register", registration(2000)).await;
    w.tip(3000).await;
    wait_one_payment(&w).await;
    drop(provider);
    w.directory().close().await;
    w.directory().settle().await;
    // Make the store say what a crash between the debit and the send leaves: the
    // payment `launched`, the registration not credited with it.
    {
        let store = Store::open(w.data.path()).unwrap();
        let spend = store.spends().unwrap().pop().unwrap();
        store
            .set_spend(spend.id, SpendState::Launched, None, None)
            .unwrap();
        store
            .update(&provider_uid(), |s| {
                s.entry.reg.as_mut().unwrap().paid_atoms = 0;
                Ok(())
            })
            .unwrap();
    }
    assert_eq!(w.balance().await, 1500, "fee and one debit taken");
    restart(&mut w, Mode::Pay).await;
    w.wait_reg(Some(State::PendingReview)).await;
    let stats = w.directory().stats().unwrap();
    assert_eq!(
        (stats.spend_entries, stats.spend_atoms),
        (1, 500),
        "the unsent one is gone"
    );
    assert_eq!(
        w.balance().await,
        1500,
        "its debit came back; the new one stands"
    );
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fee_debited_before_a_crash_is_not_charged_again() {
    use brmcp::adapters::wire::UnixTime;
    use brmcp::server::{ArgsHash, CallKey, CallRequest, Charge, Keyed, Ledger};

    let mut w = world().await;
    let provider = w.as_provider().await;
    ok(&provider, "register", registration(2000)).await;
    drop(provider);
    let old = w.dir.take().unwrap();
    old.close().await;
    drop(old);
    // What a crash between the fee debit and the state change leaves: the tips
    // credited, the fee debited under the registration's key, the state unchanged.
    let fund_key = Store::open(w.data.path())
        .unwrap()
        .get(&provider_uid())
        .unwrap()
        .fund_key;
    {
        let ledger = Ledger::open(w.data.path(), UnixTime(T0 as i64))
            .unwrap()
            .ledger;
        let tip = Tip {
            seq: 99,
            caller: uid(PROVIDER),
            matoms: 3_000_000,
        };
        ledger.record_tip(&tip, true, UnixTime(T0 as i64)).unwrap();
        let key = CallKey::new(&fund_key).unwrap();
        let request = CallRequest {
            caller: uid(PROVIDER),
            tool: brmcp::directory::FEE_TOOL,
            price_atoms: 1000,
            keyed: Some(Keyed {
                key: &key,
                args: ArgsHash::of_arguments(None),
            }),
        };
        let Charge::Run(id) = ledger.charge(&request, UnixTime(T0 as i64)).unwrap() else {
            panic!("the fee debit runs")
        };
        ledger.complete(id, "{}", UnixTime(T0 as i64)).unwrap();
    }
    let payer = w.payer.clone();
    let (directory, router) = start_directory(&w.fabric, &w.clock, w.data.path(), payer).await;
    w.dir = Some(directory);
    w.dir_router = router;
    let entry = w.wait_reg(Some(State::PendingReview)).await;
    assert_eq!(entry.reg.unwrap().test_err, "");
    assert_eq!(w.balance().await, 1500, "one fee, one test payment");
}
