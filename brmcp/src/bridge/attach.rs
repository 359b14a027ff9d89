//! An agent on stdio served through the bridge of its data directory: a message pump
//! between the agent's transport (the server role toward it) and the bridge's
//! streamable HTTP endpoint (the client role toward it). Both carry the same
//! messages, so requests, responses and notifications pass as they are, in order,
//! both ways, the bridge's requests to the agent (elicitation) included.
//!
//! When the bridge goes away, the agent's requests in flight are answered with an
//! error saying so, and the pump asks its [`Upstream`] for a bridge again (another
//! process's, or one it starts); to a new bridge it replays the agent's `initialize`
//! and `notifications/initialized`, so the agent's session goes on. Without one the
//! pump ends with the reason.

use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ClientRequest, ErrorData, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::service::{RoleClient, RoleServer, TxJsonRpcMessage};
use rmcp::transport::Transport;

/// Messages queued toward one side at most; while full, the pump reads nothing more
/// from the other, so a side that does not read cannot make it hold without bound.
const MAX_QUEUED: usize = 64;

/// How often the pump looks whether the bridge it uses still runs: 1 s, a cheap
/// look at the data directory's lock.
const ALIVE_POLL: Duration = Duration::from_secs(1);

/// How long a new bridge may take to answer the replayed `initialize`: 60 s, room for
/// a loaded machine (it answers from memory, without the bot).
const REPLAY_TIMEOUT: Duration = Duration::from_secs(60);

/// How long closing a gone bridge's transport may take before it is dropped.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the agent's requests in flight are answered with when the bridge goes away.
pub const BRIDGE_GONE: &str = "the bridge went away before answering; the request may \
                               or may not have run (see `brmcp bridge spend`); retry it";

/// Where the pump finds a bridge.
pub trait Upstream: Send {
    /// The transport to a bridge.
    type Transport: Transport<RoleClient> + Send;

    /// A transport to the bridge to use now: attached to the running one, or to one
    /// started for it. An error ends the pump with it.
    fn connect(&mut self) -> impl Future<Output = Result<Self::Transport, String>> + Send;

    /// Whether the bridge [`connect`](Self::connect) last gave still runs.
    fn alive(&mut self) -> bool;
}

impl<U: Upstream> Upstream for &mut U {
    type Transport = U::Transport;

    fn connect(&mut self) -> impl Future<Output = Result<Self::Transport, String>> + Send {
        (**self).connect()
    }

    fn alive(&mut self) -> bool {
        (**self).alive()
    }
}

/// Messages toward one side, sent one at a time in order (a transport's send future
/// does its work when polled, so two at once could overtake each other).
struct Outbox<M> {
    queue: VecDeque<(Option<RequestId>, M)>,
    current: Option<(Option<RequestId>, Sending)>,
}

/// A send under way.
type Sending = BoxFuture<'static, Result<(), String>>;

impl<M> Outbox<M> {
    fn new() -> Self {
        Self {
            queue: VecDeque::new(),
            current: None,
        }
    }

    fn push(&mut self, id: Option<RequestId>, message: M) {
        self.queue.push_back((id, message));
    }

    fn full(&self) -> bool {
        self.queue.len() >= MAX_QUEUED
    }

    fn clear(&mut self) {
        self.queue.clear();
        self.current = None;
    }

    /// Starts the next send when none runs.
    fn start<R, T>(&mut self, transport: &mut T)
    where
        R: rmcp::service::ServiceRole,
        T: Transport<R>,
        M: Into<TxJsonRpcMessage<R>>,
    {
        if self.current.is_none()
            && let Some((id, message)) = self.queue.pop_front()
        {
            let sending = transport.send(message.into());
            self.current = Some((id, sending.map(|r| r.map_err(|e| e.to_string())).boxed()));
        }
    }

    /// The current send's outcome, with the id of the request it carried.
    async fn sent(&mut self) -> (Option<RequestId>, Result<(), String>) {
        let Some((_, sending)) = &mut self.current else {
            return std::future::pending().await;
        };
        let result = sending.await;
        let id = self.current.take().and_then(|(id, _)| id);
        (id, result)
    }

    /// Sends everything queued, for the last words to a side.
    async fn flush<R, T>(&mut self, transport: &mut T) -> Result<(), String>
    where
        R: rmcp::service::ServiceRole,
        T: Transport<R>,
        M: Into<TxJsonRpcMessage<R>>,
    {
        loop {
            self.start(transport);
            if self.current.is_none() {
                return Ok(());
            }
            self.sent().await.1?;
        }
    }
}

fn request_id(message: &ClientJsonRpcMessage) -> Option<RequestId> {
    match message {
        JsonRpcMessage::Request(request) => Some(request.id.clone()),
        _ => None,
    }
}

fn answer_of(message: &ServerJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(response) => Some(&response.id),
        JsonRpcMessage::Error(error) => error.id.as_ref(),
        _ => None,
    }
}

fn error_to(id: RequestId, message: String) -> ServerJsonRpcMessage {
    ServerJsonRpcMessage::error(ErrorData::internal_error(message, None), Some(id))
}

/// What the agent said to open its session, replayed to a new bridge.
#[derive(Default)]
struct Opening {
    initialize: Option<ClientJsonRpcMessage>,
    initialized: Option<ClientJsonRpcMessage>,
}

