//! The ledger's lifecycle through the harness (Go `TestLedgerLifecycle`): credit 100,
//! a 40-atom call, a 61-atom call refused with balance 60 and shortfall 1, credit 25,
//! and after a restart the balance is 85.

use crate::support::*;
use brmcp::adapters::mem::Fabric;
use brmcp::server::{Harness, ManualClock, NoArgs, ToolError, ToolSpec};

fn priced(name: &'static str, atoms: u64) -> ToolSpec {
    ToolSpec::fixed(name, "Costs its price", atoms, |_, _: NoArgs| async {
        Ok::<_, ToolError>("ok")
    })
}

fn build(dir: &std::path::Path) -> Harness {
    Harness::builder()
        .data_dir(dir)
        .clock(ManualClock::at_unix(T0))
        .allowed_uids([peer(ALICE)])
        .tool(priced("cost40", 40))
        .tool(priced("cost61", 61))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credit_debit_refuse_credit_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let harness = build(dir.path());
        let fabric = Fabric::new(1);
        let router = start(&fabric, &harness);
        let alice = client(&fabric, ALICE).await;
        tip(&harness, 1, ALICE, 100_000).await;
        assert_eq!(
            text(&call(&alice, "cost40", serde_json::json!({}), None).await),
            "ok"
        );
        let refused = call(&alice, "cost61", serde_json::json!({}), None).await;
        assert_eq!(
            text(&refused),
            r#"{"error":"payment_required","tool":"cost61","priceAtoms":61,"balanceAtoms":60,"shortfallAtoms":1,"acceptedRails":["tip"]}"#
        );
        assert_eq!(balance(&harness, ALICE).await, 60_000);
        tip(&harness, 2, ALICE, 25_000).await;
        alice.router.close();
        router.close();
    }
    let harness = build(dir.path());
    assert_eq!(balance(&harness, ALICE).await, 85_000);
    let balances = harness.ledger().unwrap().balances().unwrap();
    assert_eq!(balances.len(), 1);
    assert_eq!(
        (balances[0].caller, balances[0].matoms),
        (peer(ALICE), 85_000)
    );
}
