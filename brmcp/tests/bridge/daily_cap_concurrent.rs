//! The daily cap is reserved atomically before paying: 20 concurrent paid calls against
//! a cap of 5 make exactly 5 payments, and the other 15 are refused by the cap.

use crate::common::{agent, autopay, call, env, last_text};
use rmcp::model::CallToolRequestParams;
use serde_json::json;

fn quote() -> CallToolRequestParams {
    // `quote` costs `n` atoms.
    call("quote", json!({"n": 1}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_paid_calls_cannot_exceed_a_cap_of_five() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.per_call_cap_atoms = 1;
        s.per_day_cap_atoms = 5;
        s
    })
    .await;
    let agent = agent(&env).await;
    let calls = (0..20).map(|_| {
        let peer = agent.peer().clone();
        tokio::spawn(async move { peer.call_tool(quote()).await })
    });
    let mut paid = 0;
    let mut refused = 0;
    for handle in calls {
        let r = handle.await.unwrap().expect("call");
        if r.is_error == Some(false) {
            paid += 1;
        } else {
            let note = last_text(&r);
            assert!(
                note.contains("payment not made: 1 atoms would exceed the daily cap ("),
                "{note}"
            );
            assert!(note.ends_with(" spent of 5)"), "{note}");
            refused += 1;
        }
    }
    assert_eq!((paid, refused), (5, 15));
    assert_eq!(env.payer.count(), 5);
    assert_eq!(env.bot.executions("quote"), 5);
    let (entries, today) = env.bridge.spend_log().unwrap();
    assert_eq!(entries.len(), 5);
    assert_eq!(today, 5);
    agent.cancel().await.unwrap();
}

/// In approval mode all 20 pass the first look at the cap while they wait for the
/// user (nothing is reserved yet); approving them all still pays exactly 5: the
/// reservation after approval is what binds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_approved_payments_cannot_exceed_a_cap_of_five() {
    let env = env(|bot| {
        let mut s = autopay(bot);
        s.mode = brmcp::bridge::Mode::Approval;
        s.per_call_cap_atoms = 1;
        s.per_day_cap_atoms = 5;
        s
    })
    .await;
    let mut parked = env.bridge.subscribe_payments();
    let agent = agent(&env).await;
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let peer = agent.peer().clone();
            tokio::spawn(async move { peer.call_tool(quote()).await })
        })
        .collect();
    let mut ids = Vec::new();
    while ids.len() < 20 {
        ids.push(parked.recv().await.expect("parked").id);
    }
    assert_eq!(env.bridge.pending_payments().len(), 20);
    for id in &ids {
        assert!(env.bridge.resolve_payment(id, true));
    }
    let mut paid = 0;
    for handle in calls {
        let r = handle.await.unwrap().expect("call");
        if r.is_error == Some(false) {
            paid += 1;
        } else {
            assert!(
                last_text(&r).contains("would exceed the daily cap"),
                "{}",
                last_text(&r)
            );
        }
    }
    assert_eq!(paid, 5);
    assert_eq!(env.payer.count(), 5);
    assert_eq!(env.bridge.spend_log().unwrap().1, 5);
    agent.cancel().await.unwrap();
}

/// The same against the real serving harness: 5 payments, 5 runs, nothing left over.
///
/// The harness keeps one prepaid balance per caller, so a concurrent call may spend a
/// credit another call paid for: the call whose credit was taken then pays again,
/// which the cap refuses. Either way the bridge pays at most the cap, every payment
/// buys exactly one run, and no agent sees the bot's raw payment_required.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_paid_calls_to_the_harness() {
    let env = crate::common::harness_bot::harness_env(|bot| {
        let mut s = autopay(bot);
        s.per_call_cap_atoms = 1;
        s.per_day_cap_atoms = 5;
        s
    })
    .await;
    let agent = crate::common::connect(&env.bridge, env.bot_id, ()).await;
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let peer = agent.peer().clone();
            tokio::spawn(async move { peer.call_tool(quote()).await })
        })
        .collect();
    let mut paid = 0;
    for handle in calls {
        let r = handle.await.unwrap().expect("call");
        if r.is_error == Some(false) {
            paid += 1;
        } else {
            let note = last_text(&r);
            assert!(note.contains("would exceed the daily cap"), "{note}");
            assert!(
                !crate::common::text(&r).contains(r#""error":"payment_required""#),
                "{note}"
            );
        }
    }
    assert_eq!(paid, 5);
    assert_eq!(env.payments.load(std::sync::atomic::Ordering::SeqCst), 5);
    assert_eq!(env.bridge.spend_log().unwrap().1, 5);
    assert_eq!(
        env.bot.harness.balance_matoms(env.bridge_id).await.unwrap(),
        0
    );
    agent.cancel().await.unwrap();
}
