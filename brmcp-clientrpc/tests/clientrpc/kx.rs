//! Key exchanges: `MediateKX` goes out with the proto's fields; every `KXCompleted` on
//! the KX stream is decoded, handed to the handler, and acknowledged only once handled;
//! what was not handled is redelivered after a restart; an undecodable item does not
//! hold the stream up.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Fake, KX_STREAM, Reply, assert_before, b64, default_reply, eventually, uid};
use brmcp_adapters::BoxError;
use brmcp_clientrpc::KxCompleted;
use brmcp_clientrpc::{ClientRpcError, ClientRpcHost, Streams};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(5);
const ACK: &str = "ChatService.AckKXCompleted";

/// A `KXCompleted` as brclient writes it (`proto/clientrpc.proto`): the rendezvous point is
/// 32 bytes, base64.
fn kx_params(with: u8, nick: &str) -> serde_json::Value {
    json!({
        "initialRendezvous": b64(&uid(0xee)),
        "uid": b64(&uid(with)),
        "nick": nick,
    })
}

#[tokio::test]
async fn kx_completed_is_decoded_handled_then_acked() {
    let (certs, fake) = Fake::brclient().await;
    let timeline = fake.timeline();
    let seen: Arc<Mutex<Vec<KxCompleted>>> = Arc::default();
    let handler = {
        let (seen, timeline) = (seen.clone(), timeline.clone());
        move |kx: KxCompleted| {
            timeline
                .lock()
                .unwrap()
                .push(format!("kx {}", kx.sequence_id));
            seen.lock().unwrap().push(kx);
            std::future::ready(Ok::<_, BoxError>(()))
        }
    };
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().kx(handler)).await.unwrap();

    let id = fake.push(KX_STREAM, kx_params(0x77, "provider"));
    eventually("acked", WAIT, || fake.unacked(KX_STREAM).is_empty()).await;
    let opens = fake.opens(KX_STREAM);
    assert_eq!(opens.len(), 1, "one KXStream open");
    assert!(opens[0].method.starts_with("ChatService.KXStream["));

    let got = seen.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].uid, uid(0x77));
    assert_eq!(got[0].nick, "provider");
    assert_eq!(got[0].sequence_id, id);
    assert_eq!(got[0].initial_rendezvous, uid(0xee).as_bytes().to_vec());
    assert_eq!(fake.acks(ACK), [id]);
    assert_before(
        &timeline.lock().unwrap(),
        &format!("kx {id}"),
        &format!("ack {id}"),
    );

    // A reconnect replays nothing: the exchange was cleared.
    fake.drop_connections();
    eventually("reopened", WAIT, || fake.opens(KX_STREAM).len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen.lock().unwrap().len(), 1);
    host.close();
}

#[tokio::test]
async fn a_failing_handler_holds_the_ack_and_a_restart_redelivers() {
    let (certs, fake) = Fake::brclient().await;
    // The first process never manages to handle the exchange (it dies meanwhile).
    let calls = Arc::new(AtomicUsize::new(0));
    let failing = {
        let calls = calls.clone();
        move |_kx: KxCompleted| {
            calls.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Err::<(), BoxError>("store busy".into()))
        }
    };
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().kx(failing)).await.unwrap();
    let id = fake.push(KX_STREAM, kx_params(0x77, "provider"));
    eventually("retried", WAIT, || calls.load(Ordering::SeqCst) >= 2).await;
    assert!(
        fake.acks(ACK).is_empty(),
        "nothing acked before it is handled"
    );
    assert_eq!(fake.unacked(KX_STREAM), [id]);
    host.close();

    // The next process gets the same exchange, with the same id, and acks it.
    let seen: Arc<Mutex<Vec<u64>>> = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |kx: KxCompleted| {
            seen.lock().unwrap().push(kx.sequence_id);
            std::future::ready(Ok::<_, BoxError>(()))
        }
    };
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().kx(handler)).await.unwrap();
    eventually("acked", WAIT, || fake.unacked(KX_STREAM).is_empty()).await;
    assert_eq!(*seen.lock().unwrap(), [id]);
    host.close();
}

#[tokio::test]
async fn an_undecodable_kx_item_does_not_hold_the_stream_up() {
    let (certs, fake) = Fake::brclient().await;
    let seen: Arc<Mutex<Vec<KxCompleted>>> = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |kx: KxCompleted| {
            seen.lock().unwrap().push(kx);
            std::future::ready(Ok::<_, BoxError>(()))
        }
    };
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().kx(handler)).await.unwrap();
    // A 31-byte uid, then a good one.
    fake.push(
        KX_STREAM,
        json!({"uid": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA==", "nick": "x"}),
    );
    let good = fake.push(KX_STREAM, kx_params(0x55, "carol"));
    eventually("acked", WAIT, || fake.unacked(KX_STREAM).is_empty()).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uid, uid(0x55));
    assert_eq!(fake.acks(ACK).last(), Some(&good));
    host.close();
}

#[tokio::test]
async fn mediate_kx_sends_mediator_and_target_as_hex_and_surfaces_refusals() {
    let (certs, fake) = Fake::brclient().await;
    let peer = uid(0x21);
    fake.set_handler(move |call| match call.method.as_str() {
        "ChatService.MediateKX" if call.params["mediator"] == json!(peer.to_string()) => {
            Reply::Result(json!({}))
        }
        "ChatService.MediateKX" => Reply::Error(
            -32603,
            format!(
                "user {} not found",
                call.params["mediator"].as_str().unwrap_or("")
            ),
        ),
        _ => default_reply(call),
    });
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new()).await.unwrap();

    host.mediate_kx(peer, uid(0x77)).await.unwrap();
    let sent = fake.requests_of("ChatService.MediateKX");
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].params,
        json!({"mediator": peer.to_string(), "target": uid(0x77).to_string()}),
        "MediateKXRequest's two string fields, nothing else"
    );

    let stranger = uid(0x99);
    match host.mediate_kx(stranger, uid(0x77)).await {
        Err(ClientRpcError::Rpc { code, message, .. }) => {
            assert_eq!(code, -32603);
            assert_eq!(message, format!("user {stranger} not found"));
        }
        other => panic!("expected the server's refusal, got {other:?}"),
    }
    host.close();
}
