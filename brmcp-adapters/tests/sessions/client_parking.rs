//! A `Client`'s idle session is parked (its rmcp service dropped, its entry kept) and
//! revived with nothing on the wire: by a lease, or by the server's next message, which
//! its handler still gets. A lease, a request of ours or a request of the server's in
//! progress keeps it running; a flood revives it once; an answer meant for an earlier
//! service of the session never completes a request of a later one; a revived service's
//! subscription is fed.

#![allow(deprecated)] // logging and roots: deprecated in MCP, still spoken.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp_adapters::mem::{Faults, Pair};
use brmcp_adapters::wire::{Chunks, MessageId, SessionId, encode_part};
use brmcp_adapters::{Client, Clock, DEFAULT_CLIENT_PARK_AFTER, LeaseError, PeerId, RouterConfig};
use rmcp::ClientLifecycleMode;
use rmcp::model::{
    ClientResult, ListRootsResult, LoggingLevel, LoggingMessageNotificationParam, PingRequest,
    ProtocolVersion, Root, ServerCapabilities, ServerConfig, ServerNotification, ServerRequest,
    SubscriptionFilter,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServerHandler};
use serde_json::{Value, json};

use crate::common::{call, serve, text};

const PARK_AFTER: Duration = DEFAULT_CLIENT_PARK_AFTER;

/// Long enough for any exchange on the fabric to settle (paused time).
const SETTLE: Duration = Duration::from_secs(2);

/// What the client's handler saw, over every service of its session.
#[derive(Debug, Default)]
struct Seen {
    list_changed: AtomicUsize,
    logs: AtomicUsize,
    pings: AtomicUsize,
    roots: AtomicUsize,
    /// How long a ping takes to answer (a user answering an elicitation).
    ping_delay: Mutex<Duration>,
}

#[derive(Debug, Clone, Default)]
struct Watcher {
    seen: Arc<Seen>,
}

impl ClientHandler for Watcher {
    async fn ping(&self, _: RequestContext<RoleClient>) -> Result<(), ErrorData> {
        let delay = *self.seen.ping_delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        self.seen.pings.fetch_add(1, SeqCst);
        Ok(())
    }

    async fn list_roots(
        &self,
        _: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.seen.roots.fetch_add(1, SeqCst);
        Ok(ListRootsResult::new(vec![Root::new("file:///parked")]))
    }

    async fn on_tool_list_changed(&self, _: NotificationContext<RoleClient>) {
        self.seen.list_changed.fetch_add(1, SeqCst);
    }

    async fn on_logging_message(
        &self,
        _: LoggingMessageNotificationParam,
        _: NotificationContext<RoleClient>,
    ) {
        self.seen.logs.fetch_add(1, SeqCst);
    }
}

/// A server that keeps the peer of the session it serves, to push to it.
#[derive(Debug, Clone, Default)]
struct Pusher {
    peer: Arc<Mutex<Option<Peer<RoleServer>>>>,
}

impl ServerHandler for Pusher {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        *self.peer.lock().unwrap() = Some(context.peer);
    }
}

impl Pusher {
    fn peer(&self) -> Peer<RoleServer> {
        self.peer.lock().unwrap().clone().expect("initialized")
    }
}

fn pair(seed: u64, client: RouterConfig) -> Pair {
    Pair::with_configs(seed, Faults::none(), RouterConfig::server(), client)
}

/// A client of `pair`'s server, with `watcher` as its handler.
async fn connect(pair: &Pair, watcher: Watcher) -> Client<Watcher> {
    pair.client
        .connect(pair.server_id, watcher)
        .await
        .expect("connect")
}

/// A client of `pair`'s server on the stateless 2026-07-28 lifecycle.
async fn discover(pair: &Pair) -> Client<Watcher> {
    pair.client
        .connect_with(
            pair.server_id,
            Watcher::default(),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .expect("discover")
}

/// A pair whose server is a [`Pusher`], a client connected to it with `watcher`, and
/// the server's peer of that session, once the handshake settled.
async fn pushed(seed: u64, watcher: Watcher) -> (Pair, Client<Watcher>, Peer<RoleServer>) {
    let pair = pair(seed, RouterConfig::client());
    let pusher = Pusher::default();
    let factory = pusher.clone();
    pair.server.serve(move |_: &PeerId| factory.clone());
    let client = connect(&pair, watcher).await;
    tokio::time::sleep(SETTLE).await;
    let server = pusher.peer();
    (pair, client, server)
}

/// A pair serving the echo tools, and a client of it that has parked.
async fn parked(seed: u64) -> (Pair, Client<Watcher>) {
    let pair = pair(seed, RouterConfig::client());
    serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());
    (pair, client)
}

