//! A paid tool is advertised with its price, refuses an unfunded caller with the exact
//! `payment_required` result, runs once funded and debits its price, and refunds the
//! price when its handler fails (Go `TestPaidToolGate`).

use std::sync::Arc;

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paid_tool_gate() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(
        builder
            .tool(fortune(&probe, 500))
            .tool(fail(&probe, 500))
            .tool(echo(&probe)),
        clock,
        dir,
    );
    let alice = client(&env.fabric, ALICE).await;

    // Listed with the price, free tools with 0.
    let tools = alice.list_all_tools().await.unwrap();
    let meta = |name: &str| {
        let tool = tools.iter().find(|t| t.name == name).unwrap();
        serde_json::to_value(&tool.meta).unwrap()
    };
    assert_eq!(
        meta("fortune"),
        serde_json::json!({"brmcp/priceAtoms": 500})
    );
    assert_eq!(meta("echo"), serde_json::json!({"brmcp/priceAtoms": 0}));

    // Unfunded: refused with exactly one text content, the compact JSON in field order.
    let refused = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert!(is_error(&refused));
    assert_eq!(refused.content.len(), 1);
    assert_eq!(refused.structured_content, None);
    assert_eq!(
        text(&refused),
        r#"{"error":"payment_required","tool":"fortune","priceAtoms":500,"balanceAtoms":0,"shortfallAtoms":500,"acceptedRails":["tip"]}"#
    );
    assert_eq!(probe.runs(), 0);

    // 600 atoms credited: the call runs and leaves 100.
    tip(&env.harness, 1, ALICE, 600_000).await;
    let paid = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert!(!is_error(&paid), "{paid:?}");
    assert_eq!(
        text(&paid),
        format!("fortune #1 for {} (500 atoms)", peer(ALICE))
    );
    assert_eq!(balance(&env.harness, ALICE).await, 100_000);

    // Short by 400 now.
    let refused = call(&alice, "fortune", serde_json::json!({}), None).await;
    assert_eq!(
        text(&refused),
        r#"{"error":"payment_required","tool":"fortune","priceAtoms":500,"balanceAtoms":100,"shortfallAtoms":400,"acceptedRails":["tip"]}"#
    );

    // A failing paid handler answers with its error and gives the price back.
    tip(&env.harness, 2, ALICE, 400_000).await;
    let failed = call(&alice, "fail", serde_json::json!({}), None).await;
    assert!(is_error(&failed));
    assert_eq!(text(&failed), "out of fortunes");
    assert_eq!(balance(&env.harness, ALICE).await, 500_000);

    // The journal shows one completed and one refunded call.
    let journal = env.harness.ledger().unwrap().journal(None, 10).unwrap();
    let states: Vec<_> = journal
        .iter()
        .map(|e| (e.tool.as_str(), e.state.as_str(), e.reason.clone()))
        .collect();
    assert_eq!(
        states,
        [
            (
                "fail",
                "refunded",
                Some("handler error: out of fortunes".to_owned())
            ),
            ("fortune", "completed", None),
        ]
    );

    // Free tools run without touching the balance; output is structured plus text.
    let echoed = call(&alice, "echo", serde_json::json!({"text": "hi"}), None).await;
    assert_eq!(
        echoed.structured_content,
        Some(serde_json::json!({"echo": "hi"}))
    );
    assert_eq!(text(&echoed), r#"{"echo":"hi"}"#);
    assert_eq!(balance(&env.harness, ALICE).await, 500_000);

    let stats = env.harness.stats();
    assert_eq!(stats.payment_required, 2);
    assert_eq!(stats.runs, 3);
    assert_eq!(stats.handler_errors, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_arguments_are_a_tool_error_and_cost_nothing() {
    let probe = Arc::new(Probe::default());
    let (builder, clock, dir) = builder();
    let env = env(builder.tool(echo(&probe)), clock, dir);
    let alice = client(&env.fabric, ALICE).await;
    let result = call(&alice, "echo", serde_json::json!({"text": 5}), None).await;
    assert!(is_error(&result));
    assert!(
        text(&result).starts_with("invalid arguments: "),
        "{}",
        text(&result)
    );
    assert_eq!(probe.runs(), 0);
}
