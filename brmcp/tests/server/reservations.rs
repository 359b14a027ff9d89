//! Credit goes to the call that paid for it: a tip is reserved for the caller's keyed
//! calls refused `payment_required` that still wait, oldest first; no other call of the
//! caller spends it (a call refused again after the reservation, whose own tip went to a
//! call never paid for, takes it over), the reserved call's retry is charged from it,
//! across a SIGKILL between the tip's credit and the retry too, and money is conserved.

use std::sync::Arc;

use crate::support::*;
use brmcp::adapters::mem::Fabric;
use brmcp::adapters::protocol::PaymentRequired;
use brmcp::server::{
    CallState, Clock, Harness, MATOMS_PER_ATOM, ManualClock, RESERVATION_WAIT_SECS,
};
use serde_json::json;

const PRICE: u64 = 100;
const KEY_A: &str = "reserve-key-a";
const KEY_B: &str = "reserve-key-b";

/// The `payment_required` refusal, or `None` for any other answer.
fn shortfall(result: &rmcp::model::CallToolResult) -> Option<PaymentRequired> {
    PaymentRequired::from_result(result).unwrap()
}

/// Atoms charged for completed calls in the journal.
fn completed_atoms(harness: &Harness) -> u64 {
    let journal = harness.ledger().unwrap().journal(None, 100).unwrap();
    journal
        .iter()
        .filter(|e| e.state == CallState::Completed)
        .map(|e| e.price_atoms)
        .sum()
}

#[tokio::test]
async fn a_tip_pays_the_waiting_call_it_was_for_not_the_next_call() {
    let probe = Arc::new(Probe::default());
    let (builder, _clock, dir) = builder();
    let env = env(builder.tool(fortune(&probe, PRICE)), _clock, dir);
    let alice = client(&env.fabric, ALICE).await;

    // A, then B, refused while Alice holds nothing.
    let a = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert_eq!(shortfall(&a).unwrap().shortfall_atoms, PRICE);
    let b = call(&alice, "fortune", json!({}), Some(KEY_B)).await;
    assert_eq!(shortfall(&b).unwrap().shortfall_atoms, PRICE);

    // The tip for A lands; B (and an unkeyed call, and a new key) come first and are
    // refused: the credit is A's. Each sees a spendable balance of 0.
    tip(&env.harness, 1, ALICE, PRICE * MATOMS_PER_ATOM).await;
    assert_eq!(balance(&env.harness, ALICE).await, PRICE * MATOMS_PER_ATOM);
    for (key, label) in [
        (Some(KEY_B), "B"),
        (None, "unkeyed"),
        (Some("reserve-key-c"), "C"),
    ] {
        let refused = call(&alice, "fortune", json!({}), key).await;
        let s = shortfall(&refused).unwrap_or_else(|| panic!("{label}: {}", text(&refused)));
        assert_eq!((s.balance_atoms, s.shortfall_atoms), (0, PRICE), "{label}");
    }
    assert_eq!(probe.runs(), 0);

    // A's retry is charged from its reservation.
    let a = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert!(!is_error(&a), "{}", text(&a));
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 0);

    // B's tip is B's (B waits older than C), and B's retry runs.
    tip(&env.harness, 2, ALICE, PRICE * MATOMS_PER_ATOM).await;
    let c = call(&alice, "fortune", json!({}), Some("reserve-key-c")).await;
    assert!(shortfall(&c).is_some(), "{}", text(&c));
    let b = call(&alice, "fortune", json!({}), Some(KEY_B)).await;
    assert!(!is_error(&b), "{}", text(&b));
    assert_eq!(probe.runs(), 2);

    // Money: two tips, two completed calls, nothing left.
    assert_eq!(completed_atoms(&env.harness), 2 * PRICE);
    assert_eq!(balance(&env.harness, ALICE).await, 0);
}

