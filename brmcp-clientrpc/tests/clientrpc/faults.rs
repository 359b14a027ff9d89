//! The faults brclient really produces, and what the host does with them: ids out of
//! order (an ack never clears an item not yet recorded), an item arriving after a later
//! id's ack (handled, not dropped), ids starting over after the logs were reset
//! (handled, not skipped), a stream open refused (only that stream retried), tip
//! outcomes (also one a waiting tip took) acknowledged only once their handler
//! recorded them, the client's identity
//! checked before any stream opens, and a PM as large as a relay routes taken whole.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{
    ACK_SETTLE, Certs, FIRST_SEQ, Fake, PM_STREAM, TIP_PROGRESS, TIP_STREAM, assert_before,
    eventually, uid,
};
use brmcp_adapters::BoxError;
use brmcp_clientrpc::{ClientRpcHost, Streams, TipHandler};
use brmcp_clientrpc::{ReceivedTip, TipProgressEvent};

const WAIT: Duration = Duration::from_secs(5);

const ACK_TIP: &str = "PaymentsService.AckTipReceived";

/// A tip handler noting each tip (`tip N`) and each clearing (`cleared N`) in the
/// fake's timeline.
#[derive(Clone)]
struct Tips {
    timeline: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Vec<u64>>>,
}

impl Tips {
    fn new(fake: &Fake) -> Self {
        Self {
            timeline: fake.timeline(),
            seen: Arc::default(),
        }
    }

    fn seen(&self) -> Vec<u64> {
        self.seen.lock().unwrap().clone()
    }

    fn position(&self, line: &str) -> Option<usize> {
        self.timeline.lock().unwrap().iter().position(|l| l == line)
    }
}

impl TipHandler for Tips {
    async fn handle_tip(&self, tip: ReceivedTip) -> Result<(), BoxError> {
        self.timeline
            .lock()
            .unwrap()
            .push(format!("tip {}", tip.sequence_id));
        self.seen.lock().unwrap().push(tip.sequence_id);
        Ok(())
    }

    async fn cleared(&self, up_to: u64) -> Result<(), BoxError> {
        self.timeline
            .lock()
            .unwrap()
            .push(format!("cleared {up_to}"));
        Ok(())
    }
}

async fn host_with_tips(certs: &Certs, fake: &Fake, tips: &Tips) -> ClientRpcHost {
    let host = ClientRpcHost::new(certs.config(fake)).unwrap();
    host.connect(Streams::new().tips(tips.clone()))
        .await
        .unwrap();
    eventually("tip stream open", WAIT, || {
        !fake.opens(TIP_STREAM).is_empty()
    })
    .await;
    host
}

#[tokio::test]
async fn an_earlier_id_sent_late_is_recorded_before_an_ack_covers_it() {
    let (certs, fake) = Fake::brclient().await;
    let tips = Tips::new(&fake);
    let host = host_with_tips(&certs, &fake, &tips).await;

    // T1 is stored first, but its goroutine sends it after T2's.
    let t1 = fake.push_held(TIP_STREAM, Fake::tip_params(&uid(0x11), 1000));
    let t2 = fake.push(TIP_STREAM, Fake::tip_params(&uid(0x22), 2000));
    assert!(t1 < t2);
    eventually("T2 handled", WAIT, || tips.seen() == [t2]).await;
    tokio::time::sleep(ACK_SETTLE / 3).await;
    assert!(fake.acks(ACK_TIP).is_empty(), "T2 has not settled yet");
    fake.release(TIP_STREAM);
    eventually("both cleared", WAIT, || fake.unacked(TIP_STREAM).is_empty()).await;

    assert_eq!(tips.seen(), [t2, t1]);
    for ack in fake.acks(ACK_TIP) {
        if ack >= t1 {
            let recorded = tips.position(&format!("tip {t1}")).unwrap();
            let acked = tips.position(&format!("ack {ack}")).unwrap();
            assert!(
                recorded < acked,
                "ack {ack} went out before T1 was recorded"
            );
        }
    }
    host.close();
}

#[tokio::test]
async fn an_item_arriving_after_a_later_ack_is_handled_not_dropped() {
    let (certs, fake) = Fake::brclient().await;
    let tips = Tips::new(&fake);
    let host = host_with_tips(&certs, &fake, &tips).await;

    // T1's goroutine runs later than the settle time: T2's ack clears it first.
    let t1 = fake.push_held(TIP_STREAM, Fake::tip_params(&uid(0x11), 1000));
    let t2 = fake.push(TIP_STREAM, Fake::tip_params(&uid(0x22), 2000));
    eventually("T2 acked", WAIT, || fake.acks(ACK_TIP) == [t2]).await;
    eventually("T2 cleared", WAIT, || {
        tips.position(&format!("cleared {t2}")).is_some()
    })
    .await;
    fake.release(TIP_STREAM);
    eventually("T1 handled", WAIT, || tips.seen() == [t2, t1]).await;
    // Its ack (a no-op for brclient, which cleared it) tells the handler so.
    eventually("T1 known cleared", WAIT, || {
        tips.position(&format!("cleared {t1}")).is_some()
    })
    .await;
    assert_eq!(fake.acks(ACK_TIP), [t2, t1]);
    host.close();
}

