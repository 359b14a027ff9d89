//! The routing state of a link: agent sessions, forwarded requests, progress routes
//! and log outboxes, so what the bot sends on its own reaches the right agents.

#![allow(deprecated)] // logging is SEP-2577-deprecated; still relayed

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, Weak};

use rmcp::model::{
    ClientCapabilities, ClientResult, ErrorCode, ErrorData, InputRequest,
    LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, ServerRequest, Tool,
};
use rmcp::service::{
    OriginatingRequestId, Peer, PeerRequestOptions, RequestContext, RoleClient, RoleServer,
};

use brmcp_adapters::protocol::PriceBounds;

use crate::bridge::lock;
use crate::bridge::proxy::input_required::{InputAsk, Inputs};
use crate::early_progress::EarlyProgress;

/// Notifications kept per upstream progress token before its call is registered.
const EARLY_PER_TOKEN: usize = 32;

/// Upstream progress tokens with early notifications kept at once; the oldest go first.
const EARLY_TOKENS: usize = 64;

/// An agent session (legacy lifecycle) of a bot: where notifications go.
pub(crate) struct AgentSession {
    pub(crate) peer: Peer<RoleServer>,
    pub(crate) subscriptions: Mutex<HashSet<String>>,
}

/// An agent request being forwarded on the link: a bot's request to the client made
/// meanwhile goes to this agent, on this request's stream.
struct Inflight {
    seq: u64,
    peer: Peer<RoleServer>,
    id: rmcp::model::RequestId,
    /// For an agent without a session here (stateless lifecycle): the log messages to
    /// send on this request's stream.
    logs: Option<Arc<LogOutbox>>,
    /// For an agent asked through `input_required` (protocol 2026-07-28): where the
    /// bot's requests to the client go instead of `peer`.
    inputs: Option<Inputs>,
}

/// Log messages for an agent on the stateless lifecycle, sent on the stream of its
/// request, in order, before the request's answer.
pub(crate) struct LogOutbox {
    peer: Peer<RoleServer>,
    queue: Mutex<VecDeque<LoggingMessageNotificationParam>>,
    send: tokio::sync::Mutex<()>,
}

impl LogOutbox {
    fn new(peer: &Peer<RoleServer>) -> Arc<Self> {
        Arc::new(Self {
            peer: peer.clone(),
            queue: Mutex::default(),
            send: tokio::sync::Mutex::new(()),
        })
    }

    async fn flush(&self) {
        let _turn = self.send.lock().await;
        loop {
            let Some(params) = lock(&self.queue).pop_front() else {
                return;
            };
            if let Err(e) = self.peer.notify_logging_message(params).await {
                tracing::debug!(error = %e, "log message not relayed");
            }
        }
    }
}

/// One registered progress route: upstream token to the agent's token.
pub(crate) struct Route {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    queue: Mutex<VecDeque<ProgressNotificationParam>>,
    send: tokio::sync::Mutex<()>,
    /// The bot sent progress for the call.
    heard: AtomicBool,
}

impl Route {
    /// Whether the bot sent progress for the call (early progress included).
    pub(crate) fn heard(&self) -> bool {
        self.heard.load(Ordering::Relaxed)
    }

    fn queue(&self) -> MutexGuard<'_, VecDeque<ProgressNotificationParam>> {
        lock(&self.queue)
    }

    /// Sends what is queued, in order; concurrent flushes take turns.
    async fn flush(&self) {
        let _turn = self.send.lock().await;
        loop {
            let Some(mut params) = self.queue().pop_front() else {
                return;
            };
            self.heard.store(true, Ordering::Relaxed);
            params.progress_token = self.token.clone();
            if let Err(e) = self.peer.notify_progress(params).await {
                tracing::debug!(error = %e, "progress not relayed");
            }
        }
    }
}