#[tokio::test]
async fn a_paid_call_whose_tip_went_to_an_unpaid_call_is_served_on_its_next_retry() {
    let probe = Arc::new(Probe::default());
    let (builder, _clock, dir) = builder();
    let env = env(builder.tool(fortune(&probe, PRICE)), _clock, dir);
    let alice = client(&env.fabric, ALICE).await;
    for key in [KEY_A, KEY_B] {
        let refused = call(&alice, "fortune", json!({}), Some(key)).await;
        assert!(shortfall(&refused).is_some(), "{}", text(&refused));
    }
    // The bridge pays for B only (A was over a cap): the tip is reserved for A, the
    // oldest. B's first retry, right after the tip, is refused: A may still come.
    tip(&env.harness, 1, ALICE, PRICE * MATOMS_PER_ATOM).await;
    let b = call(&alice, "fortune", json!({}), Some(KEY_B)).await;
    assert!(shortfall(&b).is_some(), "{}", text(&b));
    // A did not come back within B's retry round: B takes the credit over and runs.
    let b = call(&alice, "fortune", json!({}), Some(KEY_B)).await;
    assert!(!is_error(&b), "{}", text(&b));
    // A, never paid for, finds nothing; and nothing was run or charged twice.
    let a = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert!(shortfall(&a).is_some(), "{}", text(&a));
    assert_eq!(probe.runs(), 1);
    assert_eq!(completed_atoms(&env.harness), PRICE);
    assert_eq!(balance(&env.harness, ALICE).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_never_take_each_others_reserved_credit() {
    let probe = Arc::new(Probe::default());
    let (builder, _clock, dir) = builder();
    let env = env(builder.tool(fortune(&probe, PRICE)), _clock, dir);
    let alice = Arc::new(client(&env.fabric, ALICE).await);
    const CALLS: usize = 8;
    let keys: Vec<String> = (0..CALLS).map(|i| format!("concurrent-key-{i}")).collect();

    // Every call refused first, in order, so each waits.
    for key in &keys {
        let refused = call(&alice, "fortune", json!({}), Some(key)).await;
        assert!(shortfall(&refused).is_some(), "{}", text(&refused));
    }
    // Half the tips arrive; every call retries at once, the unpaid ones first.
    for seq in 0..CALLS / 2 {
        tip(&env.harness, seq as u64, ALICE, PRICE * MATOMS_PER_ATOM).await;
    }
    let retries: Vec<_> = keys
        .iter()
        .rev()
        .map(|key| {
            let (alice, key) = (alice.clone(), key.clone());
            tokio::spawn(async move {
                let key = key.as_str();
                (
                    key.to_owned(),
                    call(&alice, "fortune", json!({}), Some(key)).await,
                )
            })
        })
        .collect();
    let mut ran = Vec::new();
    for retry in retries {
        let (key, result) = retry.await.unwrap();
        if shortfall(&result).is_none() {
            assert!(!is_error(&result), "{key}: {}", text(&result));
            ran.push(key);
        }
    }
    ran.sort();
    // Exactly the oldest four, whose tips came, ran; the others were refused whatever
    // the order they reached the ledger.
    assert_eq!(ran, keys[..CALLS / 2].to_vec());
    assert_eq!(probe.runs(), CALLS / 2);
    assert_eq!(completed_atoms(&env.harness), PRICE * (CALLS / 2) as u64);
    assert_eq!(balance(&env.harness, ALICE).await, 0);
}

#[tokio::test]
async fn a_reservation_never_retried_is_released_after_its_wait() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(fortune(&probe, PRICE)), clock, dir);
    let alice = client(&env.fabric, ALICE).await;
    let a = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert!(shortfall(&a).is_some());
    tip(&env.harness, 1, ALICE, PRICE * MATOMS_PER_ATOM).await;
    let ledger = env.harness.ledger().unwrap();
    let now = env.clock.now();
    assert_eq!(ledger.totals(now).unwrap().reserved_matoms, PRICE * 1000);
    let b = call(&alice, "fortune", json!({}), Some(KEY_B)).await;
    assert!(shortfall(&b).is_some());

    // A never comes back: once its wait is over, the credit is Alice's to spend.
    env.clock
        .advance(std::time::Duration::from_secs(RESERVATION_WAIT_SECS));
    assert_eq!(ledger.totals(env.clock.now()).unwrap().reserved_matoms, 0);
    let b = call(&alice, "fortune", json!({}), Some(KEY_B)).await;
    assert!(!is_error(&b), "{}", text(&b));
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 0);
}

/// The child: A refused, A's tip credited (and reserved), then killed by the parent
/// before A's retry.
async fn tipped_child(dir: std::path::PathBuf) {
    let probe = Arc::new(Probe::default());
    let harness = Harness::builder()
        .data_dir(dir.join("data"))
        .clock(ManualClock::at_unix(T0))
        .allowed_uids([peer(ALICE)])
        .tool(fortune(&probe, PRICE))
        .build()
        .unwrap();
    let fabric = Fabric::new(1);
    let _router = start(&fabric, &harness);
    let alice = client(&fabric, ALICE).await;
    let a = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert!(shortfall(&a).is_some(), "{}", text(&a));
    tip(&harness, 1, ALICE, PRICE * MATOMS_PER_ATOM).await;
    log_line(&dir.join("log"), "tipped");
    std::future::pending::<()>().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_survives_a_sigkill_between_the_tip_and_the_retry() {
    if let Some(dir) = child_dir() {
        return tipped_child(dir).await;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut process = spawn_child(
        module_path!(),
        "a_reservation_survives_a_sigkill_between_the_tip_and_the_retry",
        dir.path(),
        &[],
    );
    let log = dir.path().join("log");
    tokio::task::spawn_blocking(move || wait_for_line(&log, "tipped"))
        .await
        .unwrap();
    kill(&mut process);

    let probe = Arc::new(Probe::default());
    let harness = Harness::builder()
        .data_dir(dir.path().join("data"))
        .clock(ManualClock::at_unix(T0 + 60))
        .allowed_uids([peer(ALICE)])
        .tool(fortune(&probe, PRICE))
        .build()
        .unwrap();
    let fabric = Fabric::new(2);
    let _router = start(&fabric, &harness);
    // The redelivered tip is a duplicate: credited once, reserved once.
    assert_eq!(
        tip(&harness, 1, ALICE, PRICE * MATOMS_PER_ATOM).await,
        brmcp::server::TipOutcome::Duplicate
    );
    let alice = client(&fabric, ALICE).await;
    let b = call(&alice, "fortune", json!({}), Some(KEY_B)).await;
    assert!(shortfall(&b).is_some(), "B spent A's credit: {}", text(&b));
    let a = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert!(!is_error(&a), "{}", text(&a));
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&harness, ALICE).await, 0);
    assert_eq!(completed_atoms(&harness), PRICE);
}

