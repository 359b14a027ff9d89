//! Chat text and malformed envelopes never create sessions.

use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Fabric, uid};

#[tokio::test(start_paused = true)]
async fn chat_and_malformed_envelopes_create_no_sessions() {
    let fabric = Fabric::new(9);
    let server = fabric.router(uid(1), RouterConfig::server());
    let chatter = uid(2);
    let _chatter_router = fabric.router(chatter, RouterConfig::client());

    let bodies = [
        "hello, are you there?",
        "--mcp is a flag, not an envelope",
        // Another version: not ours, ignored silently.
        "--mcp[v=2,sid=ab,mid=cd,seq=1/1,exp=0]--QQ==",
        // Malformed: bad id, bad seq, bad base64, unterminated.
        "--mcp[v=1,sid=XYZ,mid=cd,seq=1/1,exp=0]--QQ==",
        "--mcp[v=1,sid=ab,mid=cd,seq=2/1,exp=0]--QQ==",
        "--mcp[v=1,sid=ab,mid=cd,seq=1/1,exp=0]--Q!==",
        "--mcp[v=1,sid=ab,mid=cd,seq=1/1,exp=0",
        // Well-formed, but the payload is not JSON-RPC.
        "--mcp[v=1,sid=ab,mid=cd,seq=1/1,exp=0]--bm90IGpzb24=",
    ];
    for body in bodies {
        fabric
            .send(chatter, &uid(1), body.to_owned())
            .expect("send");
    }
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;

    let stats = server.stats();
    assert_eq!(stats.pms_received, bodies.len() as u64);
    assert_eq!(stats.dropped_foreign, 3, "{stats:?}");
    assert_eq!(stats.dropped_malformed, 4, "{stats:?}");
    assert_eq!(stats.dropped_json, 1, "{stats:?}");
    assert_eq!(stats.sessions_accepted, 0);
    assert_eq!(stats.sessions_open, 0);
    assert_eq!(stats.pms_sent, 0);
}