#[tokio::test]
async fn ids_starting_over_after_a_log_reset_are_handled_not_skipped() {
    let (certs, fake) = Fake::brclient().await;
    let tips = Tips::new(&fake);
    let host = host_with_tips(&certs, &fake, &tips).await;

    let before: Vec<u64> = (0..3)
        .map(|i| fake.push_tip(&uid(0x11), 1000 + i))
        .collect();
    eventually("all cleared", WAIT, || fake.unacked(TIP_STREAM).is_empty()).await;

    // brclient's logs are removed; its ids start over, below the ones acked. One new
    // tip arrives while no stream is open (replayed at the next open), one live.
    fake.reset_logs();
    fake.refuse_next(1);
    fake.drop_connections();
    let replayed = fake.push_held(TIP_STREAM, Fake::tip_params(&uid(0x11), 1000));
    assert_eq!(replayed, FIRST_SEQ);
    assert!(replayed <= before[0], "the id repeats an acknowledged one");
    eventually("reconnected", WAIT, || {
        fake.opens(TIP_STREAM).iter().any(|o| o.conn == 2)
    })
    .await;
    let live = fake.push_tip(&uid(0x11), 1001);
    eventually("both new tips handled", WAIT, || tips.seen().len() == 5).await;
    assert_eq!(&tips.seen()[3..], [replayed, live]);
    eventually("cleared again", WAIT, || {
        fake.unacked(TIP_STREAM).is_empty()
    })
    .await;
    host.close();
}

#[tokio::test]
async fn a_refused_stream_open_is_retried_alone_and_the_connection_stays() {
    let (certs, fake) = Fake::brclient().await;
    fake.refuse_streams(TIP_STREAM, 2, -32603, "replay log: input/output error");
    let tips = Tips::new(&fake);
    let pms: Arc<Mutex<Vec<u64>>> = Arc::default();
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().tips(tips.clone()).pms({
        let pms = pms.clone();
        move |pm: brmcp_clientrpc::ReceivedPm| {
            pms.lock().unwrap().push(pm.sequence_id);
            std::future::ready(Ok(()))
        }
    }))
    .await
    .unwrap();

    // The PM stream works while the tip stream is refused.
    let pm = fake.push_pm(&uid(0x11), "hello");
    eventually("PM handled", WAIT, || *pms.lock().unwrap() == [pm]).await;
    eventually("tip stream opened on the third try", WAIT, || {
        fake.opens(TIP_STREAM).len() == 3
    })
    .await;
    assert!(fake.opens(TIP_STREAM).iter().all(|o| o.conn == 1));
    assert_eq!(fake.connections(), 1, "the connection stayed up");
    assert_eq!(
        fake.opens(PM_STREAM).len(),
        1,
        "the PM stream was not reopened"
    );
    let status = host.status();
    assert!(status.connected);
    assert!(
        status
            .last_stream_error
            .as_deref()
            .is_some_and(|e| e.contains("replay log: input/output error")),
        "{status:?}"
    );
    let tip = fake.push_tip(&uid(0x11), 5000);
    eventually("tip handled", WAIT, || tips.seen() == [tip]).await;
    host.close();
}

#[tokio::test]
async fn a_stream_ended_by_the_server_is_reopened_alone() {
    let (certs, fake) = Fake::brclient().await;
    let tips = Tips::new(&fake);
    let host = host_with_tips(&certs, &fake, &tips).await;
    fake.end_streams(10000, "EOF");
    eventually("reopened", WAIT, || fake.opens(TIP_STREAM).len() == 2).await;
    assert_eq!(fake.connections(), 1);
    let tip = fake.push_tip(&uid(0x11), 5000);
    eventually("tip handled", WAIT, || tips.seen() == [tip]).await;
    host.close();
}

#[tokio::test]
async fn an_unclaimed_tip_outcome_is_acked_only_after_its_handler_recorded_it() {
    let (certs, fake) = Fake::brclient().await;
    let timeline = fake.timeline();
    let tries = Arc::new(Mutex::new(0usize));
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().tip_results({
        let timeline = timeline.clone();
        let tries = tries.clone();
        move |event: TipProgressEvent| {
            let mut tries = tries.lock().unwrap();
            *tries += 1;
            // The first try fails (the spend log is busy): no ack yet.
            let result: Result<(), BoxError> = if *tries == 1 {
                Err("spend log busy".into())
            } else {
                timeline
                    .lock()
                    .unwrap()
                    .push(format!("result {}", event.sequence_id));
                Ok(())
            };
            std::future::ready(result)
        }
    }))
    .await
    .unwrap();
    // A retry event is nobody's outcome; the terminal one goes to the handler.
    fake.push_progress(&uid(0x22), 7000, false, true, 1, "no route");
    let terminal = fake.push_progress(&uid(0x22), 7000, true, false, 2, "");
    eventually("cleared", WAIT, || fake.unacked(TIP_PROGRESS).is_empty()).await;
    assert_eq!(*tries.lock().unwrap(), 2);
    assert_before(
        &timeline.lock().unwrap(),
        &format!("result {terminal}"),
        &format!("ack {terminal}"),
    );
    host.close();
}

