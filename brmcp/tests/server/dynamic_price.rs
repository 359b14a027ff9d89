//! A dynamically priced tool is listed with `brmcp/pricing: "dynamic"`; each call's price
//! comes from the caller and the arguments; a price of 0 is free and journals nothing;
//! a pricing failure is the tool error, charges nothing and leaves the key free; a price
//! outside the bound a bounded tool lists is refused the same way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::support::*;
use brmcp::server::{CallContext, Price, PriceBounds, ToolError, ToolSpec, schemars};

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Work {
    /// Units of work, one atom each.
    units: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn price_follows_caller_and_arguments() {
    let runs = Arc::new(AtomicUsize::new(0));
    let bob = peer(BOB);
    let price = Price::dynamic(move |caller, work: &Work| match work.units {
        n if n > 100 => Err(format!("{n} units is too many")),
        // Bob pays double.
        n if *caller == bob => Ok(2 * n),
        n => Ok(n),
    });
    let tool = {
        let runs = runs.clone();
        ToolSpec::new(
            "work",
            "One atom per unit",
            price,
            move |call: CallContext, work: Work| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move {
                    Ok::<_, ToolError>(format!(
                        "{} units for {} atoms",
                        work.units,
                        call.price_atoms()
                    ))
                }
            },
        )
    };
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(tool), clock, dir);
    tip(&env.harness, 1, ALICE, 100_000).await;
    tip(&env.harness, 2, BOB, 100_000).await;
    let alice = client(&env.fabric, ALICE).await;
    let bob = client(&env.fabric, BOB).await;

    let tools = alice.list_all_tools().await.unwrap();
    assert_eq!(
        serde_json::to_value(&tools[0].meta).unwrap(),
        serde_json::json!({"brmcp/pricing": "dynamic"})
    );

    let r = call(&alice, "work", serde_json::json!({"units": 7}), None).await;
    assert_eq!(text(&r), "7 units for 7 atoms");
    let r = call(&bob, "work", serde_json::json!({"units": 7}), None).await;
    assert_eq!(text(&r), "7 units for 14 atoms");
    let r = call(&alice, "work", serde_json::json!({"units": 0}), None).await;
    assert_eq!(text(&r), "0 units for 0 atoms");
    assert_eq!(balance(&env.harness, ALICE).await, 93_000);
    assert_eq!(balance(&env.harness, BOB).await, 86_000);
    // Two paid calls journaled; the free one is not.
    assert_eq!(
        env.harness
            .ledger()
            .unwrap()
            .journal(None, 10)
            .unwrap()
            .len(),
        2
    );

    let key = Some("dyn-key-001");
    let refused = call(&alice, "work", serde_json::json!({"units": 500}), key).await;
    assert!(is_error(&refused));
    assert_eq!(text(&refused), "500 units is too many");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert_eq!(balance(&env.harness, ALICE).await, 93_000);
    // The refusal did not take the key: had it, other arguments would be refused.
    let r = call(&alice, "work", serde_json::json!({"units": 1}), key).await;
    assert_eq!(text(&r), "1 units for 1 atoms");
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert_eq!(balance(&env.harness, ALICE).await, 92_000);
}

/// A bounded dynamic tool lists its bound beside `brmcp/pricing` and never charges
/// outside it: a price above the most (or below the least) refuses the call with both
/// numbers, runs nothing, charges nothing and leaves the key free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_price_outside_the_listed_bound_is_refused_and_charges_nothing() {
    let runs = Arc::new(AtomicUsize::new(0));
    let bounds = PriceBounds::new(2, Some(50)).unwrap();
    let tool = {
        let runs = runs.clone();
        ToolSpec::new(
            "work",
            "One atom per unit",
            Price::bounded(bounds, |_, work: &Work| Ok(work.units)),
            move |call: CallContext, _: Work| {
                runs.fetch_add(1, Ordering::SeqCst);
                async move { Ok::<_, ToolError>(format!("{} atoms", call.price_atoms())) }
            },
        )
    };
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(tool), clock, dir);
    tip(&env.harness, 1, ALICE, 100_000).await;
    let alice = client(&env.fabric, ALICE).await;

    let tools = alice.list_all_tools().await.unwrap();
    assert_eq!(
        serde_json::to_value(&tools[0].meta).unwrap(),
        serde_json::json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 2, "brmcp/priceMaxAtoms": 50})
    );

    let key = Some("bound-key-01");
    for units in [51, 1_000_000, 1, 0] {
        let refused = call(&alice, "work", serde_json::json!({ "units": units }), key).await;
        assert!(is_error(&refused), "{units}: {}", text(&refused));
        assert_eq!(
            text(&refused),
            format!(
                "the price of this call, {units} atoms, is outside the listed bound (2 to 50 atoms); nothing was charged"
            )
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "nothing ran");
    assert_eq!(balance(&env.harness, ALICE).await, 100_000);
    let ledger = env.harness.ledger().unwrap();
    assert!(
        ledger.journal(None, 10).unwrap().is_empty(),
        "nothing journaled"
    );

    // At the bound it is charged, under the same key (the refusals did not take it).
    let r = call(&alice, "work", serde_json::json!({"units": 50}), key).await;
    assert_eq!(text(&r), "50 atoms");
    assert_eq!(balance(&env.harness, ALICE).await, 50_000);
}