impl Opening {
    fn note(&mut self, message: &ClientJsonRpcMessage) {
        match message {
            JsonRpcMessage::Request(r)
                if matches!(r.request, ClientRequest::InitializeRequest(_)) =>
            {
                self.initialize = Some(message.clone());
            }
            JsonRpcMessage::Notification(n)
                if matches!(
                    n.notification,
                    ClientNotification::InitializedNotification(_)
                ) =>
            {
                self.initialized = Some(message.clone());
            }
            _ => {}
        }
    }

    /// Opens the agent's session again on `bridge`; the answer is the agent's already.
    async fn replay<B: Transport<RoleClient>>(&self, bridge: &mut B) -> Result<(), String> {
        let (Some(initialize), Some(initialized)) = (&self.initialize, &self.initialized) else {
            return Err("the bridge went away before the agent's session was open".into());
        };
        let id = request_id(initialize);
        let opened = async {
            bridge
                .send(initialize.clone())
                .await
                .map_err(|e| e.to_string())?;
            loop {
                match bridge.receive().await {
                    Some(JsonRpcMessage::Response(r)) if Some(&r.id) == id.as_ref() => break,
                    Some(JsonRpcMessage::Error(e)) if e.id == id => {
                        return Err(format!("initialize: {}", e.error.message));
                    }
                    Some(_) => {}
                    None => return Err("the new bridge closed".to_owned()),
                }
            }
            bridge
                .send(initialized.clone())
                .await
                .map_err(|e| e.to_string())
        };
        tokio::time::timeout(REPLAY_TIMEOUT, opened)
            .await
            .map_err(|_| format!("the new bridge did not answer within {REPLAY_TIMEOUT:?}"))?
    }
}

enum Event {
    FromAgent(Option<ClientJsonRpcMessage>),
    FromBridge(Option<ServerJsonRpcMessage>),
    BridgeSent(Option<RequestId>, Result<(), String>),
    AgentSent(Result<(), String>),
    Tick,
}

/// Pumps messages between `agent` and the bridges `upstream` gives until the agent
/// leaves (`Ok`) or no bridge can be had (`Err` with the reason, after the agent's
/// requests in flight were answered).
///
/// # Errors
/// The reason no bridge can be had, or the agent's transport failed.
pub async fn pump<A, U>(agent: A, mut upstream: U) -> Result<(), String>
where
    A: Transport<RoleServer>,
    U: Upstream,
{
    let mut agent = agent;
    let mut bridge = upstream.connect().await?;
    let mut to_agent: Outbox<ServerJsonRpcMessage> = Outbox::new();
    let mut to_bridge: Outbox<ClientJsonRpcMessage> = Outbox::new();
    let mut in_flight: HashSet<RequestId> = HashSet::new();
    let mut opening = Opening::default();
    let mut tick = tokio::time::interval(ALIVE_POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        to_agent.start(&mut agent);
        to_bridge.start(&mut bridge);
        let event = tokio::select! {
            m = agent.receive(), if !to_bridge.full() => Event::FromAgent(m),
            m = bridge.receive(), if !to_agent.full() => Event::FromBridge(m),
            (id, r) = to_bridge.sent() => Event::BridgeSent(id, r),
            (_, r) = to_agent.sent() => Event::AgentSent(r),
            _ = tick.tick() => Event::Tick,
        };
        let lost = match event {
            Event::FromAgent(None) => {
                let _ = to_bridge.flush(&mut bridge).await;
                let _ = tokio::time::timeout(CLOSE_TIMEOUT, bridge.close()).await;
                return Ok(());
            }
            Event::FromAgent(Some(message)) => {
                opening.note(&message);
                let id = request_id(&message);
                if let Some(id) = &id {
                    in_flight.insert(id.clone());
                }
                to_bridge.push(id, message);
                false
            }
            Event::FromBridge(None) => true,
            Event::FromBridge(Some(message)) => {
                if let Some(id) = answer_of(&message) {
                    in_flight.remove(id);
                }
                to_agent.push(None, message);
                false
            }
            Event::BridgeSent(id, Err(e)) => {
                tracing::debug!(error = %e, "not delivered to the bridge");
                let lost = !upstream.alive();
                if let Some(id) = id
                    && !lost
                    && in_flight.remove(&id)
                {
                    to_agent.push(None, error_to(id, format!("bridge: {e}")));
                }
                lost
            }
            Event::BridgeSent(_, Ok(())) | Event::AgentSent(Ok(())) => false,
            Event::AgentSent(Err(e)) => return Err(format!("agent: {e}")),
            Event::Tick => !upstream.alive(),
        };
        if lost {
            tracing::warn!("the bridge went away");
            for id in in_flight.drain() {
                to_agent.push(None, error_to(id, BRIDGE_GONE.to_owned()));
            }
            to_bridge.clear();
            to_agent.flush(&mut agent).await?;
            let _ = tokio::time::timeout(CLOSE_TIMEOUT, bridge.close()).await;
            bridge = upstream.connect().await?;
            opening.replay(&mut bridge).await?;
            tracing::info!("the agent's session goes on through another bridge");
        }
    }
}