#[tokio::test]
async fn a_claimed_tip_outcome_is_acked_only_after_its_handler_recorded_it() {
    let (certs, fake) = Fake::brclient().await;
    let timeline = fake.timeline();
    // The handler records only once the test lets it: the payer has the outcome by then.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    let mut unclaimed = host.subscribe_unclaimed_tip_results();
    host.connect(Streams::new().tip_results({
        let timeline = timeline.clone();
        let gate = gate.clone();
        move |event: TipProgressEvent| {
            let timeline = timeline.clone();
            let gate = gate.clone();
            async move {
                gate.acquire().await?.forget();
                timeline
                    .lock()
                    .unwrap()
                    .push(format!("result {}", event.sequence_id));
                Ok::<(), BoxError>(())
            }
        }
    }))
    .await
    .unwrap();
    let bob = uid(0x22);
    let tip = tokio::spawn({
        let host = host.clone();
        async move { host.tip(bob, 7).await }
    });
    eventually("TipUser sent", WAIT, || {
        fake.requests_of("PaymentsService.TipUser").len() == 1
    })
    .await;
    let terminal = fake.push_progress(&bob, 7000, true, false, 1, "");
    assert_eq!(
        tip.await.unwrap().unwrap(),
        brmcp_clientrpc::TipOutcome::Paid { attempts: 1 },
        "handed over to the waiting tip"
    );
    assert!(unclaimed.try_recv().is_err(), "claimed, not unclaimed");
    // Long past the settle time: not acked while the handler has not recorded it.
    tokio::time::sleep(ACK_SETTLE * 4).await;
    assert_eq!(fake.unacked(TIP_PROGRESS), [terminal]);
    gate.add_permits(1);
    eventually("cleared", WAIT, || fake.unacked(TIP_PROGRESS).is_empty()).await;
    assert_before(
        &timeline.lock().unwrap(),
        &format!("result {terminal}"),
        &format!("ack {terminal}"),
    );
    host.close();
}

#[tokio::test]
async fn an_identity_refused_by_the_check_refuses_the_connection() {
    let (certs, fake) = Fake::brclient().await;
    let checked: Arc<Mutex<Vec<brmcp_adapters::PeerId>>> = Arc::default();
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    let e = host
        .connect(Streams::new().identity({
            let checked = checked.clone();
            move |me| {
                checked.lock().unwrap().push(me);
                Err("bound to another client".into())
            }
        }))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, brmcp_clientrpc::ClientRpcError::Identity(m) if m == "bound to another client"),
        "{e}"
    );
    // The fake's identity was asked for, and no stream was opened.
    assert_eq!(*checked.lock().unwrap(), [uid(0x42)]);
    assert!(fake.opens(TIP_PROGRESS).is_empty());

    // Accepted, the streams open after the check.
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().identity(|_| Ok(())))
        .await
        .unwrap();
    eventually("stream open", WAIT, || !fake.opens(TIP_PROGRESS).is_empty()).await;
    let methods: Vec<String> = fake.requests().into_iter().map(|r| r.method).collect();
    let asked = methods
        .iter()
        .rposition(|m| m == "ChatService.UserPublicIdentity")
        .unwrap();
    let opened = methods
        .iter()
        .position(|m| m.starts_with("PaymentsService.TipProgress["))
        .unwrap();
    assert!(asked < opened, "{methods:?}");
    host.close();
}

#[tokio::test]
async fn a_pm_as_large_as_a_relay_routes_does_not_wedge_the_stream() {
    let (certs, fake) = Fake::brclient().await;
    let sizes: Arc<Mutex<Vec<usize>>> = Arc::default();
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().pms({
        let sizes = sizes.clone();
        move |pm: brmcp_clientrpc::ReceivedPm| {
            sizes.lock().unwrap().push(pm.msg.message.len());
            std::future::ready(Ok(()))
        }
    }))
    .await
    .unwrap();
    eventually("PM stream open", WAIT, || !fake.opens(PM_STREAM).is_empty()).await;
    // A relay on the larger size policy routes 18,874,370 bytes; escaped as Go's JSON
    // encoder does (`\u0001` for a control character), that is past 100 MB on the
    // socket. Here: control characters, six bytes each once encoded.
    let big = "\u{1}".repeat(3_200_000);
    let first = fake.push_pm(&uid(0x11), &big);
    let next = fake.push_pm(&uid(0x11), "after it");
    eventually("both handled", Duration::from_secs(60), || {
        sizes.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(*sizes.lock().unwrap(), [big.len(), "after it".len()]);
    eventually("both cleared", WAIT, || fake.unacked(PM_STREAM).is_empty()).await;
    assert!(first < next);
    assert!(fake.acks("ChatService.AckReceivedPM").contains(&next));
    assert_eq!(fake.connections(), 1, "the connection was never dropped");
    host.close();
}