async fn echo(client: &Client<Watcher>, said: &str) -> String {
    let lease = client.lease().await.expect("lease");
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        lease.call_tool(call("echo", json!({"text": said}))),
    )
    .await
    .expect("the call hung")
    .expect("the call failed");
    text(&answer)
}

/// One JSON-RPC message from `from` on session `sid`, as the PMs that carry it.
fn forge(clock: &impl Clock, sid: SessionId, message: &Value) -> Vec<String> {
    let payload = serde_json::to_vec(message).unwrap();
    let exp = clock.now().saturating_add(600).0;
    let mid = MessageId::random().unwrap();
    Chunks::new(sid, mid, exp, &payload, 1 << 16)
        .unwrap()
        .map(|(header, chunk)| {
            let mut pm = vec![0u8; header.encoded_len(chunk.len())];
            let n = encode_part(&header, chunk, &mut pm).unwrap();
            pm.truncate(n);
            String::from_utf8(pm).unwrap()
        })
        .collect()
}

fn inject(pair: &Pair, sid: SessionId, message: &Value) {
    for pm in forge(&pair.fabric.clock(), sid, message) {
        pair.fabric
            .send(pair.server_id, &pair.client_id, pm)
            .expect("send");
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_client_parks_and_comes_back_without_a_handshake() {
    let pair = pair(31, RouterConfig::client());
    serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;
    assert_eq!(echo(&client, "first").await, "first");
    assert!(!client.is_parked());

    tokio::time::sleep(PARK_AFTER / 2).await;
    assert!(!client.is_parked(), "parked before its delay");
    for round in 1..=3u64 {
        tokio::time::sleep(PARK_AFTER * 2).await;
        assert!(client.is_parked(), "round {round}: not parked");
        let stats = pair.client.stats();
        assert_eq!(stats.client_parked, round, "{stats:?}");
        assert_eq!(
            stats.sessions_open, 1,
            "a parked session is kept: {stats:?}"
        );

        let sent = pair.fabric.stats().sent;
        let said = format!("after {round}");
        assert_eq!(echo(&client, &said).await, said);
        // The call and its answer, one PM each: no initialize, no ping.
        assert_eq!(pair.fabric.stats().sent - sent, 2, "round {round}");
        assert_eq!(pair.client.stats().client_revived, round);
    }
    let server = pair.server.stats();
    assert_eq!(server.sessions_accepted, 1, "{server:?}");
    assert_eq!(server.dropped_unknown_session, 0, "{server:?}");
    assert_eq!(server.sessions_open, 1, "one session all along: {server:?}");

    client.close().await;
    tokio::time::sleep(SETTLE).await;
    assert_eq!(pair.client.stats().sessions_open, 0);
}

#[tokio::test(start_paused = true)]
async fn a_parked_client_is_closed_when_dropped() {
    let (pair, client) = parked(32).await;
    drop(client);
    tokio::time::sleep(SETTLE).await;
    let stats = pair.client.stats();
    assert_eq!(stats.sessions_open, 0, "{stats:?}");
    assert_eq!(stats.sessions_closed, 1, "{stats:?}");
}

#[tokio::test(start_paused = true)]
async fn a_peer_kept_past_its_lease_sends_nothing_once_parked() {
    let pair = pair(45, RouterConfig::client());
    let probe = serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;
    let kept = (*client.lease().await.unwrap()).clone();
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());

    let sent = pair.fabric.stats().sent;
    let late = tokio::time::timeout(
        Duration::from_secs(5),
        kept.call_tool(call("echo", json!({"text": "late"}))),
    )
    .await
    .expect("the call hung");
    assert!(late.is_err(), "{late:?}");
    tokio::time::sleep(SETTLE).await;
    assert_eq!(pair.fabric.stats().sent, sent, "a parked session sent");
    assert_eq!(probe.calls.load(SeqCst), 0);
    assert!(client.is_parked());
    // The client itself goes on.
    assert_eq!(echo(&client, "leased").await, "leased");
}

#[tokio::test(start_paused = true)]
async fn a_client_whose_sid_another_dial_took_is_closed() {
    // Parked, then its sid dialed again (`dial_on` resumes a sid it is given): the new
    // session's entry replaces the client's.
    let (pair, parked) = parked(44).await;
    let _taken = pair.client.dial_on(pair.server_id, parked.sid()).unwrap();
    tokio::time::sleep(SETTLE).await;
    assert_eq!(parked.lease().await.err(), Some(LeaseError::Closed));
    assert_eq!(pair.client.stats().client_revived, 0, "revived another's");

    // Running, likewise.
    let running = connect(&pair, Watcher::default()).await;
    assert_eq!(echo(&running, "before").await, "before");
    let _taken_too = pair.client.dial_on(pair.server_id, running.sid()).unwrap();
    tokio::time::sleep(SETTLE).await;
    assert_eq!(running.lease().await.err(), Some(LeaseError::Closed));

    // Dropping the clients leaves the sessions that took their sids open.
    let open = pair.client.stats().sessions_open;
    drop((parked, running));
    tokio::time::sleep(SETTLE).await;
    assert_eq!(pair.client.stats().sessions_open, open);
}

#[tokio::test(start_paused = true)]
async fn a_lease_or_a_request_in_progress_keeps_it_running() {
    let pair = pair(33, RouterConfig::client());
    let probe = serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;

    let lease = client.lease().await.expect("lease");
    tokio::time::sleep(PARK_AFTER * 4).await;
    assert!(!client.is_parked(), "parked under a lease");

    // A peer taken out of the lease: its call keeps the session busy on its own.
    let peer = (*lease).clone();
    drop(lease);
    let slow = tokio::spawn(async move {
        peer.call_tool(call("sleep", json!({"secs": PARK_AFTER.as_secs() * 4})))
            .await
    });
    for _ in 0..7 {
        tokio::time::sleep(PARK_AFTER / 2).await;
        assert!(!client.is_parked(), "parked with a call in progress");
    }
    let answer = slow.await.unwrap().expect("the slow call was answered");
    assert_eq!(text(&answer), format!("slept {}", PARK_AFTER.as_secs() * 4));
    assert_eq!(probe.calls.load(SeqCst), 1);

    // The lease ended long ago; the call's end counts as activity.
    tokio::time::sleep(PARK_AFTER / 2).await;
    assert!(!client.is_parked(), "parked right after the call");
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked(), "idle, then parked");
    assert_eq!(pair.client.stats().client_parked, 1);
}

