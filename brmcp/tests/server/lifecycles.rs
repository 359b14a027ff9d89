//! The harness serves rmcp's stateless 2026-07-28 lifecycle as well as `initialize`
//! sessions: prices are listed, a paid keyed call runs once and its duplicate replays.

use std::sync::Arc;

use crate::support::*;
use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::uid;
use rmcp::model::ProtocolVersion;
use rmcp::{ClientLifecycleMode, ClientServiceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_clients_list_pay_and_replay() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(fortune(&probe, 20)), clock, dir);
    tip(&env.harness, 1, ALICE, 100_000).await;

    let router = env.fabric.router(uid(ALICE), RouterConfig::client());
    let transport = router.dial(uid(SERVER)).unwrap();
    let service = ()
        .serve_with_lifecycle(
            transport,
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("discover");
    let alice = Client { router, service };

    let tools = alice.list_all_tools().await.unwrap();
    assert_eq!(
        serde_json::to_value(&tools[0].meta).unwrap(),
        serde_json::json!({"brmcp/priceAtoms": 20})
    );
    let key = Some("stateless-key");
    let first = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert!(!is_error(&first), "{first:?}");
    let again = call(&alice, "fortune", serde_json::json!({}), key).await;
    assert_eq!(text(&again), text(&first));
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&env.harness, ALICE).await, 80_000);
}
