//! Streams: PMStream and TipStream items are decoded, recorded by their handler, then
//! acknowledged; redeliveries after a reconnect or a restart go to the handler again
//! (its record is the deduplication); reconnects back off and reopen every stream.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{
    Fake, PM_STREAM, TIP_PROGRESS, TIP_STREAM, assert_before, eventually, seq_of, uid,
};
use brmcp_adapters::{BoxError, Router, RouterConfig};
use brmcp_clientrpc::{ClientRpcHost, PmHandler, Streams};
use brmcp_clientrpc::{ReceivedPm, ReceivedTip};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);

/// Every PM a handler received.
type Seen = Arc<Mutex<Vec<ReceivedPm>>>;

/// A PM handler that keeps every PM and notes it in a timeline.
fn recording(timeline: Arc<Mutex<Vec<String>>>) -> (Seen, impl PmHandler) {
    let seen: Seen = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |pm: ReceivedPm| {
            timeline
                .lock()
                .unwrap()
                .push(format!("pm {}", pm.sequence_id));
            seen.lock().unwrap().push(pm);
            std::future::ready(Ok(()))
        }
    };
    (seen, handler)
}

#[tokio::test]
async fn pm_is_decoded_recorded_then_acked() {
    let (certs, fake) = Fake::brclient().await;
    let timeline = fake.timeline();
    let (seen, handler) = recording(timeline.clone());
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().pms(handler)).await.unwrap();

    // An item as brclient writes it.
    let first = fake.push(
        PM_STREAM,
        json!({
            "uid": "ERERERERERERERERERERERERERERERERERERERERERE=",
            "nick": "alice",
            "msg": {"message": "hi bot", "mode": "MESSAGE_MODE_ME"},
            "timestampMs": "1765900000123"
        }),
    );
    // An id past 2^53 still round-trips as a string.
    fake.set_next_seq((1 << 53) + 1);
    let second = fake.push_pm(&uid(0x33), "second");
    assert_eq!(second, (1 << 53) + 1);
    eventually("both acked", WAIT, || fake.unacked(PM_STREAM).is_empty()).await;

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].uid, uid(0x11));
    assert_eq!(seen[0].nick, "alice");
    assert_eq!(seen[0].msg.message, "hi bot");
    assert_eq!(seen[0].timestamp_ms, 1_765_900_000_123);
    assert_eq!(seen[0].sequence_id, first);
    assert!(first > 1 << 32);
    assert_eq!(seen[1].uid, uid(0x33));
    assert_eq!(seen[1].sequence_id, second);

    // Each ack comes after every PM it covers was handled (acks are cumulative; one
    // may cover both).
    let timeline = timeline.lock().unwrap().clone();
    let acks = fake.acks("ChatService.AckReceivedPM");
    assert_eq!(acks.last(), Some(&second));
    for ack in &acks {
        for pm in [first, second].into_iter().filter(|pm| pm <= ack) {
            assert_before(&timeline, &format!("pm {pm}"), &format!("ack {ack}"));
        }
    }
    let acks = fake.requests_of("ChatService.AckReceivedPM");
    assert_eq!(
        acks.last().unwrap().params,
        json!({"sequenceId": "9007199254740993"}),
        "uint64 as a decimal string"
    );
    assert!(fake.unacked(PM_STREAM).is_empty());
    host.close();
}

#[tokio::test]
async fn router_receives_every_pm() {
    let (certs, fake) = Fake::brclient().await;
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    let router = Router::new(host.clone(), RouterConfig::server());
    host.connect(Streams::new().pms(router.clone()))
        .await
        .unwrap();
    fake.push_pm(&uid(0x11), "just chat");
    fake.push_pm(&uid(0x11), "--mcp[v=1,sid=ab,mid=cd,seq=1/1,exp=0]--!!");
    eventually("both PMs at the router", WAIT, || {
        router.stats().pms_received == 2
    })
    .await;
    eventually("acked", WAIT, || fake.unacked(PM_STREAM).is_empty()).await;
    let stats = router.stats();
    assert_eq!(stats.dropped_foreign, 1, "chat is ignored");
    assert_eq!(stats.dropped_malformed, 1, "a bad envelope is counted");
    host.close();
    router.close();
}