#[tokio::test(start_paused = true)]
async fn the_servers_messages_revive_a_parked_client() {
    let watcher = Watcher::default();
    let seen = watcher.seen.clone();
    let (pair, client, server) = pushed(34, watcher).await;

    let park = || async {
        tokio::time::sleep(PARK_AFTER * 2).await;
        assert!(client.is_parked());
    };

    park().await;
    server.notify_tool_list_changed().await.expect("notify");
    tokio::time::sleep(SETTLE).await;
    assert_eq!(seen.list_changed.load(SeqCst), 1, "list change lost");
    assert!(!client.is_parked());

    park().await;
    server
        .notify_logging_message(LoggingMessageNotificationParam::new(
            LoggingLevel::Info,
            json!("to a parked client"),
        ))
        .await
        .expect("log");
    tokio::time::sleep(SETTLE).await;
    assert_eq!(seen.logs.load(SeqCst), 1, "log line lost");

    park().await;
    let pong = tokio::time::timeout(
        SETTLE,
        server.send_request(ServerRequest::PingRequest(PingRequest::default())),
    )
    .await
    .expect("no answer to the ping")
    .expect("ping failed");
    assert!(matches!(pong, ClientResult::EmptyResult(_)), "{pong:?}");
    assert_eq!(seen.pings.load(SeqCst), 1);

    park().await;
    let roots = tokio::time::timeout(SETTLE, server.list_roots())
        .await
        .expect("no answer to roots/list")
        .expect("roots/list failed");
    assert_eq!(roots.roots[0].uri, "file:///parked");
    assert_eq!(seen.roots.load(SeqCst), 1);

    let stats = pair.client.stats();
    assert_eq!(stats.client_parked, 4, "{stats:?}");
    assert_eq!(stats.client_revived, 4, "{stats:?}");
    // And the client's own calls still work on the session revived by the server.
    let lease = client.lease().await.expect("lease");
    let tools = lease.list_all_tools().await.expect("tools");
    assert!(tools.is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_request_the_client_is_serving_keeps_it_running() {
    let watcher = Watcher::default();
    *watcher.seen.ping_delay.lock().unwrap() = PARK_AFTER * 4;
    let seen = watcher.seen.clone();
    let (_pair, client, server) = pushed(35, watcher).await;
    let ping = tokio::spawn(async move {
        server
            .send_request(ServerRequest::PingRequest(PingRequest::default()))
            .await
    });
    for _ in 0..7 {
        tokio::time::sleep(PARK_AFTER / 2).await;
        assert!(!client.is_parked(), "parked while answering the server");
    }
    ping.await.unwrap().expect("the slow ping was answered");
    assert_eq!(seen.pings.load(SeqCst), 1);
}

/// A request the server cancels is answered by nobody (rmcp drops the cancelled
/// handler's answer): it does not keep the session from parking, however long its
/// handler would have taken.
#[tokio::test(start_paused = true)]
async fn a_request_the_server_cancels_does_not_keep_it_running() {
    let pair = pair(38, RouterConfig::client());
    serve(&pair.server);
    let watcher = Watcher::default();
    *watcher.seen.ping_delay.lock().unwrap() = PARK_AFTER * 10;
    let client = connect(&pair, watcher).await;
    tokio::time::sleep(SETTLE).await;
    inject(
        &pair,
        client.sid(),
        &json!({"jsonrpc": "2.0", "id": 77, "method": "ping"}),
    );
    tokio::time::sleep(SETTLE).await;
    inject(
        &pair,
        client.sid(),
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 77}}),
    );
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked(), "the cancelled request kept it running");
    assert_eq!(echo(&client, "after").await, "after");
}