/// Progress routes and early progress, keyed by the connection's serial and its
/// upstream token: every connection of a link draws its tokens from 0.
struct Progress {
    routes: HashMap<(u64, ProgressToken), Arc<Route>>,
    /// Keyed by [`early_key`].
    early: EarlyProgress,
}

/// The key of a connection's upstream token in the early buffer: the serial and the
/// token's JSON (a number and a string of the same digits stay apart).
fn early_key(serial: u64, upstream: &ProgressToken) -> ProgressToken {
    let token = serde_json::to_string(&upstream.0).unwrap_or_default();
    ProgressToken(rmcp::model::NumberOrString::String(
        format!("{serial}/{token}").into(),
    ))
}

impl Default for Progress {
    fn default() -> Self {
        Self {
            routes: HashMap::new(),
            early: EarlyProgress::new(EARLY_TOKENS, EARLY_PER_TOKEN),
        }
    }
}

/// Routing state of one link, shared with its client handler and transport tap.
pub(crate) struct Hub {
    progress: Mutex<Progress>,
    sessions: Mutex<Vec<Weak<AgentSession>>>,
    inflight: Mutex<Vec<Inflight>>,
    seq: AtomicU64,
    /// The serial of the next connection to the bot.
    conns: AtomicU64,
    tools: RwLock<Arc<Vec<Tool>>>,
    /// The price bound of each dynamically priced tool as last listed to an agent
    /// (at most [`MAX_SHOWN_BOUNDS`]): a quote is paid only within it.
    shown: Mutex<HashMap<String, PriceBounds>>,
}

/// Dynamically priced tools whose listed bound is remembered per bot: 4096, four
/// times the most tools a harness mirrors from one upstream. Past it the memory starts
/// over (a tool then falls back on the bridge's own listing of the bot).
pub(crate) const MAX_SHOWN_BOUNDS: usize = 4096;

impl Hub {
    pub(super) fn new() -> Self {
        Self {
            progress: Mutex::default(),
            sessions: Mutex::default(),
            inflight: Mutex::default(),
            seq: AtomicU64::new(0),
            conns: AtomicU64::new(0),
            tools: RwLock::new(Arc::new(Vec::new())),
            shown: Mutex::default(),
        }
    }

    /// A serial for a new connection to the bot, which keys its progress.
    pub(super) fn next_serial(&self) -> u64 {
        self.conns.fetch_add(1, Ordering::Relaxed)
    }

    /// The bot's tools as last listed.
    pub(crate) fn tools(&self) -> Arc<Vec<Tool>> {
        self.tools
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub(super) fn set_tools(&self, tools: Vec<Tool>) {
        *self.tools.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(tools);
    }

    /// Keeps the bound `tool` was just listed to an agent with.
    pub(crate) fn show_bound(&self, tool: &str, bounds: PriceBounds) {
        let mut shown = lock(&self.shown);
        if shown.len() >= MAX_SHOWN_BOUNDS && !shown.contains_key(tool) {
            shown.clear();
        }
        shown.insert(tool.to_owned(), bounds);
    }

    /// The bound `tool` was last listed to an agent with, if it was.
    pub(crate) fn shown_bound(&self, tool: &str) -> Option<PriceBounds> {
        lock(&self.shown).get(tool).copied()
    }

    /// Registers an agent session for notifications.
    pub(crate) fn add_session(&self, session: &Arc<AgentSession>) {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|s| s.strong_count() > 0);
        sessions.push(Arc::downgrade(session));
    }

    pub(super) fn live_sessions(&self) -> Vec<Arc<AgentSession>> {
        let mut sessions = lock(&self.sessions);
        sessions.retain(|s| s.strong_count() > 0);
        sessions.iter().filter_map(Weak::upgrade).collect()
    }

