//! The router under sequences of PMs from honest and hostile peers.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use brmcp_wire::{Chunks, Header, Limits, MessageId, SessionId, encode_part, parse};
use rmcp::RoleServer;
use rmcp::model::{JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::Transport;

use crate::config::RouterConfig;
use crate::host::PmSender;
use crate::peer::PeerId;
use crate::router::Router;
use crate::transport::BrTransport;

/// Honest peers (0..HONEST) and hostile ones (HONEST..PEERS).
const HONEST: u8 = 2;
const PEERS: u8 = 5;
/// Sessions each honest peer uses: within the session cap below.
const HONEST_SESSIONS: u8 = 2;
const MAX_SESSIONS_PER_PEER: usize = 2;
/// Bounds small enough for a fuzz run to reach them, sized so the hostile peers' own
/// budgets together leave room for the honest ones.
const QUEUE_PMS: usize = 32;
const QUEUE_BYTES: usize = 64 << 10;
const PEER_BYTES: usize = 16 << 10;
const PENDING_PER_PEER: usize = 3;
/// Hostile PMs stay under the queue's byte bound, so the bound is exact.
const MAX_HOSTILE_CHUNK: usize = 24 << 10;

/// A host that records every PM the router sends.
#[derive(Debug, Clone, Default)]
struct Recorder(Arc<Mutex<Vec<(PeerId, String)>>>);

impl PmSender for Recorder {
    type Error = std::io::Error;

    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), Self::Error> {
        crate::lock(&self.0).push((*to, body));
        Ok(())
    }
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn next(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
}

fn peer(n: u8) -> PeerId {
    let mut bytes = [0xf0; 32];
    bytes[31] = n;
    PeerId::from_bytes(bytes)
}

fn encode(header: &Header, chunk: &[u8]) -> String {
    let mut buf = vec![0u8; header.encoded_len(chunk.len())];
    let n = encode_part(header, chunk, &mut buf).unwrap_or(0);
    buf.truncate(n);
    String::from_utf8(buf).unwrap_or_default()
}

/// Serves one accepted session: answers every request with an empty result.
async fn answer(mut transport: BrTransport<RoleServer>, live: Arc<Mutex<HashMap<PeerId, usize>>>) {
    let from = transport.peer();
    while let Some(message) = Transport::<RoleServer>::receive(&mut transport).await {
        if let JsonRpcMessage::Request(request) = message {
            let reply = serde_json::json!({"jsonrpc": "2.0", "id": request.id, "result": {}});
            if let Ok(reply) = serde_json::from_value::<ServerJsonRpcMessage>(reply) {
                let _ = Transport::<RoleServer>::send(&mut transport, reply).await;
            }
        }
    }
    if let Some(n) = crate::lock(&live).get_mut(&from) {
        *n -= 1;
    }
}

/// Drives a serving [`Router`] over a recording host with PMs from several peers, as
/// `data` says: honest requests on honest sessions (one part or several, in order),
/// hostile parts (any header, any body, up to [`MAX_HOSTILE_CHUNK`]), chat, and pauses
/// that let the router catch up.
///
/// - After every step: the inbound queue holds at most its byte and PM bounds, the
///   reassembler at most its total bytes, and no peer has more sessions open than the
///   cap.
/// - At the end, once the router is idle: every honest request was answered.
pub fn router_ops(data: &[u8]) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    else {
        return;
    };
    runtime.block_on(run(data));
}

