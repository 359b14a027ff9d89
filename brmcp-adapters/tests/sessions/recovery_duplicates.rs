//! After the server forgets a session, the client re-establishes it and replays the
//! failed request once; duplicated copies of the request or of the refusal must neither
//! run the tool twice nor fail a call that ran.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Fabric, MemError, uid};
use brmcp_adapters::{PeerId, PmSender, Router, RouterConfig};
use serde_json::json;

fn payload(body: &str) -> String {
    let p = brmcp_wire::parse(body).unwrap();
    let mut out = vec![0; p.decoded_len_max()];
    let n = p.decode_body(&mut out).unwrap();
    String::from_utf8_lossy(&out[..n]).into_owned()
}

/// Client host: can deliver the next tools/call PM twice, the copy after `delay`.
struct DupSender {
    fabric: Fabric,
    from: PeerId,
    dup_next_call: Arc<AtomicBool>,
    delay: Duration,
}
impl PmSender for DupSender {
    type Error = MemError;
    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), MemError> {
        if payload(&body).contains("tools/call") && self.dup_next_call.swap(false, SeqCst) {
            let (f, from, to2, b, d) = (
                self.fabric.clone(),
                self.from,
                *to,
                body.clone(),
                self.delay,
            );
            if d.is_zero() {
                self.fabric.send(self.from, to, body.clone())?;
            } else {
                tokio::spawn(async move {
                    tokio::time::sleep(d).await;
                    let _ = f.send(from, &to2, b);
                });
            }
        }
        self.fabric.send(self.from, to, body)
    }
}

/// Server host: holds back every SESSION_NOT_FOUND reply after the first by `delay`
/// (Bison Relay does not promise order).
struct SlowSecondNotFound {
    fabric: Fabric,
    from: PeerId,
    seen: AtomicUsize,
    delay: Duration,
}
impl PmSender for SlowSecondNotFound {
    type Error = MemError;
    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), MemError> {
        if payload(&body).contains("-32003") && self.seen.fetch_add(1, SeqCst) >= 1 {
            let (f, from, to2, d) = (self.fabric.clone(), self.from, *to, self.delay);
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                let _ = f.send(from, &to2, body);
            });
            return Ok(());
        }
        self.fabric.send(self.from, to, body)
    }
}

fn setup(
    dup_delay: Duration,
    slow_second_nf: Option<Duration>,
) -> (Fabric, Router, Router, Arc<AtomicBool>) {
    let fabric = Fabric::new(1);
    let (sid_, cid) = (uid(1), uid(2));
    let mut sc = RouterConfig::server();
    sc.server_idle_timeout = Some(Duration::from_secs(60));
    let server = match slow_second_nf {
        None => fabric.router(sid_, sc),
        Some(d) => {
            let r = Router::new(
                SlowSecondNotFound {
                    fabric: fabric.clone(),
                    from: sid_,
                    seen: AtomicUsize::new(0),
                    delay: d,
                },
                sc.with_clock(fabric.clock()),
            );
            fabric.attach(sid_, &r);
            r
        }
    };
    let flag = Arc::new(AtomicBool::new(false));
    let client = Router::new(
        DupSender {
            fabric: fabric.clone(),
            from: cid,
            dup_next_call: flag.clone(),
            delay: dup_delay,
        },
        RouterConfig::client().with_clock(fabric.clock()),
    );
    fabric.attach(cid, &client);
    (fabric, server, client, flag)
}

/// A delayed duplicate of a request that hit a forgotten session is dropped: the replay
/// reuses the request's message id, so the re-opened session sees the copy as a repeat.
#[tokio::test(start_paused = true)]
async fn late_duplicate_after_recovery_does_not_run_again() {
    let (_fabric, server, client_router, flag) = setup(Duration::from_millis(10), None);
    let probe = serve(&server);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;
    client
        .call_tool(call("echo", json!({"text": "a"})))
        .await
        .unwrap();
    assert_eq!(probe.calls.load(SeqCst), 1);
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(server.stats().sessions_expired, 1);

    flag.store(true, SeqCst);
    let r = client
        .call_tool(call("echo", json!({"text": "b"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "b");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        probe.calls.load(SeqCst),
        2,
        "the second call ran more than once"
    );
    assert!(
        server.stats().dropped_duplicate >= 1,
        "{:?}",
        server.stats()
    );
}

/// Two copies of a request both hit the forgotten session; a second refusal arriving after
/// the replay went out is ignored, and the call gets its real answer.
#[tokio::test(start_paused = true)]
async fn late_second_refusal_does_not_fail_the_call() {
    let (_fabric, server, client_router, flag) =
        setup(Duration::ZERO, Some(Duration::from_millis(10)));
    let probe = serve(&server);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;
    client
        .call_tool(call("echo", json!({"text": "a"})))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(120)).await;

    flag.store(true, SeqCst);
    let r = client.call_tool(call("sleep", json!({"secs": 5}))).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(r.is_ok(), "call reported failed: {r:?}");
    assert_eq!(probe.calls.load(SeqCst), 2, "each call ran once");
}