    /// Marks an agent request as being forwarded; the guard unmarks it.
    /// `inputs`, for an agent asked through `input_required`, takes the bot's requests
    /// to the client made meanwhile.
    pub(crate) fn track(
        self: &Arc<Self>,
        peer: &Peer<RoleServer>,
        id: &rmcp::model::RequestId,
        sessionless: bool,
        inputs: Option<Inputs>,
    ) -> Tracked {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let logs = sessionless.then(|| LogOutbox::new(peer));
        lock(&self.inflight).push(Inflight {
            seq,
            peer: peer.clone(),
            id: id.clone(),
            logs: logs.clone(),
            inputs,
        });
        Tracked {
            hub: self.clone(),
            seq,
            logs,
        }
    }

    /// Called by the tap, in arrival order: agent sessions get the message as a
    /// notification; stateless agents with a request in flight get it on that
    /// request's stream, before its answer.
    pub(super) fn on_log(&self, params: LoggingMessageNotificationParam) {
        for session in self.live_sessions() {
            let params = params.clone();
            tokio::spawn(async move {
                let _ = session.peer.notify_logging_message(params).await;
            });
        }
        let stateless: Vec<Arc<LogOutbox>> = lock(&self.inflight)
            .iter()
            .filter_map(|i| i.logs.clone())
            .collect();
        for outbox in stateless {
            lock(&outbox.queue).push_back(params.clone());
            tokio::spawn(async move { outbox.flush().await });
        }
    }

    /// Routes upstream progress for `upstream` on connection `serial` to the agent's
    /// `token`; progress that arrived early is queued first.
    pub(crate) fn route_progress(
        &self,
        serial: u64,
        upstream: ProgressToken,
        peer: Peer<RoleServer>,
        token: ProgressToken,
    ) -> Arc<Route> {
        let mut progress = lock(&self.progress);
        let early = progress.early.take(&early_key(serial, &upstream));
        let route = Arc::new(Route {
            peer,
            token,
            queue: Mutex::new(early),
            send: tokio::sync::Mutex::new(()),
            heard: AtomicBool::new(false),
        });
        progress.routes.insert((serial, upstream), route.clone());
        drop(progress);
        if !route.queue().is_empty() {
            let r = route.clone();
            tokio::spawn(async move { r.flush().await });
        }
        route
    }

    /// Ends a route once its request is answered; what is still queued is sent first.
    pub(crate) async fn finish_progress(
        &self,
        serial: u64,
        upstream: &ProgressToken,
        route: &Route,
    ) {
        lock(&self.progress)
            .routes
            .remove(&(serial, upstream.clone()));
        route.flush().await;
    }

    /// Forgets early progress of a request that will never be routed.
    pub(crate) fn drop_progress(&self, serial: u64, upstream: &ProgressToken) {
        lock(&self.progress)
            .early
            .take(&early_key(serial, upstream));
    }

    /// Called by the tap of connection `serial`, in arrival order.
    pub(super) fn on_progress(&self, serial: u64, mut params: ProgressNotificationParam) {
        let mut progress = lock(&self.progress);
        let key = (serial, params.progress_token.clone());
        if let Some(route) = progress.routes.get(&key).cloned() {
            drop(progress);
            route.queue().push_back(params);
            tokio::spawn(async move { route.flush().await });
            return;
        }
        // The route sets the agent's token when it sends; until then the key is kept.
        params.progress_token = early_key(serial, &params.progress_token);
        progress.early.push(params);
    }

    /// The agent a bot's request to the client goes to: the newest forwarded request
    /// of an agent that declared the capability, else the newest such agent session.
    /// A request of an agent asked through `input_required` takes only what that form
    /// can carry (`asked`: elicitation, sampling, roots).
    fn pick_agent(
        &self,
        supports: impl Fn(&ClientCapabilities) -> bool,
        asked: bool,
    ) -> Option<Target> {
        let declares = |peer: &Peer<RoleServer>| {
            peer.peer_info()
                .is_some_and(|info| supports(&info.capabilities))
        };
        let inflight = lock(&self.inflight);
        let found = inflight.iter().rev().find_map(|i| match &i.inputs {
            Some(inputs) => {
                (asked && supports(&inputs.capabilities)).then(|| Target::Held(inputs.clone()))
            }
            None => declares(&i.peer).then(|| Target::Peer(i.peer.clone(), Some(i.id.clone()))),
        });
        if found.is_some() {
            return found;
        }
        drop(inflight);
        self.live_sessions()
            .into_iter()
            .rev()
            .find(|s| declares(&s.peer))
            .map(|s| Target::Peer(s.peer.clone(), None))
    }