/// A paid-for call refused before its charge for a reason other than payment (its price
/// not known, or its tool unavailable: an upstream down) lets go of its reservation:
/// the caller's next call, under a new key (a bridge's retry brings one), is charged
/// from that credit at once, not after the reservation's wait.
#[tokio::test]
async fn a_call_refused_before_its_charge_lets_go_of_its_reservation() {
    use brmcp::server::{CallContext, NoArgs, Price, ToolError, ToolSpec};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const DOWN: &str = "upstream is down; nothing was charged, retry later";
    for priced in [true, false] {
        let (down, runs) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let d = down.clone();
        let is_down = move || d.load(Ordering::SeqCst);
        let price = if priced {
            let is_down = is_down.clone();
            Price::dynamic(move |_, _: &NoArgs| {
                if is_down() {
                    Err(DOWN.to_owned())
                } else {
                    Ok(PRICE)
                }
            })
        } else {
            Price::Fixed(PRICE)
        };
        let r = runs.clone();
        let mut tool = ToolSpec::new(
            "work",
            "Sold for its upstream",
            price,
            move |_: CallContext, _: NoArgs| {
                r.fetch_add(1, Ordering::SeqCst);
                async { Ok::<_, ToolError>("done") }
            },
        );
        if !priced {
            tool = tool.when_available(move || {
                if is_down() {
                    Err(DOWN.to_owned())
                } else {
                    Ok(())
                }
            });
        }
        let (builder, clock, dir) = builder();
        let env = env(builder.tool(tool), clock, dir);
        let alice = client(&env.fabric, ALICE).await;
        let ledger = env.harness.ledger().unwrap().clone();
        let reserved = || ledger.totals(env.clock.now()).unwrap().reserved_matoms;

        let a = call(&alice, "work", json!({}), Some(KEY_A)).await;
        assert!(shortfall(&a).is_some(), "{}", text(&a));
        tip(&env.harness, 1, ALICE, PRICE * MATOMS_PER_ATOM).await;
        assert_eq!(reserved(), PRICE * MATOMS_PER_ATOM);

        down.store(true, Ordering::SeqCst);
        let a = call(&alice, "work", json!({}), Some(KEY_A)).await;
        assert_eq!(text(&a), DOWN);
        assert_eq!(
            reserved(),
            0,
            "the refused call's reservation is released ({priced})"
        );
        assert_eq!(balance(&env.harness, ALICE).await, PRICE * MATOMS_PER_ATOM);

        down.store(false, Ordering::SeqCst);
        let b = call(&alice, "work", json!({}), Some(KEY_B)).await;
        assert!(!is_error(&b), "{}", text(&b));
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(balance(&env.harness, ALICE).await, 0);
        assert_eq!(completed_atoms(&env.harness), PRICE);
    }
}

/// A tip of one waiting call's price exactly is reserved for that call before older
/// calls of other prices: a 2,000-atom tip pays the 2,000-atom call it was for, not a
/// 100-atom call that was refused first (which would leave the 2,000-atom call short).
#[tokio::test]
async fn a_tip_of_a_waiting_calls_price_goes_to_that_call_first() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(
        builder
            .tool(fortune(&probe, PRICE))
            .tool(brmcp::server::ToolSpec::fixed(
                "slow",
                "Dear",
                20 * PRICE,
                |_: brmcp::server::CallContext, _: brmcp::server::NoArgs| async {
                    Ok::<_, brmcp::server::ToolError>("slow done")
                },
            )),
        clock,
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;
    let cheap = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert!(shortfall(&cheap).is_some(), "{}", text(&cheap));
    let dear = call(&alice, "slow", json!({}), Some(KEY_B)).await;
    assert_eq!(shortfall(&dear).unwrap().shortfall_atoms, 20 * PRICE);

    tip(&env.harness, 1, ALICE, 20 * PRICE * MATOMS_PER_ATOM).await;
    let dear = call(&alice, "slow", json!({}), Some(KEY_B)).await;
    assert_eq!(text(&dear), "slow done");
    let cheap = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert!(shortfall(&cheap).is_some(), "{}", text(&cheap));
    tip(&env.harness, 2, ALICE, PRICE * MATOMS_PER_ATOM).await;
    let cheap = call(&alice, "fortune", json!({}), Some(KEY_A)).await;
    assert!(!is_error(&cheap), "{}", text(&cheap));
    assert_eq!(balance(&env.harness, ALICE).await, 0);
    assert_eq!(completed_atoms(&env.harness), 21 * PRICE);
}
