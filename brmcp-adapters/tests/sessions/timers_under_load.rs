//! A steady stream of inbound PMs must not starve the router's timers.

use crate::common::{Lifecycle, connect, serve};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Fabric, uid};
use brmcp_wire::{Chunks, MessageId, SessionId, encode_part};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_expiry_runs_under_load() {
    let fabric = Fabric::new(1);
    let mut sc = RouterConfig::server();
    sc.server_idle_timeout = Some(Duration::from_millis(500));
    let server = fabric.router(uid(1), sc);
    serve(&server);
    let client_router = fabric.router(uid(2), RouterConfig::client());
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;

    // Control: without load the session idles out.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(server.stats().sessions_expired, 1);
    let client2 = connect(&client_router, uid(1), Lifecycle::Legacy).await;

    // A single-part message of 300 KB of non-JSON from a third peer.
    let payload = vec![b'x'; 300_000];
    let sid = SessionId::from_entropy([1; 8]);
    let mid = MessageId::from_entropy([2; 8]);
    let (h, chunk) = Chunks::new(sid, mid, 0, &payload, 400_000)
        .unwrap()
        .next()
        .unwrap();
    let mut buf = vec![0u8; h.encoded_len(chunk.len())];
    let n = encode_part(&h, chunk, &mut buf).unwrap();
    buf.truncate(n);
    let pm = String::from_utf8(buf).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..3 {
        let (s, pm, stop) = (server.clone(), pm.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                s.handle_pm(uid(3), pm.clone()).await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let st = server.stats();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    assert_eq!(
        st.sessions_expired, 2,
        "the second session idled out during the load: {st:?}"
    );
    assert!(st.pms_received > 10, "the load was real: {st:?}");
    drop((client, client2));
}