    /// Relays a bot's request to an agent and its answer back.
    pub(super) async fn relay(
        &self,
        mut request: ServerRequest,
        ctx: &RequestContext<RoleClient>,
        supports: impl Fn(&ClientCapabilities) -> bool,
    ) -> Result<ClientResult, ErrorData> {
        let method = match &request {
            ServerRequest::PingRequest(_) => "ping".to_owned(),
            ServerRequest::CreateMessageRequest(_) => "sampling/createMessage".to_owned(),
            ServerRequest::ListRootsRequest(_) => "roots/list".to_owned(),
            ServerRequest::ElicitRequest(_) => "elicitation/create".to_owned(),
            ServerRequest::CustomRequest(r) => r.method.clone(),
            _ => "this request".to_owned(),
        };
        let input = match &request {
            ServerRequest::CreateMessageRequest(r) => Some(InputRequest::CreateMessage(r.clone())),
            ServerRequest::ListRootsRequest(r) => Some(InputRequest::ListRoots(r.clone())),
            ServerRequest::ElicitRequest(r) => Some(InputRequest::Elicitation(r.clone())),
            _ => None,
        };
        let (peer, origin) = match (self.pick_agent(supports, input.is_some()), input) {
            (Some(Target::Peer(peer, origin)), _) => (peer, origin),
            (Some(Target::Held(inputs)), Some(input)) => {
                return ask_held(&inputs, input, ctx).await;
            }
            (Some(Target::Held(_)) | None, _) => {
                return Err(ErrorData::new(
                    ErrorCode::METHOD_NOT_FOUND,
                    format!("no agent connected to the bridge supports {method}"),
                    None,
                ));
            }
        };
        if let Some(origin) = origin {
            rmcp::model::GetExtensions::extensions_mut(&mut request)
                .insert(OriginatingRequestId(origin));
        }
        let handle = peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| ErrorData::internal_error(format!("relay to agent: {e}"), None))?;
        let id = handle.id.clone();
        tokio::select! {
            answer = handle.rx => match answer {
                Ok(Ok(result)) => Ok(result),
                Ok(Err(rmcp::ServiceError::McpError(e))) => Err(e),
                Ok(Err(e)) => Err(ErrorData::internal_error(format!("relay to agent: {e}"), None)),
                Err(_) => Err(ErrorData::internal_error("relay to agent: agent gone", None)),
            },
            () = ctx.ct.cancelled() => {
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(id),
                        Some("cancelled by the bot".into()),
                    ))
                    .await;
                Err(ErrorData::internal_error("cancelled by the bot", None))
            }
        }
    }
}

/// Where a bot's request to the client goes.
enum Target {
    /// To the agent's client as a request of its own, on the stream of the agent's
    /// request if given.
    Peer(Peer<RoleServer>, Option<rmcp::model::RequestId>),
    /// Into the agent's call, which answers `input_required` with it.
    Held(Inputs),
}

