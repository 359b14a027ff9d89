//! What the tests of a `Client`'s parking share: a client handler that counts what
//! reaches it over every service of its session, a server that pushes to its client,
//! and the steps to connect, park, call and forge the server's messages.

#![allow(deprecated)] // logging and roots: deprecated in MCP, still spoken.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brmcp_adapters::mem::{Faults, Pair};
use brmcp_adapters::wire::{Chunks, MessageId, SessionId, encode_part};
use brmcp_adapters::{Client, Clock, DEFAULT_CLIENT_PARK_AFTER, PeerId, RouterConfig};
use rmcp::ClientLifecycleMode;
use rmcp::model::{
    ListRootsResult, LoggingMessageNotificationParam, ProtocolVersion, Root, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ClientHandler, ErrorData, Peer, RoleClient, RoleServer, ServerHandler};
use serde_json::{Value, json};

use super::{call, serve, text};

pub const PARK_AFTER: Duration = DEFAULT_CLIENT_PARK_AFTER;

/// Long enough for any exchange on the fabric to settle (paused time), and shorter
/// than the park delay, so a session a message revived is still running after it.
pub const SETTLE: Duration = Duration::from_millis(50);

/// What the client's handler saw, over every service of its session.
#[derive(Debug, Default)]
pub struct Seen {
    pub list_changed: AtomicUsize,
    pub logs: AtomicUsize,
    pub pings: AtomicUsize,
    pub roots: AtomicUsize,
    /// How long a ping takes to answer (a user answering an elicitation).
    pub ping_delay: Mutex<Duration>,
}

#[derive(Debug, Clone, Default)]
pub struct Watcher {
    pub seen: Arc<Seen>,
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

pub fn pair(seed: u64, client: RouterConfig) -> Pair {
    Pair::with_configs(seed, Faults::none(), RouterConfig::server(), client)
}

/// A client of `pair`'s server, with `watcher` as its handler.
pub async fn connect(pair: &Pair, watcher: Watcher) -> Client<Watcher> {
    pair.client
        .connect(pair.server_id, watcher)
        .await
        .expect("connect")
}

/// A client of `pair`'s server on the stateless 2026-07-28 lifecycle.
pub async fn discover(pair: &Pair) -> Client<Watcher> {
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
pub async fn pushed(seed: u64, watcher: Watcher) -> (Pair, Client<Watcher>, Peer<RoleServer>) {
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
pub async fn parked(seed: u64) -> (Pair, Client<Watcher>) {
    let pair = pair(seed, RouterConfig::client());
    serve(&pair.server);
    let client = connect(&pair, Watcher::default()).await;
    tokio::time::sleep(PARK_AFTER * 2).await;
    assert!(client.is_parked());
    (pair, client)
}

pub async fn echo(client: &Client<Watcher>, said: &str) -> String {
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

pub fn inject(pair: &Pair, sid: SessionId, message: &Value) {
    for pm in forge(&pair.fabric.clock(), sid, message) {
        pair.fabric
            .send(pair.server_id, &pair.client_id, pm)
            .expect("send");
    }
}
