//! Per-caller visibility (Go `TestToolVisibility`): an admin-only tool is listed and
//! callable for the admin, and absent from another caller's list and unknown to its
//! calls (JSON-RPC invalid params, as for a tool that does not exist).

use std::sync::Arc;

use crate::support::*;
use rmcp::ServiceError;
use rmcp::model::ErrorCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_tool_is_visible_to_the_admin_only() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let admin = peer(ALICE);
    let env = env(
        builder
            .tool(echo(&probe))
            .tool(fortune(&probe, 0))
            .visibility(move |caller, tool| tool != "fortune" || *caller == admin),
        clock,
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;
    let bob = client(&env.fabric, BOB).await;

    let names = |tools: Vec<rmcp::model::Tool>| -> Vec<String> {
        tools.into_iter().map(|t| t.name.into_owned()).collect()
    };
    assert_eq!(
        names(alice.list_all_tools().await.unwrap()),
        ["echo", "fortune"]
    );
    assert_eq!(names(bob.list_all_tools().await.unwrap()), ["echo"]);
    assert_eq!(env.harness.tools_for(&peer(BOB)).len(), 1);

    let ran = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert!(!is_error(&ran), "{ran:?}");

    for (client, name) in [(&bob, "fortune"), (&alice, "no_such_tool")] {
        match call_err(client, name).await {
            ServiceError::McpError(e) => {
                assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
                assert_eq!(e.message, format!("unknown tool {name:?}"));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(probe.runs(), 1);
    assert_eq!(env.harness.stats().calls, 1);
}
