//! Paying tips: `TipUser` with the amount in DCR, matched to its terminal TipProgress
//! event by (payee, amount); failures, timeouts and refusals.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{Certs, Fake, Reply, TIP_PROGRESS, default_reply, eventually, uid};
use brmcp_clientrpc::{ClientRpcError, ClientRpcHost, Streams, TipOutcome};
use serde_json::json;
use tokio::sync::Semaphore;

const WAIT: Duration = Duration::from_secs(5);

async fn payer(certs: &Certs, fake: &Fake, tip_timeout: Duration) -> ClientRpcHost {
    let mut config = certs.config(fake);
    config.tip_timeout = tip_timeout;
    let host = ClientRpcHost::new(config).unwrap();
    host.connect(Streams::new()).await.unwrap();
    host
}

#[tokio::test]
async fn tip_sends_dcr_and_waits_for_its_terminal_event() {
    let (certs, fake) = Fake::brclient().await;
    // TipUser answers only once the test says so: events may come before the answer.
    let gate = Arc::new(Semaphore::new(0));
    let held = gate.clone();
    fake.set_handler(move |call| {
        if call.method != "PaymentsService.TipUser" {
            return default_reply(call);
        }
        let held = held.clone();
        Reply::later(async move {
            held.acquire().await.unwrap().forget();
            Reply::Result(json!({}))
        })
    });
    let host = payer(&certs, &fake, WAIT).await;
    let mut progress = host.subscribe_tip_progress();
    let mut unclaimed = host.subscribe_unclaimed_tip_results();
    let bob = uid(0x22);

    let tip = tokio::spawn({
        let host = host.clone();
        async move { host.tip(bob, 10_000).await }
    });
    eventually("TipUser sent", WAIT, || {
        fake.requests_of("PaymentsService.TipUser").len() == 1
    })
    .await;
    let request = &fake.requests_of("PaymentsService.TipUser")[0];
    assert_eq!(
        request.params,
        json!({"user": "22".repeat(32), "dcrAmount": 0.0001, "maxAttempts": 3}),
        "10,000 atoms = 0.0001 DCR"
    );

    // Not ours: a retry notice, another amount, another payee.
    fake.push_progress(&bob, 10_000_000, false, true, 1, "payee offline");
    fake.push_progress(&bob, 20_000_000, true, false, 1, "");
    fake.push_progress(&uid(0x33), 10_000_000, true, false, 1, "");
    // Ours.
    let ours = fake.push_progress(&bob, 10_000_000, true, false, 2, "");
    eventually("progress acked", WAIT, || {
        fake.unacked(TIP_PROGRESS).is_empty()
    })
    .await;
    assert!(!tip.is_finished(), "still waiting for the TipUser answer");
    gate.add_permits(1);
    assert_eq!(
        tip.await.unwrap().unwrap(),
        TipOutcome::Paid { attempts: 2 }
    );

    let mut events = Vec::new();
    while let Ok(event) = progress.try_recv() {
        events.push(event);
    }
    assert_eq!(events.len(), 4, "subscribers see every event");
    assert_eq!(events[3].sequence_id, ours);
    assert!(events[0].will_retry && !events[0].is_terminal());
    assert_eq!(
        fake.acks("PaymentsService.AckTipProgress").last(),
        Some(&ours)
    );
    // The two terminal events no tip waited for are unclaimed; the retry notice is
    // not terminal, and ours was taken.
    let mut others = Vec::new();
    while let Ok(event) = unclaimed.try_recv() {
        others.push((event.uid, event.amount_matoms));
    }
    assert_eq!(others, [(bob, 20_000_000), (uid(0x33), 10_000_000)]);
    host.close();
}

#[tokio::test]
async fn failed_tip_reports_brclients_text() {
    let (certs, fake) = Fake::brclient().await;
    let host = payer(&certs, &fake, WAIT).await;
    let bob = uid(0x22);
    let tip = tokio::spawn({
        let host = host.clone();
        async move { host.tip(bob, 1).await }
    });
    eventually("TipUser sent", WAIT, || {
        fake.requests_of("PaymentsService.TipUser").len() == 1
    })
    .await;
    assert_eq!(
        fake.requests_of("PaymentsService.TipUser")[0].params["dcrAmount"],
        json!(1e-8)
    );
    fake.push_progress(&bob, 1000, false, true, 1, "no route");
    fake.push_progress(
        &bob,
        1000,
        false,
        false,
        3,
        "attempt 3 >= max attempts 3 to fetch invoice",
    );
    assert_eq!(
        tip.await.unwrap().unwrap(),
        TipOutcome::Failed {
            attempts: 3,
            error: "attempt 3 >= max attempts 3 to fetch invoice".into()
        }
    );
    host.close();
}

#[tokio::test]
async fn tip_without_a_terminal_event_is_unconfirmed() {
    let (certs, fake) = Fake::brclient().await;
    let host = payer(&certs, &fake, Duration::from_millis(200)).await;
    let mut unclaimed = host.subscribe_unclaimed_tip_results();
    let outcome = host.tip(uid(0x22), 10_000).await.unwrap();
    assert_eq!(outcome, TipOutcome::Unconfirmed);
    // A late event matches nobody now: it goes to the unclaimed subscribers, and is
    // still acknowledged.
    let late = fake.push_progress(&uid(0x22), 10_000_000, true, false, 1, "");
    eventually("late event acked", WAIT, || {
        fake.acks("PaymentsService.AckTipProgress") == [late]
    })
    .await;
    let event = unclaimed.try_recv().unwrap();
    assert_eq!(
        (event.sequence_id, event.uid, event.completed),
        (late, uid(0x22), true)
    );
    host.close();
}

#[tokio::test]
async fn refused_tip_keeps_the_servers_text() {
    let (certs, fake) = Fake::brclient().await;
    fake.set_handler(|call| {
        if call.method == "PaymentsService.TipUser" {
            Reply::Error(-32603, "tip exceeds max limit: 0.5 DCR".into())
        } else {
            default_reply(call)
        }
    });
    let host = payer(&certs, &fake, WAIT).await;
    let err = host.tip(uid(0x22), 100_000_000).await.unwrap_err();
    assert_eq!(err.server_message(), Some("tip exceeds max limit: 0.5 DCR"));
    host.close();
}

#[tokio::test]
async fn tips_need_the_tip_progress_stream() {
    let (certs, fake) = Fake::brclient().await;
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().tip_progress(false))
        .await
        .unwrap();
    let err = host.tip(uid(0x22), 10_000).await.unwrap_err();
    assert!(matches!(err, ClientRpcError::NoTipProgress), "{err:?}");
    assert!(fake.requests_of("PaymentsService.TipUser").is_empty());
    assert!(fake.opens(TIP_PROGRESS).is_empty());
    host.close();
}