/// Hands a bot's request to the call of an agent asked through `input_required`, and
/// waits for the agent's answer on its retry, while the call is held for it, or until
/// the bot cancels it.
async fn ask_held(
    inputs: &Inputs,
    request: InputRequest,
    ctx: &RequestContext<RoleClient>,
) -> Result<ClientResult, ErrorData> {
    let (answer, answered) = tokio::sync::oneshot::channel();
    let parse = |value: serde_json::Value| -> Result<ClientResult, ErrorData> {
        let bad = |e: serde_json::Error| {
            ErrorData::invalid_params(format!("agent's input response: {e}"), None)
        };
        Ok(match &request {
            InputRequest::CreateMessage(_) => ClientResult::CreateMessageResult(Box::new(
                serde_json::from_value(value).map_err(bad)?,
            )),
            InputRequest::ListRoots(_) => {
                ClientResult::ListRootsResult(serde_json::from_value(value).map_err(bad)?)
            }
            _ => ClientResult::ElicitResult(serde_json::from_value(value).map_err(bad)?),
        })
    };
    inputs
        .asks
        .try_send(InputAsk {
            request: request.clone(),
            answer,
        })
        .map_err(|e| match e {
            tokio::sync::mpsc::error::TrySendError::Full(_) => ErrorData::internal_error(
                "too many requests already wait for the agent's input",
                None,
            ),
            tokio::sync::mpsc::error::TrySendError::Closed(_) => {
                ErrorData::internal_error("relay to agent: its call ended", None)
            }
        })?;
    tokio::select! {
        // The held call's expiry answers first (dropping `answer`); this bound only
        // stands in for it, should the call never be held.
        answer = tokio::time::timeout(inputs.hold.saturating_mul(2), answered) => match answer {
            Ok(Ok(value)) => parse(value),
            Ok(Err(_)) => Err(ErrorData::internal_error(
                "relay to agent: the agent did not answer (its call ended or expired)",
                None,
            )),
            Err(_) => Err(ErrorData::internal_error(
                format!("relay to agent: the agent did not answer within {:?}", inputs.hold.saturating_mul(2)),
                None,
            )),
        },
        () = ctx.ct.cancelled() => Err(ErrorData::internal_error("cancelled by the bot", None)),
    }
}

/// Unmarks a forwarded request when dropped.
pub(crate) struct Tracked {
    hub: Arc<Hub>,
    seq: u64,
    logs: Option<Arc<LogOutbox>>,
}

impl Tracked {
    /// Moves the mark to the agent's request `id` on `peer` (the retry of a call held
    /// for the agent's input): the bot's requests and log messages go there now.
    pub(crate) fn retarget(&mut self, peer: &Peer<RoleServer>, id: &rmcp::model::RequestId) {
        let logs = self.logs.as_ref().map(|_| LogOutbox::new(peer));
        if let Some(i) = lock(&self.hub.inflight)
            .iter_mut()
            .find(|i| i.seq == self.seq)
        {
            i.peer = peer.clone();
            i.id = id.clone();
            i.logs.clone_from(&logs);
        }
        self.logs = logs;
    }

