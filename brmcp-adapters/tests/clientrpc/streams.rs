//! Streams: PMStream and TipStream items are decoded, processed, recorded, then
//! acknowledged; redeliveries after a reconnect or a restart are recognised and not
//! processed twice; reconnects back off and reopen every stream from the last
//! acknowledged id.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{
    Certs, Fake, FakeOptions, PM_STREAM, TIP_PROGRESS, TIP_STREAM, TimelineStore, eventually,
    seq_of, uid,
};
use brmcp_adapters::clientrpc::proto::{ReceivedPm, ReceivedTip};
use brmcp_adapters::clientrpc::{
    ClientRpcHost, FileAckStore, MemoryAckStore, PmHandler, StreamKind, Streams,
};
use brmcp_adapters::{BoxError, Router, RouterConfig};
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
async fn pm_is_decoded_processed_recorded_then_acked() {
    let certs = Certs::brclient();
    let fake = Fake::start(&certs, FakeOptions::default()).await;
    let timeline = fake.timeline();
    let (seen, handler) = recording(timeline.clone());
    let store = TimelineStore {
        inner: MemoryAckStore::default(),
        timeline: timeline.clone(),
    };
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new(store).pms(handler))
        .await
        .unwrap();

    // clientrpc.md §1.8's example item, as brclient writes it.
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
    eventually("both acked", WAIT, || {
        fake.acks("ChatService.AckReceivedPM") == [first, second]
    })
    .await;

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

    assert_eq!(
        *timeline.lock().unwrap(),
        [
            format!("pm {first}"),
            format!("save pm {first}"),
            format!("ack {first}"),
            format!("pm {second}"),
            format!("save pm {second}"),
            format!("ack {second}"),
        ],
        "process, record, then ack"
    );
    let acks = fake.requests_of("ChatService.AckReceivedPM");
    assert_eq!(
        acks[1].params,
        json!({"sequenceId": "9007199254740993"}),
        "uint64 as a decimal string"
    );
    assert!(fake.unacked(PM_STREAM).is_empty());
    host.close();
}

#[tokio::test]
async fn router_receives_every_pm() {
    let certs = Certs::brclient();
    let fake = Fake::start(&certs, FakeOptions::default()).await;
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    let router = Router::new(host.clone(), RouterConfig::server());
    host.connect(Streams::new(MemoryAckStore::default()).pms(router.clone()))
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
async fn redelivery_after_reconnect_is_not_processed_again() {
    let certs = Certs::brclient();
    let fake = Fake::start(&certs, FakeOptions::default()).await;
    let (seen, handler) = recording(fake.timeline());
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new(MemoryAckStore::default()).pms(handler))
        .await
        .unwrap();

    // The first ack fails: the server keeps the PM.
    fake.fail_acks(1);
    let id = fake.push_pm(&uid(0x11), "once");
    eventually("ack tried", WAIT, || {
        fake.acks("ChatService.AckReceivedPM").len() == 1
    })
    .await;
    assert_eq!(fake.unacked(PM_STREAM), [id]);

    // Reconnect: the stream reopens from the last confirmed ack (none), the server
    // redelivers, the client acknowledges without processing again.
    fake.drop_connections();
    eventually("second connection", WAIT, || fake.connections() == 2).await;
    eventually("cleared", WAIT, || fake.unacked(PM_STREAM).is_empty()).await;
    let opens = fake.opens(PM_STREAM);
    assert_eq!(opens.len(), 2);
    assert_eq!(opens[1].conn, 2);
    assert_eq!(
        opens[1].params,
        json!({}),
        "reopened from 0: nothing confirmed"
    );
    assert_eq!(fake.acks("ChatService.AckReceivedPM"), [id, id]);
    assert_eq!(seen.lock().unwrap().len(), 1, "processed once");

    // Live items after the reconnect are processed as usual.
    let next = fake.push_pm(&uid(0x11), "next");
    eventually("next acked", WAIT, || {
        fake.unacked(PM_STREAM).is_empty() && seen.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(seen.lock().unwrap()[1].sequence_id, next);
    host.close();
}

#[tokio::test]
async fn restart_with_a_file_store_does_not_process_again() {
    let certs = Certs::brclient();
    let fake = Fake::start(&certs, FakeOptions::default()).await;
    let data = tempfile::tempdir().unwrap();

    // First run: processed and recorded, but the ack never reached the server.
    let (seen, handler) = recording(fake.timeline());
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new(FileAckStore::open(data.path()).unwrap()).pms(handler))
        .await
        .unwrap();
    fake.fail_acks(1);
    let id = fake.push_pm(&uid(0x11), "before the crash");
    eventually("ack tried", WAIT, || {
        fake.acks("ChatService.AckReceivedPM").len() == 1
    })
    .await;
    host.close();
    assert_eq!(seen.lock().unwrap().len(), 1);
    assert_eq!(
        FileAckStore::open(data.path())
            .unwrap()
            .path()
            .file_name()
            .unwrap(),
        FileAckStore::FILE_NAME
    );

    // Second run, same store: the redelivered PM is acknowledged, not processed.
    let (seen_again, handler) = recording(fake.timeline());
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new(FileAckStore::open(data.path()).unwrap()).pms(handler))
        .await
        .unwrap();
    eventually("cleared", WAIT, || fake.unacked(PM_STREAM).is_empty()).await;
    assert_eq!(fake.acks("ChatService.AckReceivedPM"), [id, id]);
    let fresh = fake.push_pm(&uid(0x11), "after the restart");
    eventually("fresh one processed", WAIT, || {
        seen_again.lock().unwrap().len() == 1
    })
    .await;
    assert_eq!(seen_again.lock().unwrap()[0].sequence_id, fresh);
    host.close();
}

#[tokio::test]
async fn reconnect_backs_off_and_reopens_every_stream_from_the_last_ack() {
    let certs = Certs::brclient();
    let fake = Fake::start(&certs, FakeOptions::default()).await;
    let pms = Arc::new(AtomicUsize::new(0));
    let tips = Arc::new(AtomicUsize::new(0));
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(
        Streams::new(MemoryAckStore::default())
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

    // Every stream reopened on the new connection, after its last acknowledged id,
    // with decimal suffixes counting from 1 again.
    eventually("streams reopened", WAIT, || {
        [PM_STREAM, TIP_PROGRESS, TIP_STREAM]
            .iter()
            .all(|base| fake.opens(base).last().is_some_and(|open| open.conn == 2))
    })
    .await;
    for (base, id, suffix) in [
        (PM_STREAM, pm, 1),
        (TIP_PROGRESS, progress, 2),
        (TIP_STREAM, tip, 3),
    ] {
        let opens = fake.opens(base);
        let last = opens.last().unwrap();
        assert_eq!(last.method, format!("{base}[{suffix}]"));
        assert_eq!(
            last.params,
            json!({"unackedFrom": id.to_string()}),
            "{base}"
        );
    }

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
    let certs = Certs::brclient();
    let fake = Fake::start(&certs, FakeOptions::default()).await;
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
    host.connect(Streams::new(MemoryAckStore::with([(StreamKind::TipReceived, 0)])).tips(handler))
        .await
        .unwrap();
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