#[tokio::test]
async fn redelivery_after_reconnect_goes_to_the_handler_again() {
    let (certs, fake) = Fake::brclient().await;
    let (seen, handler) = recording(fake.timeline());
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().pms(handler)).await.unwrap();

    // Acks fail: the server keeps the PM.
    fake.fail_acks(usize::MAX);
    let id = fake.push_pm(&uid(0x11), "once");
    eventually("ack tried", WAIT, || {
        fake.acks("ChatService.AckReceivedPM").len() == 1
    })
    .await;
    assert_eq!(fake.unacked(PM_STREAM), [id]);

    // Reconnect: the stream reopens from 0, the server redelivers, and the handler
    // (whose record deduplicates) sees it again before it is acknowledged.
    fake.drop_connections();
    eventually("second connection", WAIT, || fake.connections() == 2).await;
    eventually("redelivered", WAIT, || seen.lock().unwrap().len() == 2).await;
    fake.fail_acks(0);
    eventually("cleared", WAIT, || fake.unacked(PM_STREAM).is_empty()).await;
    let opens = fake.opens(PM_STREAM);
    assert_eq!(opens.len(), 2);
    assert_eq!(opens[1].conn, 2);
    assert_eq!(opens[1].params, json!({}), "reopened from 0");
    let seen_ids: Vec<u64> = seen.lock().unwrap().iter().map(|p| p.sequence_id).collect();
    assert_eq!(seen_ids, [id, id], "the host drops no redelivery itself");

    let next = fake.push_pm(&uid(0x11), "next");
    eventually("next acked", WAIT, || {
        fake.unacked(PM_STREAM).is_empty() && seen.lock().unwrap().len() == 3
    })
    .await;
    assert_eq!(seen.lock().unwrap()[2].sequence_id, next);
    host.close();
}

#[tokio::test]
async fn a_restart_redelivers_what_was_not_acknowledged() {
    let (certs, fake) = Fake::brclient().await;

    // First run: handled, but the ack never reached the server.
    let (seen, handler) = recording(fake.timeline());
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().pms(handler)).await.unwrap();
    fake.fail_acks(1);
    let id = fake.push_pm(&uid(0x11), "before the crash");
    eventually("ack tried", WAIT, || {
        fake.acks("ChatService.AckReceivedPM").len() == 1
    })
    .await;
    host.close();
    assert_eq!(seen.lock().unwrap().len(), 1);

    // Second run: the server redelivers it, the handler gets it, then the ack.
    let (seen_again, handler) = recording(fake.timeline());
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().pms(handler)).await.unwrap();
    eventually("cleared", WAIT, || fake.unacked(PM_STREAM).is_empty()).await;
    assert_eq!(seen_again.lock().unwrap()[0].sequence_id, id);
    host.close();
}

#[tokio::test]
async fn reconnect_backs_off_and_reopens_every_stream_from_the_last_ack() {
    let (certs, fake) = Fake::brclient().await;
    let pms = Arc::new(AtomicUsize::new(0));
    let tips = Arc::new(AtomicUsize::new(0));
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(
        Streams::new()
            .pms({
                let pms = pms.clone();
                move |_pm| {
                    pms.fetch_add(1, Ordering::SeqCst);
                    std::future::ready(Ok(()))
                }
            })
            .tips({
                let tips = tips.clone();
                move |_tip| {
                    tips.fetch_add(1, Ordering::SeqCst);
                    std::future::ready(Ok(()))
                }
            }),
    )
    .await
    .unwrap();
    let pm = fake.push_pm(&uid(0x11), "one");
    let tip = fake.push_tip(&uid(0x11), 5000);
    let progress = fake.push_progress(&uid(0x22), 7000, true, false, 1, "");
    eventually("all acked", WAIT, || {
        fake.unacked(PM_STREAM).is_empty()
            && fake.unacked(TIP_STREAM).is_empty()
            && fake.unacked(TIP_PROGRESS).is_empty()
    })
    .await;

    // Drop the socket and refuse the next six connections.
    fake.refuse_next(6);
    let before = fake.accepts().len();
    fake.drop_connections();
    eventually("reconnected", WAIT, || fake.connections() == 2).await;
    let accepts = fake.accepts()[before..].to_vec();
    assert_eq!(accepts.len(), 7, "six refused, then one accepted");
    let gaps: Vec<Duration> = accepts.windows(2).map(|w| w[1] - w[0]).collect();
    // After each failure: 40, 80, 160 ms, then capped at 200 ms (the first failure
    // follows the drop, itself after 20 ms).
    let floors = [40, 80, 160, 200, 200, 200];
    for (gap, floor) in gaps.iter().zip(floors) {
        assert!(
            *gap >= Duration::from_millis(floor - 2) && *gap < Duration::from_millis(floor + 150),
            "gaps {gaps:?}, expected about {floors:?}"
        );
    }
    eventually("host connected again", WAIT, || {
        let status = host.status();
        status.connected && status.connects == 2
    })
    .await;

    // Every stream reopened on the new connection, from 0 (the server replays what it
    // has not cleared),
    // with decimal suffixes counting from 1 again.
    eventually("streams reopened", WAIT, || {
        [PM_STREAM, TIP_PROGRESS, TIP_STREAM]
            .iter()
            .all(|base| fake.opens(base).last().is_some_and(|open| open.conn == 2))
    })
    .await;
    let mut suffixes = Vec::new();
    for (base, id) in [(PM_STREAM, pm), (TIP_PROGRESS, progress), (TIP_STREAM, tip)] {
        let opens = fake.opens(base);
        let last = opens.last().unwrap();
        suffixes.push(
            crate::common::split_suffix(&last.method)
                .unwrap()
                .1
                .to_owned(),
        );
        assert_eq!(last.params, json!({}), "{base}: from 0");
        assert!(fake.acks(&ack_method(base)).contains(&id));
    }
    suffixes.sort();
    assert_eq!(suffixes, ["1", "2", "3"]);

    // Nothing lost, nothing twice.
    fake.push_pm(&uid(0x11), "two");
    fake.push_tip(&uid(0x11), 6000);
    eventually("new items handled", WAIT, || {
        pms.load(Ordering::SeqCst) == 2 && tips.load(Ordering::SeqCst) == 2
    })
    .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(pms.load(Ordering::SeqCst), 2);
    assert_eq!(tips.load(Ordering::SeqCst), 2);
    host.close();
}