    /// Sends the log messages still queued for the request (call before answering).
    pub(crate) async fn flush(&self) {
        if let Some(logs) = &self.logs {
            logs.flush().await;
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        lock(&self.hub.inflight).retain(|i| i.seq != self.seq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{NumberOrString, ServerCapabilities, ServerConfig};
    use rmcp::service::{NotificationContext, RunningService};
    use rmcp::{ClientHandler, ServerHandler, ServiceExt};
    use std::time::Duration;
    use tokio::time::Instant;

    struct Quiet;
    impl ServerHandler for Quiet {
        fn get_info(&self) -> ServerConfig {
            ServerConfig::new(ServerCapabilities::default())
        }
    }

    #[derive(Clone, Default)]
    struct Seen(Arc<Mutex<Vec<ProgressNotificationParam>>>);
    impl ClientHandler for Seen {
        async fn on_progress(
            &self,
            params: ProgressNotificationParam,
            _context: NotificationContext<RoleClient>,
        ) {
            lock(&self.0).push(params);
        }
    }

    /// An agent's server-side peer, and what its client receives.
    async fn agent() -> (
        RunningService<RoleServer, Quiet>,
        RunningService<RoleClient, Seen>,
        Seen,
    ) {
        let (a, b) = tokio::io::duplex(1 << 16);
        let server = tokio::spawn(async move { Quiet.serve(b).await.unwrap() });
        let seen = Seen::default();
        let client = seen.clone().serve(a).await.unwrap();
        (server.await.unwrap(), client, seen)
    }

    fn progress(token: i64, p: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), p)
    }

    #[tokio::test]
    async fn early_progress_is_kept_until_its_call_is_registered() {
        let (server, _client, seen) = agent().await;
        let hub = Hub::new();
        let upstream = ProgressToken(NumberOrString::Number(7));
        // The bot's progress overtakes the registration of its call.
        hub.on_progress(0, progress(7, 1.0));
        hub.on_progress(0, progress(7, 2.0));
        hub.on_progress(0, progress(8, 9.0)); // another call's, never registered
        let agent_token = ProgressToken(NumberOrString::String("agent".into()));
        let route = hub.route_progress(
            0,
            upstream.clone(),
            server.peer().clone(),
            agent_token.clone(),
        );
        hub.on_progress(0, progress(7, 3.0));
        hub.finish_progress(0, &upstream, &route).await;
        hub.drop_progress(0, &ProgressToken(NumberOrString::Number(8)));
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&seen.0).len() < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let seen = lock(&seen.0).clone();
        let values: Vec<f64> = seen.iter().map(|p| p.progress).collect();
        assert_eq!(values, vec![1.0, 2.0, 3.0], "in order, none lost");
        assert!(seen.iter().all(|p| p.progress_token == agent_token));
        let state = lock(&hub.progress);
        assert!(state.routes.is_empty() && state.early.is_empty());
    }

    #[test]
    fn early_progress_is_bounded() {
        let hub = Hub::new();
        for token in 0..(EARLY_TOKENS as i64 + 10) {
            for i in 0..(EARLY_PER_TOKEN + 5) {
                hub.on_progress(0, progress(token, i as f64));
            }
        }
        let lens = lock(&hub.progress).early.lens();
        assert_eq!(lens.len(), EARLY_TOKENS);
        assert!(lens.values().all(|&n| n == EARLY_PER_TOKEN));
        // The oldest tokens went first.
        assert!(!lens.contains_key(&early_key(0, &ProgressToken(NumberOrString::Number(0)))));
    }

    /// Waits until `seen` has `n` notifications and returns their values.
    async fn values(seen: &Seen, n: usize) -> Vec<f64> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&seen.0).len() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        lock(&seen.0).iter().map(|p| p.progress).collect()
    }

    #[tokio::test]
    async fn connections_of_a_link_keep_their_progress_apart() {
        let (server_a, _client_a, seen_a) = agent().await;
        let (server_c, _client_c, seen_c) = agent().await;
        let hub = Hub::new();
        let (old, new) = (hub.next_serial(), hub.next_serial());
        // Both connections drew upstream token 2: A's call on the old one, C's on the new.
        let upstream = ProgressToken(NumberOrString::Number(2));
        let token = |s: &str| ProgressToken(NumberOrString::String(s.into()));
        let a = hub.route_progress(old, upstream.clone(), server_a.peer().clone(), token("a"));
        // Early progress of the new connection is its own.
        hub.on_progress(new, progress(2, 10.0));
        let c = hub.route_progress(new, upstream.clone(), server_c.peer().clone(), token("c"));
        hub.on_progress(old, progress(2, 1.0));
        hub.on_progress(new, progress(2, 11.0));
        hub.finish_progress(new, &upstream, &c).await;
        // C is done; A's progress still reaches A.
        hub.on_progress(old, progress(2, 2.0));
        hub.finish_progress(old, &upstream, &a).await;
        assert_eq!(
            values(&seen_a, 2).await,
            vec![1.0, 2.0],
            "A gets all its own"
        );
        assert_eq!(
            values(&seen_c, 2).await,
            vec![10.0, 11.0],
            "C gets only its own"
        );
        let state = lock(&hub.progress);
        assert!(state.routes.is_empty() && state.early.is_empty());
    }
}