/// A hostile server floods a parked session: it is revived once, its inbox bound
/// holds (the session is closed for overflow), and leases racing for it revive it
/// once.
#[tokio::test(start_paused = true)]
async fn a_flood_or_a_crowd_of_leases_revives_once() {
    const FLOOD: usize = 2_000;
    let pair = pair(36, RouterConfig::client());
    serve(&pair.server);
    let watcher = Watcher::default();
    let seen = watcher.seen.clone();
    let client = Arc::new(connect(&pair, watcher).await);

    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());
    let leases: Vec<_> = (0..32)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { client.lease().await.map(|_| ()) })
        })
        .collect();
    for lease in leases {
        lease.await.unwrap().expect("a racing lease");
    }
    assert_eq!(pair.client.stats().client_revived, 1);
    assert_eq!(echo(&client, "crowd").await, "crowd");

    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());
    for n in 0..FLOOD {
        let log = json!({"jsonrpc": "2.0", "method": "notifications/message",
                         "params": {"level": "info", "data": n}});
        inject(&pair, client.sid(), &log);
    }
    tokio::time::sleep(SETTLE).await;
    let stats = pair.client.stats();
    assert_eq!(stats.client_revived, 2, "{stats:?}");
    // The flood arrives faster than the revived service reads: past the inbox bound
    // the session is closed for overflow, not queued without end.
    let logs = seen.logs.load(SeqCst);
    assert_eq!(stats.sessions_overflowed, 1, "{stats:?}");
    assert!(logs < FLOOD, "{logs} of {FLOOD}: {stats:?}");
    assert_eq!(client.lease().await.err(), Some(LeaseError::Closed));
}

/// An answer with the id of a request an earlier service of the session sent (a late
/// answer to a call that timed out before the session parked) does not complete the
/// revived service's request of the same number.
#[tokio::test(start_paused = true)]
async fn an_earlier_services_answer_does_not_complete_a_later_request() {
    let mut config = RouterConfig::client();
    config.request_timeout = Some(Duration::from_secs(20));
    let pair = pair(37, config);
    serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;
    {
        // The handshake took id 0; this call is id 1, and times out.
        let lease = client.lease().await.expect("lease");
        let late = lease
            .call_tool(call("sleep", json!({"secs": 25})))
            .await
            .expect_err("timed out");
        assert!(late.to_string().contains("no answer"), "{late}");
    }
    // The real late answer to id 1 arrives (and is dropped) before the session parks.
    tokio::time::sleep(PARK_AFTER * 3).await;
    assert!(client.is_parked());
    // Answers, progress and cancellations reaching the parked session are dropped
    // without a service: none can concern it.
    for id in [1, 0] {
        inject(
            &pair,
            client.sid(),
            &json!({"jsonrpc": "2.0", "id": id, "result": {}}),
        );
    }
    inject(
        &pair,
        client.sid(),
        &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                "params": {"progressToken": 1, "progress": 1}}),
    );
    inject(
        &pair,
        client.sid(),
        &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": 1}}),
    );
    tokio::time::sleep(SETTLE).await;
    let stats = pair.client.stats();
    assert!(client.is_parked(), "a late message revived the session");
    assert_eq!(stats.dropped_parked_answer, 4, "{stats:?}");
    assert_eq!(stats.client_revived, 0, "{stats:?}");

    // The revived service numbers from 0 again: its second request is its id 1.
    let lease = client.lease().await.expect("lease");
    assert_eq!(
        text(
            &lease
                .call_tool(call("echo", json!({"text": "zero"})))
                .await
                .unwrap()
        ),
        "zero"
    );
    let call = lease.call_tool(call("sleep", json!({"secs": 5})));
    let forged = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        for id in [1, 0] {
            inject(
                &pair,
                client.sid(),
                &json!({"jsonrpc": "2.0", "id": id,
                        "result": {"content": [{"type": "text", "text": "slept 25"}]}}),
            );
        }
    };
    let (answer, ()) = tokio::join!(call, forged);
    assert_eq!(text(&answer.expect("answered")), "slept 5");
}

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

