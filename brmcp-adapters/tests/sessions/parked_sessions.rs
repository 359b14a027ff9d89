//! An idle server session is parked (its rmcp service and handler dropped) and revived
//! by its next message, already initialized: the client notices nothing. A session with
//! a call in progress is never parked, and a parked one stays in the session count.

use std::time::Duration;

use crate::common::{Lifecycle, call, connect, handlers, serve, text};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Faults, Pair};
use serde_json::json;

const PARK_AFTER: Duration = Duration::from_secs(10);

fn pair() -> Pair {
    let mut server = RouterConfig::server();
    server.server_park_after = Some(PARK_AFTER);
    Pair::with_configs(21, Faults::none(), server, RouterConfig::client())
}

#[tokio::test(start_paused = true)]
async fn idle_session_is_parked_and_revived_unnoticed() {
    let pair = pair();
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    let first = client
        .call_tool(call("echo", json!({"text": "before"})))
        .await
        .expect("first call");
    assert_eq!(text(&first), "before");
    assert_eq!(handlers(&probe), 1);

    tokio::time::sleep(PARK_AFTER * 3).await;
    assert_eq!(
        handlers(&probe),
        0,
        "the idle session's handler was not dropped"
    );
    let stats = pair.server.stats();
    assert_eq!(
        stats.sessions_open, 1,
        "a parked session is still open: {stats:?}"
    );

    for round in 0..2 {
        let answer = tokio::time::timeout(
            Duration::from_secs(5),
            client.call_tool(call("echo", json!({"text": format!("after {round}")}))),
        )
        .await
        .expect("the call on a parked session hung")
        .expect("the call on a parked session failed");
        assert_eq!(text(&answer), format!("after {round}"));
        assert_eq!(handlers(&probe), 1);
        // The revived session is the client's own, with its negotiated version.
        let who = client
            .call_tool(call("whoami", json!({})))
            .await
            .expect("whoami");
        assert!(text(&who).starts_with("rmcp "), "{}", text(&who));
        tokio::time::sleep(PARK_AFTER * 3).await;
        assert_eq!(handlers(&probe), 0, "round {round}: not parked again");
    }
    let stats = pair.server.stats();
    assert_eq!(stats.sessions_resumed, 2, "{stats:?}");
    assert_eq!(stats.sessions_accepted, 1, "{stats:?}");
    assert_eq!(stats.dropped_unknown_session, 0, "{stats:?}");
    assert_eq!(stats.sessions_closed, 0, "{stats:?}");
    client.cancel().await.expect("cancel");
}

#[tokio::test(start_paused = true)]
async fn a_session_with_a_call_in_progress_is_not_parked() {
    let pair = pair();
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    let slow = client.call_tool(call("sleep", json!({"secs": PARK_AFTER.as_secs() * 4})));
    let watch = async {
        for _ in 0..6 {
            tokio::time::sleep(PARK_AFTER / 2).await;
            assert_eq!(handlers(&probe), 1, "parked while a call was running");
        }
    };
    let (answer, ()) = tokio::join!(slow, watch);
    answer.expect("the slow call was answered");
    tokio::time::sleep(PARK_AFTER * 3).await;
    assert_eq!(handlers(&probe), 0, "idle again, then parked");
    client.cancel().await.expect("cancel");
}

#[tokio::test(start_paused = true)]
async fn sessions_are_not_parked_by_default() {
    let pair = Pair::with_configs(
        22,
        Faults::none(),
        RouterConfig::server(),
        RouterConfig::client(),
    );
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(handlers(&probe), 1);
    client.cancel().await.expect("cancel");
}

