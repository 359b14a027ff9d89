//! One peer floods the router with parts: the inbound queue stays within its byte bound,
//! another peer's PMs are served a PM or so behind the flood, and its calls are answered
//! while the flood goes on.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};

use brmcp_adapters::mem::{Faults, Pair, uid};
use brmcp_adapters::wire::{Header, MessageId, SessionId, encode_part};
use brmcp_adapters::{PeerId, Router, RouterConfig};
use serde_json::json;

use crate::common::{Lifecycle, call, connect, serve, text};

/// One PM carrying part `seq` of `total` of message `mid` with `payload` as its chunk.
fn pm(sid: u64, mid: u64, seq: u16, total: u16, payload: &[u8]) -> String {
    let header = Header::new(
        SessionId::from_entropy(sid.to_be_bytes()),
        MessageId::from_entropy(mid.to_be_bytes()),
        seq,
        total,
        0,
    )
    .expect("header");
    let mut buf = vec![0u8; header.encoded_len(payload.len())];
    let n = encode_part(&header, payload, &mut buf).expect("encode");
    buf.truncate(n);
    String::from_utf8(buf).expect("ascii")
}

/// The hostile PM number `n`: the first part of a fresh 64-part message.
fn hostile(n: u64, chunk_len: usize) -> String {
    pm(1, n, 1, 64, &vec![0x5a; chunk_len])
}

#[tokio::test(start_paused = true)]
async fn a_queued_flood_delays_another_peer_by_one_pm() {
    let server = Router::new(NoHost, RouterConfig::server());
    // The PMs the router task had taken when the honest session opened.
    let seen_at_accept = Arc::new(Mutex::new(None));
    let (seen, stats_of) = (seen_at_accept.clone(), server.clone());
    server.set_acceptor(move |_transport| {
        *seen.lock().expect("lock") = Some(stats_of.stats().pms_received);
    });
    tokio::task::yield_now().await;

    // Two hundred small parts queue up before the router task runs (nothing here
    // yields while the queue admits them); then the honest peer's first request.
    let flooder = uid(3);
    for n in 0..200 {
        server
            .handle_pm(flooder, hostile(n, 30))
            .await
            .expect("queued");
    }
    assert_eq!(server.stats().queue_pms, 200);
    let initialize = json!({
        "jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "0"}}
    });
    let request = serde_json::to_vec(&initialize).expect("json");
    server
        .handle_pm(uid(4), pm(2, 1, 1, 1, &request))
        .await
        .expect("queued");
    assert_eq!(server.stats().queue_pms, 201);

    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    let stats = server.stats();
    assert_eq!(stats.queue_pms, 0, "{stats:?}");
    assert_eq!(stats.sessions_accepted, 1, "{stats:?}");
    // Served in turn: one flood PM, then the honest one (in arrival order it was 201st).
    assert_eq!(*seen_at_accept.lock().expect("lock"), Some(2));
}

/// Bytes the server's inbound queue may hold in the flood test.
const QUEUE_BYTES: usize = 1 << 20;

#[tokio::test]
async fn a_flood_stays_within_the_byte_bound_and_calls_go_on() {
    let mut config = RouterConfig::server();
    config.max_inbound_bytes = QUEUE_BYTES;
    let pair = Pair::with_configs(41, Faults::none(), config, RouterConfig::client());
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;

    // The flood: 64 KiB parts of fresh messages from an allowed peer, as fast as the
    // router takes them, with the queue's bytes read after every one.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let flood = tokio::spawn({
        let (router, stop, peak) = (pair.server.clone(), stop.clone(), peak.clone());
        async move {
            let mut sent = 0u64;
            while !stop.load(SeqCst) && sent < 200_000 {
                router
                    .handle_pm(uid(3), hostile(sent, 48 * 1024))
                    .await
                    .expect("router up");
                sent += 1;
                peak.fetch_max(router.stats().queue_bytes, SeqCst);
            }
            sent
        }
    });
    while pair.server.stats().pms_received < 100 {
        tokio::task::yield_now().await;
    }

    for i in 0..20 {
        let said = format!("call {i}");
        let result = client
            .call_tool(call("echo", json!({ "text": said })))
            .await
            .expect("answered during the flood");
        assert_eq!(text(&result), said);
    }
    stop.store(true, SeqCst);
    let sent = flood.await.expect("flood task");
    let stats = pair.server.stats();
    assert!(sent >= 100, "the flood ran: {sent} PMs");
    let peak = peak.load(SeqCst);
    assert!(
        peak > 0 && peak <= QUEUE_BYTES as u64,
        "queue peaked at {peak} bytes"
    );
    // The flood filled the reassembler's per-peer bound and was refused past it.
    assert!(stats.dropped_reassembly > 0, "{stats:?}");
    client.cancel().await.expect("cancel");
}

/// A host that sends nothing anywhere.
struct NoHost;

impl brmcp_adapters::PmSender for NoHost {
    type Error = std::io::Error;
    async fn send_pm(&self, _to: &PeerId, _body: String) -> Result<(), Self::Error> {
        Ok(())
    }
}