#[tokio::test]
async fn received_tips_reach_the_handler_and_a_failing_handler_is_retried() {
    let (certs, fake) = Fake::brclient().await;
    let calls: Arc<Mutex<Vec<ReceivedTip>>> = Arc::default();
    let handler = {
        let calls = calls.clone();
        move |tip: ReceivedTip| {
            let mut calls = calls.lock().unwrap();
            calls.push(tip);
            // The first try fails: the tip must not be acknowledged yet.
            let result: Result<(), BoxError> = if calls.len() == 1 {
                Err("ledger busy".into())
            } else {
                Ok(())
            };
            std::future::ready(result)
        }
    };
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().tips(handler)).await.unwrap();
    let id = fake.push_tip(&uid(0x11), 10_000_000);
    eventually("acked", WAIT, || {
        fake.acks("PaymentsService.AckTipReceived") == [id]
    })
    .await;
    let calls = calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2, "retried once");
    assert_eq!(calls[1].uid, uid(0x11));
    assert_eq!(calls[1].amount_matoms, 10_000_000);
    assert_eq!(calls[1].sequence_id, id);
    let ack = &fake.requests_of("PaymentsService.AckTipReceived")[0];
    assert_eq!(seq_of(&ack.params["sequenceId"]), id);
    assert!(ack.params["sequenceId"].is_string());
    host.close();
}

fn ack_method(base: &str) -> String {
    match base {
        PM_STREAM => "ChatService.AckReceivedPM",
        TIP_STREAM => "PaymentsService.AckTipReceived",
        _ => "PaymentsService.AckTipProgress",
    }
    .to_owned()
}

/// `flush_acks` before exiting: handled PMs are acknowledged by the time it returns
/// `true`; a PM whose handler keeps failing, and every PM after it, stay
/// unacknowledged, and it says so with `false` within its bound.
#[tokio::test]
async fn flush_acks_waits_for_what_was_handled_and_acks_nothing_else() {
    let (certs, fake) = Fake::brclient().await;
    let handled = Arc::new(AtomicUsize::new(0));
    let refused = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (handled, refused) = (handled.clone(), refused.clone());
        move |pm: ReceivedPm| {
            let result = if pm.msg.message == "refused" {
                refused.fetch_add(1, Ordering::SeqCst);
                Err(BoxError::from("not recorded"))
            } else {
                handled.fetch_add(1, Ordering::SeqCst);
                Ok(())
            };
            std::future::ready(result)
        }
    };
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().pms(handler)).await.unwrap();
    assert!(
        host.flush_acks(WAIT).await,
        "nothing received: nothing to wait for"
    );

    // Handled, its acknowledgement still to come (it waits out the settle time).
    fake.push_pm(&uid(0x11), "handled");
    eventually("handled", WAIT, || handled.load(Ordering::SeqCst) == 1).await;
    assert!(host.flush_acks(WAIT).await);
    assert!(
        fake.unacked(PM_STREAM).is_empty(),
        "acknowledged once flushed"
    );

    let not_recorded = fake.push_pm(&uid(0x11), "refused");
    let after = fake.push_pm(&uid(0x11), "after");
    eventually("the handler tried", WAIT, || {
        refused.load(Ordering::SeqCst) > 0
    })
    .await;
    assert!(!host.flush_acks(Duration::from_secs(2)).await);
    assert_eq!(
        fake.unacked(PM_STREAM),
        vec![not_recorded, after],
        "neither acknowledged"
    );
    host.close();
}