/// A hostile or confused client on a parked session: a message that is not JSON-RPC
/// leaves it parked; an answer to nothing, a reused request id and a second
/// `initialize` each revive it, and the client only ever sees answers to its own
/// requests (never the replayed handshake's).
#[tokio::test(start_paused = true)]
async fn a_parked_session_takes_junk_id_reuse_and_re_initialize() {
    use crate::common::raw::RawClient;
    use brmcp_adapters::mem::uid;

    const WAIT: Duration = Duration::from_secs(5);
    let mut config = RouterConfig::server();
    config.server_park_after = Some(PARK_AFTER);
    let mut raw = RawClient::new(uid(2), config);
    let probe = serve(&raw.server);
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}});
    let echo = |id: u64, t: &str| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": "echo", "arguments": {"text": t}}})
    };
    raw.send(initialize.clone()).await;
    assert_eq!(raw.recv(WAIT).await.expect("initialized")["id"], 1);
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    raw.send(echo(2, "a")).await;
    assert_eq!(raw.recv(WAIT).await.expect("answered")["id"], 2);
    tokio::time::sleep(PARK_AFTER * 3).await;
    assert_eq!(handlers(&probe), 0);

    raw.send(json!("not a JSON-RPC message")).await;
    assert!(raw.recv(WAIT).await.is_none(), "junk got an answer");
    assert_eq!(handlers(&probe), 0, "junk revived the session");
    assert_eq!(raw.server.stats().dropped_json, 1);

    // An answer to a request the server never sent, then a request id used before.
    raw.send(json!({"jsonrpc": "2.0", "id": 99, "result": {}}))
        .await;
    raw.send(echo(2, "again")).await;
    let answer = raw.recv(WAIT).await.expect("the reused id was answered");
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(answer["result"]["content"][0]["text"], "again", "{answer}");
    assert!(raw.recv(WAIT).await.is_none(), "an answer nobody asked for");

    // Parked again, the client starts over with `initialize`: answered under its id.
    tokio::time::sleep(PARK_AFTER * 3).await;
    assert_eq!(handlers(&probe), 0);
    raw.send(initialize).await;
    let init = raw
        .recv(WAIT)
        .await
        .expect("the new initialize was answered");
    assert_eq!(init["id"], 1, "{init}");
    raw.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    raw.send(echo(3, "b")).await;
    assert_eq!(raw.recv(WAIT).await.expect("answered")["id"], 3);
    let stats = raw.server.stats();
    assert_eq!(
        (
            stats.sessions_accepted,
            stats.sessions_open,
            stats.sessions_closed
        ),
        (1, 1, 0),
        "{stats:?}"
    );
}

/// Server host: while the gate is shut, every PM waits for it.
struct Stalling {
    fabric: brmcp_adapters::mem::Fabric,
    from: brmcp_adapters::PeerId,
    open: tokio::sync::watch::Receiver<bool>,
}

impl brmcp_adapters::PmSender for Stalling {
    type Error = brmcp_adapters::mem::MemError;
    async fn send_pm(
        &self,
        to: &brmcp_adapters::PeerId,
        body: String,
    ) -> Result<(), brmcp_adapters::mem::MemError> {
        let mut open = self.open.clone();
        let _ = open.wait_for(|o| *o).await;
        self.fabric.send(self.from, to, body)
    }
}

/// A host stalled past the park delay, with an answer still queued: the session is not
/// parked, so a revived one never writes alongside the stuck writer; once the host is
/// back the answer arrives, and the session parks only after.
#[tokio::test(start_paused = true)]
async fn a_stalled_host_keeps_the_session_unparked() {
    use brmcp_adapters::mem::{Fabric, uid};
    use brmcp_adapters::{Router, RouterConfig};

    let fabric = Fabric::new(23);
    let (gate, open) = tokio::sync::watch::channel(true);
    let mut config = RouterConfig::server();
    config.server_park_after = Some(PARK_AFTER);
    let server = Router::new(
        Stalling {
            fabric: fabric.clone(),
            from: uid(1),
            open,
        },
        config.with_clock(fabric.clock()),
    );
    fabric.attach(uid(1), &server);
    let probe = serve(&server);
    let mut client_config = RouterConfig::client();
    client_config.request_timeout = Some(PARK_AFTER * 10);
    let client_router = fabric.router(uid(2), client_config);
    let client = connect(&client_router, uid(1), Lifecycle::Legacy).await;

    gate.send_replace(false);
    let peer = client.peer().clone();
    let call =
        tokio::spawn(async move { peer.call_tool(call("echo", json!({"text": "x"}))).await });
    for _ in 0..6 {
        tokio::time::sleep(PARK_AFTER / 2).await;
        assert_eq!(handlers(&probe), 1, "parked with an answer still queued");
    }
    gate.send_replace(true);
    let answer = call.await.unwrap().expect("the stalled answer arrived");
    assert_eq!(text(&answer), "x");
    tokio::time::sleep(PARK_AFTER * 3).await;
    assert_eq!(handlers(&probe), 0, "written out, then parked");
    let stats = server.stats();
    assert_eq!(stats.sessions_resumed, 0, "{stats:?}");
    client.cancel().await.expect("cancel");
}
