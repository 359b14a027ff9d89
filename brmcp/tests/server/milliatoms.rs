//! Tip remainders below one atom are kept: balances are milliatoms (the Go harness
//! floored every tip to whole atoms, so three tips of 999 milliatoms bought nothing,
//! weakness §4.10.9). `payment_required` shows the balance floored to whole atoms.

use std::sync::Arc;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn milliatom_remainders_add_up_and_survive_calls() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(fortune(&probe, 3)), clock, dir);
    let alice = client(&env.fabric, ALICE).await;

    for seq in 1..=3 {
        tip(&env.harness, seq, ALICE, 999).await;
    }
    assert_eq!(balance(&env.harness, ALICE).await, 2_997);
    let refused = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert_eq!(
        text(&refused),
        r#"{"error":"payment_required","tool":"fortune","priceAtoms":3,"balanceAtoms":2,"shortfallAtoms":1,"acceptedRails":["tip"]}"#
    );

    // Three more milliatoms make three atoms: the call runs and nothing is left.
    tip(&env.harness, 4, ALICE, 3).await;
    let paid = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert!(!is_error(&paid), "{paid:?}");
    assert_eq!(balance(&env.harness, ALICE).await, 0);

    // A remainder outlives the call that could not use it.
    tip(&env.harness, 5, ALICE, 3_500).await;
    let paid = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert!(!is_error(&paid));
    assert_eq!(balance(&env.harness, ALICE).await, 500);
    tip(&env.harness, 6, ALICE, 2_500).await;
    let paid = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert!(!is_error(&paid));
    assert_eq!(balance(&env.harness, ALICE).await, 0);
    assert_eq!(probe.runs(), 3);
}