/// A client on the stateless 2026-07-28 lifecycle parks and revives the same way, and
/// its revived service still sends the negotiated metadata with every request: a
/// server that forgot the session meanwhile (idle expiry) serves the call from it
/// alone.
#[tokio::test(start_paused = true)]
async fn a_stateless_client_parks_and_revives() {
    let mut server = RouterConfig::server();
    server.server_idle_timeout = Some(PARK_AFTER);
    let pair = Pair::with_configs(39, Faults::none(), server, RouterConfig::client());
    let probe = serve(&pair.server);
    let client = discover(&pair).await;
    assert_eq!(echo(&client, "first").await, "first");
    for round in 1..=2u64 {
        tokio::time::sleep(PARK_AFTER * 3).await;
        assert!(client.is_parked(), "round {round}");
        assert_eq!(pair.server.stats().sessions_open, 0, "round {round}");
        let sent = pair.fabric.stats().sent;
        let said = format!("stateless {round}");
        assert_eq!(echo(&client, &said).await, said);
        assert_eq!(pair.fabric.stats().sent - sent, 2, "round {round}");
        assert_eq!(pair.server.stats().sessions_accepted, 1 + round);
    }
    assert_eq!(probe.calls.load(SeqCst), 3);
}

/// A server that accepts a subscription to tool list changes, tells one change on it at
/// once, then holds it until the client cancels.
#[derive(Debug, Clone, Default)]
struct Lister {
    listens: Arc<AtomicUsize>,
}

impl ServerHandler for Lister {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    fn accepted_subscription_filter(&self, _: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.listens.fetch_add(1, SeqCst);
        let changed = ServerNotification::ToolListChangedNotification(Default::default());
        if context.sink().send(changed).await.is_err() {
            return Ok(());
        }
        context.cancelled().await;
        Ok(())
    }
}

/// A subscription opened by a revived service (2026-07-28's `subscriptions/listen`) is
/// acknowledged and fed: the server's notifications name it by the id the service sent,
/// moved into the service's range, and reach it moved back (without that, the listen
/// waits for an acknowledgment that never matches). An open subscription keeps the
/// session from parking.
#[tokio::test(start_paused = true)]
async fn a_revived_client_listens_to_the_server() {
    let pair = pair(40, RouterConfig::client());
    let lister = Lister::default();
    let factory = lister.clone();
    pair.server.serve(move |_: &PeerId| factory.clone());
    let client = discover(&pair).await;
    let tools = SubscriptionFilter::builder().tools_list_changed().build();

    for round in 0..3usize {
        if round > 0 {
            tokio::time::sleep(PARK_AFTER * 2).await;
            assert!(client.is_parked(), "round {round}: not parked");
        }
        let lease = client.lease().await.expect("lease");
        let mut subscription = tokio::time::timeout(SETTLE, lease.listen(tools.clone()))
            .await
            .unwrap_or_else(|_| panic!("round {round}: the listen hung"))
            .unwrap_or_else(|e| panic!("round {round}: the listen failed: {e}"));
        assert_eq!(subscription.acknowledged(), &tools, "round {round}");
        let told = tokio::time::timeout(SETTLE, subscription.next())
            .await
            .unwrap_or_else(|_| panic!("round {round}: the change never came"))
            .expect("the subscription failed");
        assert!(
            matches!(
                told,
                Some(ServerNotification::ToolListChangedNotification(_))
            ),
            "round {round}: {told:?}"
        );
        // An open subscription is a request in progress: the session stays up.
        drop(lease);
        tokio::time::sleep(PARK_AFTER * 2).await;
        assert!(!client.is_parked(), "round {round}: parked while listening");
        subscription.cancel().await.expect("cancel");
        assert_eq!(lister.listens.load(SeqCst), round + 1);
    }
    assert_eq!(pair.client.stats().client_revived, 2);
    assert_eq!(pair.client.stats().dropped_parked_answer, 0);
}