async fn run(data: &[u8]) {
    let mut input = Bytes(data);
    let limits = Limits::DEFAULT
        .with_max_pending_per_peer(PENDING_PER_PEER)
        .with_max_peer_bytes(PEER_BYTES)
        .with_max_message_bytes(PEER_BYTES)
        .with_max_total_bytes(PEER_BYTES * usize::from(PEERS));
    let mut config = RouterConfig::server();
    config.limits = limits;
    config.inbound_queue = QUEUE_PMS;
    config.max_inbound_bytes = QUEUE_BYTES;
    config.max_sessions_per_peer = MAX_SESSIONS_PER_PEER;
    let host = Recorder::default();
    let router = Router::new(host.clone(), config);
    let live: Arc<Mutex<HashMap<PeerId, usize>>> = Arc::default();
    let runtime = tokio::runtime::Handle::current();
    let counts = live.clone();
    router.set_acceptor(move |transport| {
        *crate::lock(&counts).entry(transport.peer()).or_default() += 1;
        runtime.spawn(answer(transport, counts.clone()));
    });

    // Honest state: the next request id of each (peer, session), whether it was
    // initialized, and the requests that must be answered.
    let mut next_id: HashMap<(u8, u8), u64> = HashMap::new();
    let mut expected: BTreeSet<(PeerId, SessionId, u64)> = BTreeSet::new();
    let mut mid_counter = 0u64;
    let mut steps = 0;

    while !input.0.is_empty() && steps < 256 {
        steps += 1;
        match input.next() % 6 {
            0 | 1 => {
                let (p, s) = (input.next() % HONEST, input.next() % HONEST_SESSIONS);
                let chunk_len = usize::from(input.next() % 64) * 8 + 16;
                let sid = SessionId::from_entropy([p, s, 0, 0, 0, 0, 0, 1]);
                let id = next_id.entry((p, s)).or_insert(0);
                let text = if *id == 0 {
                    serde_json::json!({
                        "jsonrpc": "2.0", "id": 0, "method": "initialize",
                        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "fuzz", "version": "0"}}
                    })
                } else {
                    serde_json::json!({"jsonrpc": "2.0", "id": *id, "method": "ping",
                                       "params": {"pad": "p".repeat(usize::from(input.next()) * 4)}})
                };
                mid_counter += 1;
                let payload = serde_json::to_vec(&text).unwrap_or_default();
                let mid = MessageId::from_entropy(mid_counter.to_be_bytes());
                // A request too long for MAX_PARTS parts at this chunk length is never
                // sent, so it is not expected either.
                let Ok(chunks) = Chunks::new(sid, mid, 0, &payload, chunk_len) else {
                    continue;
                };
                expected.insert((peer(p), sid, *id));
                *id += 1;
                for (header, chunk) in chunks {
                    send(&router, peer(p), encode(&header, chunk)).await;
                }
            }
            2 | 3 => {
                let p = HONEST + input.next() % (PEERS - HONEST);
                let total = u16::from(input.next() % 64) + 1;
                let seq = u16::from(input.next()) % total + 1;
                let len = (usize::from(input.next()) << 7).min(MAX_HOSTILE_CHUNK) + 1;
                let sid = SessionId::from_entropy([p, input.next() % 4, 0, 0, 0, 0, 0, 2]);
                let mid = MessageId::from_entropy([input.next() % 8, 0, 0, 0, 0, 0, 0, 3]);
                let Ok(header) = Header::new(sid, mid, seq, total, 0) else {
                    continue;
                };
                let fill = input.next();
                let body: Vec<u8> = (0..len).map(|i| fill ^ (i as u8)).collect();
                let mut text = encode(&header, &body);
                if input.next() % 4 == 0 {
                    // A body that is not base64.
                    text.push('!');
                }
                send(&router, peer(p), text).await;
            }
            4 => {
                let p = input.next() % PEERS;
                send(&router, peer(p), "hello, is this thing on?".into()).await;
            }
            _ => settle(&router, 1 + usize::from(input.next() % 8)).await,
        }
        check(&router, &live);
    }

    // Idle: every honest request has been answered.
    for _ in 0..64 {
        settle(&router, 64).await;
        if answered(&host).is_superset(&expected) {
            break;
        }
    }
    check(&router, &live);
    let answered = answered(&host);
    let missing: Vec<_> = expected.difference(&answered).collect();
    assert!(
        missing.is_empty(),
        "honest requests unanswered: {missing:?}"
    );
    router.close();
}

async fn send(router: &Router, from: PeerId, body: String) {
    assert!(router.handle_pm(from, body).await.is_ok(), "router stopped");
}

/// Lets the router task and the sessions run.
async fn settle(router: &Router, rounds: usize) {
    for _ in 0..rounds {
        tokio::task::yield_now().await;
        if router.stats().queue_pms == 0 {
            tokio::task::yield_now().await;
        }
    }
}

fn check(router: &Router, live: &Mutex<HashMap<PeerId, usize>>) {
    let stats = router.stats();
    assert!(stats.queue_bytes <= QUEUE_BYTES as u64, "{stats:?}");
    assert!(stats.queue_pms <= QUEUE_PMS as u64, "{stats:?}");
    assert!(
        stats.bytes_buffered <= (PEER_BYTES * usize::from(PEERS)) as u64,
        "{stats:?}"
    );
    for (p, n) in crate::lock(live).iter() {
        assert!(*n <= MAX_SESSIONS_PER_PEER, "{p}: {n} sessions");
    }
}

/// The (peer, sid, request id) of every response the router sent, from single parts.
fn answered(host: &Recorder) -> BTreeSet<(PeerId, SessionId, u64)> {
    let sent = crate::lock(&host.0);
    let mut out = BTreeSet::new();
    for (to, text) in sent.iter() {
        let Ok(part) = parse(text) else { continue };
        let mut payload = vec![0u8; part.decoded_len_max()];
        let Ok(n) = part.decode_body(&mut payload) else {
            continue;
        };
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(&payload[..n]) else {
            continue;
        };
        if let Some(id) = value.get("id").and_then(serde_json::Value::as_u64) {
            out.insert((*to, *part.sid(), id));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn router_ops_corpus_passes() {
        for (path, data) in super::super::corpus("router_ops") {
            eprintln!("router_ops: {}", path.display());
            super::router_ops(&data);
        }
    }

    #[test]
    fn router_ops_survives_edge_inputs() {
        for data in [&b""[..], b"\0", &[0xff; 64], &[0x00; 300]] {
            super::router_ops(data);
        }
    }
}
