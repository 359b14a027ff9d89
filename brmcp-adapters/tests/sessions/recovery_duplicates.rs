//! After the server forgets a session, the client re-establishes it and replays the
//! failed request once; duplicated copies of the request or of the refusal must neither
//! run the tool twice nor fail a call that ran. A refusal lost on the way must not leave
//! a call waiting: every outstanding request recovers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Fabric, MemError, uid};
use brmcp_adapters::{PeerId, PmSender, Router, RouterConfig, SESSION_NOT_FOUND};
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

/// What a server host does with session-not-found replies after the first.
#[derive(Clone, Copy)]
enum LaterRefusals {
    /// Held back by this long (Bison Relay does not promise order).
    Delay(Duration),
    /// Lost.
    Drop,
}

/// Server host: delivers the first SESSION_NOT_FOUND reply and delays or loses the
/// later ones; counts them all.
struct LaterNotFound {
    fabric: Fabric,
    from: PeerId,
    seen: Arc<AtomicUsize>,
    later: LaterRefusals,
}
impl PmSender for LaterNotFound {
    type Error = MemError;
    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), MemError> {
        let refusal = format!("\"code\":{}", SESSION_NOT_FOUND.0);
        if payload(&body).contains(&refusal) && self.seen.fetch_add(1, SeqCst) >= 1 {
            let LaterRefusals::Delay(d) = self.later else {
                return Ok(());
            };
            let (f, from, to2) = (self.fabric.clone(), self.from, *to);
            tokio::spawn(async move {
                tokio::time::sleep(d).await;
                let _ = f.send(from, &to2, body);
            });
            return Ok(());
        }
        self.fabric.send(self.from, to, body)
    }
}

/// The server process restarts: a new router for its identity, with no sessions (and
/// no records of expired ones), whose host treats later refusals as `later`.
fn restart_server(fabric: &Fabric, later: LaterRefusals) -> (Router, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let server = Router::new(
        LaterNotFound {
            fabric: fabric.clone(),
            from: uid(1),
            seen: seen.clone(),
            later,
        },
        RouterConfig::server().with_clock(fabric.clock()),
    );
    fabric.attach(uid(1), &server);
    (server, seen)
}

fn setup(dup_delay: Duration) -> (Fabric, Router, Router, Arc<AtomicBool>) {
    let fabric = Fabric::new(1);
    let (sid_, cid) = (uid(1), uid(2));
    let mut sc = RouterConfig::server();
    sc.server_idle_timeout = Some(Duration::from_secs(60));
    let server = fabric.router(sid_, sc);
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
    let (fabric, server, client_router, flag) = setup(Duration::from_millis(10));
    let _old = serve(&server);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;
    client
        .call_tool(call("echo", json!({"text": "a"})))
        .await
        .unwrap();
    // The server restarts: the session is not found, so the client re-establishes it.
    drop(server);
    let (server, _) = restart_server(&fabric, LaterRefusals::Drop);
    let probe = serve(&server);

    flag.store(true, SeqCst);
    let r = client
        .call_tool(call("echo", json!({"text": "b"})))
        .await
        .unwrap();
    assert_eq!(text(&r), "b");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        probe.calls.load(SeqCst),
        1,
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
    let (fabric, server, client_router, flag) = setup(Duration::ZERO);
    let _old = serve(&server);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;
    client
        .call_tool(call("echo", json!({"text": "a"})))
        .await
        .unwrap();
    drop(server);
    let (server, refusals) =
        restart_server(&fabric, LaterRefusals::Delay(Duration::from_millis(10)));
    let probe = serve(&server);

    flag.store(true, SeqCst);
    let r = client.call_tool(call("sleep", json!({"secs": 5}))).await;
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(r.is_ok(), "call reported failed: {r:?}");
    assert_eq!(refusals.load(SeqCst), 2, "both copies were refused");
    assert_eq!(probe.calls.load(SeqCst), 1, "the call ran once");
}

/// Two calls outstanding when the server restarts; the refusal of the second is lost on
/// the way. Both recover at once: the client replays every outstanding request, not
/// only the refused one.
#[tokio::test(start_paused = true)]
async fn a_lost_refusal_does_not_leave_a_call_waiting() {
    let (fabric, server, client_router, _flag) = setup(Duration::ZERO);
    let _old = serve(&server);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;
    client
        .call_tool(call("echo", json!({"text": "a"})))
        .await
        .unwrap();
    drop(server);
    let (server, refusals) = restart_server(&fabric, LaterRefusals::Drop);
    let probe = serve(&server);

    let (p1, p2) = (client.peer().clone(), client.peer().clone());
    let both = async move {
        tokio::join!(
            p1.call_tool(call("echo", json!({"text": "one"}))),
            p2.call_tool(call("echo", json!({"text": "two"}))),
        )
    };
    let (one, two) = tokio::time::timeout(Duration::from_secs(5), both)
        .await
        .expect("a call waited out its timeout");
    assert_eq!(text(&one.unwrap()), "one");
    assert_eq!(text(&two.unwrap()), "two");
    assert_eq!(refusals.load(SeqCst), 2, "each request was refused");
    assert_eq!(probe.calls.load(SeqCst), 2, "each call ran once");
}

/// Client host: holds back the repeated `initialize` of a recovery by `delay`.
struct SlowReinit {
    fabric: Fabric,
    from: PeerId,
    delay: Duration,
}
impl PmSender for SlowReinit {
    type Error = MemError;
    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), MemError> {
        if payload(&body).contains("brmcp-reinit-") {
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

/// A call made while the session is being re-established overtakes the repeated
/// `initialize` and is refused too; it is held for the recovery and replayed after it.
#[tokio::test(start_paused = true)]
async fn a_call_ahead_of_the_repeated_initialize_recovers() {
    let fabric = Fabric::new(2);
    let server = fabric.router(uid(1), RouterConfig::server());
    let _old = serve(&server);
    let client_router = Router::new(
        SlowReinit {
            fabric: fabric.clone(),
            from: uid(2),
            delay: Duration::from_millis(50),
        },
        RouterConfig::client().with_clock(fabric.clock()),
    );
    fabric.attach(uid(2), &client_router);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;
    client
        .call_tool(call("echo", json!({"text": "a"})))
        .await
        .unwrap();
    drop(server);
    let (server, refusals) = restart_server(&fabric, LaterRefusals::Delay(Duration::ZERO));
    let probe = serve(&server);

    let peer = client.peer().clone();
    let first =
        tokio::spawn(async move { peer.call_tool(call("echo", json!({"text": "1"}))).await });
    // The first call has been refused and the repeated initialize is on its way.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(refusals.load(SeqCst), 1);
    let second = tokio::time::timeout(
        Duration::from_secs(5),
        client.call_tool(call("echo", json!({"text": "2"}))),
    )
    .await
    .expect("the call waited out its timeout");
    assert_eq!(text(&second.unwrap()), "2");
    assert_eq!(text(&first.await.unwrap().unwrap()), "1");
    assert_eq!(
        refusals.load(SeqCst),
        2,
        "the second call overtook the initialize"
    );
    assert_eq!(probe.calls.load(SeqCst), 2, "each call ran once");
}
