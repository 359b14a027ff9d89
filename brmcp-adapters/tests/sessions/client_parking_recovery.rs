//! A revived `Client` whose server forgot the session while it was parked (a restart,
//! or the Go implementation's idle expiry) re-establishes it with the first service's
//! handshake, and its call is answered.

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use brmcp_adapters::RouterConfig;
use serde_json::json;

use crate::common::client_parking::{PARK_AFTER, SETTLE, Watcher};
use crate::common::{call, serve, text};

/// A server restarted while the session was parked has forgotten it: the revived
/// service, which sent no `initialize` of its own, still re-establishes the session
/// with the first service's handshake, and the call is answered.
#[tokio::test(start_paused = true)]
async fn a_revived_client_recovers_a_session_the_server_lost() {
    use brmcp_adapters::mem::{Fabric, uid};

    let fabric = Fabric::new(38);
    let server_id = uid(1);
    let first = fabric.router(server_id, RouterConfig::server());
    serve(&first);
    let client_router = fabric.router(uid(2), RouterConfig::client());
    let client = client_router
        .connect(server_id, Watcher::default())
        .await
        .expect("connect");
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());

    fabric.set_online(&server_id, false);
    drop(first);
    tokio::time::sleep(SETTLE).await;
    let second = fabric.router(server_id, RouterConfig::server());
    let probe = serve(&second);

    let lease = client.lease().await.expect("lease");
    let answer = tokio::time::timeout(
        Duration::from_secs(60),
        lease.call_tool(call("echo", json!({"text": "again"}))),
    )
    .await
    .expect("the call hung")
    .expect("the call on the recovered session");
    assert_eq!(text(&answer), "again");
    assert_eq!(probe.calls.load(SeqCst), 1);
    let stats = second.stats();
    assert_eq!(stats.sessions_accepted, 1, "initialized again: {stats:?}");
}

/// Against the Go implementation's sessions (its router's double): the Go server
/// expires the session while our end is parked; the revived service's first call is
/// refused on the fresh session the Go router opens, and is recovered with the first
/// service's handshake.
#[tokio::test(start_paused = true)]
async fn a_revived_client_recovers_after_go_idle_expiry() {
    use crate::common::go_router::{GoProbe, GoRouter};
    use brmcp_adapters::mem::uid;

    let go = GoRouter::new(uid(1), PARK_AFTER * 2, 8);
    let probe = go.probe();
    let router = go.link(uid(2), RouterConfig::client());
    let client = router
        .connect(go.id(), Watcher::default())
        .await
        .expect("connect");
    tokio::time::sleep(PARK_AFTER * 4).await;
    assert!(client.is_parked());
    assert_eq!(GoProbe::get(&probe.expired), 1);

    let lease = client.lease().await.expect("lease");
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        lease.call_tool(call("echo", json!({"text": "after"}))),
    )
    .await
    .expect("the call hung")
    .expect("the call failed");
    assert_eq!(text(&answer), "after");
    assert_eq!(
        GoProbe::get(&probe.refusals),
        1,
        "refused once, then recovered"
    );
}
