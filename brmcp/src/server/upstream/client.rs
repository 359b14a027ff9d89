//! One connection to an upstream MCP server, as its client: started from the
//! [`Endpoint`] (a child process or a streamable-HTTP URL), with each message bounded
//! to what a caller can be sent, its progress taken off the transport in arrival order
//! (see [`progress`](super::progress)) and its list changes signalled to the
//! supervisor. A forwarded call ends at its answer, its caller's cancellation, the
//! idle timeout (reset by each progress) or the overall cap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, JsonObject,
    ServerJsonRpcMessage, ServerNotification, ServerResult,
};
use rmcp::service::{
    ClientInitializeError, NotificationContext, PeerRequestOptions, RoleClient, RunningService,
    RxJsonRpcMessage, TxJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::{ClientHandler, Peer, ServiceError, ServiceExt};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::child::{self, Fault, Spawn};
use super::config::Endpoint;
use super::limits::{PRICE_TIMEOUT, UpstreamLimits};
use super::progress::Routes;
use crate::server::{CallContext, ToolError};
use brmcp_adapters::protocol::result_text;

/// A live connection to an upstream.
pub(crate) struct Connection {
    /// The service; dropping it closes the connection (and kills a child process).
    pub(crate) running: RunningService<RoleClient, Handler>,
    /// What the upstream said changed since the supervisor last looked.
    pub(crate) changes: Arc<Changes>,
    /// The child's process id, for a command upstream.
    pub(crate) pid: Option<u32>,
}

/// A forwarded call's bounds.
#[derive(Debug, Clone, Copy)]
struct CallLimits {
    idle: std::time::Duration,
    max: std::time::Duration,
    progress_interval: std::time::Duration,
}

/// What a forwarded call needs of its connection. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Link {
    peer: Peer<RoleClient>,
    routes: Arc<Routes>,
    upstream: Arc<str>,
    limits: CallLimits,
    /// Why our side ended the connection, if it did.
    fault: Fault,
    /// Cancelled when a call found the connection gone (an HTTP upstream that stopped
    /// answering): the supervisor then reconnects and shows it down meanwhile, instead
    /// of keeping a connection that only fails.
    lost: CancellationToken,
}

/// Opens a connection and completes the MCP handshake.
pub(crate) async fn connect(
    name: &str,
    endpoint: &Endpoint,
    limits: &UpstreamLimits,
) -> Result<(Connection, Link), String> {
    let routes = Arc::new(Routes::default());
    let changes = Arc::new(Changes::default());
    let handler = Handler {
        changes: changes.clone(),
    };
    let (running, pid, fault) = match endpoint {
        Endpoint::Command {
            command,
            args,
            env,
            pass_env,
            cwd,
        } => {
            let (child, pid, fault) = child::spawn(&Spawn {
                command,
                args,
                env,
                pass_env,
                cwd: cwd.as_ref(),
                max_line: limits.max_message_bytes,
            })?;
            let tap = Tap {
                inner: child,
                routes: routes.clone(),
            };
            let running = handler.serve(tap).await.map_err(|e| describe_init(&e))?;
            (running, pid, fault)
        }
        Endpoint::Url {
            url,
            headers,
            bearer_env,
        } => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
            config.max_json_response_size = limits.max_message_bytes;
            config.max_sse_event_size = limits.max_message_bytes;
            if let Some(var) = bearer_env {
                let token = std::env::var(var)
                    .map_err(|_| format!("the bearer token variable {var} is not set"))?;
                config = config.auth_header(token);
            }
            for (key, value) in headers {
                let key = reqwest::header::HeaderName::try_from(key.as_str())
                    .map_err(|e| format!("header {key:?}: {e}"))?;
                let value = reqwest::header::HeaderValue::try_from(value.as_str())
                    .map_err(|e| format!("header {key}: {e}"))?;
                config.custom_headers.insert(key, value);
            }
            let tap = Tap {
                inner: StreamableHttpClientTransport::from_config(config),
                routes: routes.clone(),
            };
            let running = handler.serve(tap).await.map_err(|e| describe_init(&e))?;
            (running, None, Fault::default())
        }
    };
    let link = Link {
        peer: running.peer().clone(),
        routes,
        upstream: name.into(),
        limits: CallLimits {
            idle: limits.call_idle_timeout,
            max: limits.call_max_timeout,
            progress_interval: limits.progress_interval,
        },
        fault,
        lost: CancellationToken::new(),
    };
    Ok((
        Connection {
            running,
            changes,
            pid,
        },
        link,
    ))
}

/// What an rmcp failure means for an operator reading it: the transport's own cause
/// (`connection refused` and the like), not rmcp's wrapper, which names only Rust types.
fn describe(e: &ServiceError) -> String {
    match e {
        ServiceError::TransportSend(_) => format!("cannot reach it: {}", innermost(e)),
        ServiceError::TransportClosed => "its connection closed".to_owned(),
        other => other.to_string(),
    }
}

/// [`describe`] for a failed handshake.
fn describe_init(e: &ClientInitializeError) -> String {
    format!("initialize failed: {}", innermost(e))
}

/// The last message of `e`'s chain of causes that is not one of rmcp's transport
/// wrappers (`Transport [<type>]`, `Transport send error: ...`).
fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut best = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.starts_with("Transport [") {
            best = text;
        }
        next = cause.source();
    }
    best
}

/// How a forwarded call ended, short of an answer.
enum Ended {
    Cancelled,
    Idle,
    TooLong,
}

impl Link {
    /// The upstream's peer, for listing.
    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// Why our side closed the connection (a message over the bound), or why a call
    /// found it gone, if either happened.
    pub(crate) fn fault(&self) -> Option<&str> {
        self.fault.get().map(String::as_str)
    }

    /// Resolves once a call found the connection gone (see [`fault`](Self::fault)).
    pub(crate) async fn lost(&self) {
        self.lost.cancelled().await;
    }

    /// Records that the connection is gone (`why`) and tells the supervisor, when `e`
    /// says so: a transport failure, not an answer.
    fn note_lost(&self, e: &ServiceError) {
        if matches!(
            e,
            ServiceError::TransportSend(_) | ServiceError::TransportClosed
        ) {
            let _ = self.fault.set(describe(e));
            self.lost.cancel();
        }
    }

    /// Calls the upstream's tool `name` for `call`: the caller's progress is relayed
    /// (coalesced, none after the answer), the caller's cancellation is passed on, and
    /// an upstream error, failure or timeout is an error (so the charge is refunded).
    pub(crate) async fn call(
        &self,
        name: &str,
        args: JsonObject,
        call: &CallContext,
    ) -> Result<CallToolResult, ToolError> {
        let upstream = &self.upstream;
        let failed = |e: &ServiceError| {
            self.note_lost(e);
            match self.fault() {
                Some(fault) => ToolError::new(format!("upstream {upstream}: {fault}")),
                None => ToolError::new(format!("upstream {upstream}: {}", describe(e))),
            }
        };
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(name.to_owned()).with_arguments(args),
        ));
        // No timeout of rmcp's: it never sees the progress (the tap takes it), so the
        // idle timeout is kept here, where each progress resets it.
        let handle = self
            .peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| failed(&e))?;
        let (id, token) = (handle.id.clone(), handle.progress_token.clone());
        let (route, relay) = self.routes.route(
            token.clone(),
            call.peer().clone(),
            call.request().meta.get_progress_token(),
            self.limits.progress_interval,
        );
        let ct = call.request().ct.clone();
        let response = handle.await_response();
        tokio::pin!(response);
        let idle = tokio::time::sleep(self.limits.idle);
        tokio::pin!(idle);
        let overall = tokio::time::sleep(self.limits.max);
        tokio::pin!(overall);
        let mut ended = None;
        let answer = loop {
            let why = tokio::select! {
                answer = &mut response => break answer,
                () = route.progressed() => {
                    idle.as_mut().reset(tokio::time::Instant::now() + self.limits.idle);
                    continue;
                }
                () = ct.cancelled() => Ended::Cancelled,
                () = &mut idle => Ended::Idle,
                () = &mut overall => Ended::TooLong,
            };
            let reason = match why {
                Ended::Cancelled => "cancelled by the caller",
                Ended::Idle | Ended::TooLong => "timed out",
            };
            ended = Some(why);
            // Sending the cancellation also ends the pending request here, so the
            // response future finishes (and cleans up) promptly.
            let cancel = CancelledNotificationParam::new(Some(id), Some(reason.into()));
            let _ = self.peer.notify_cancelled(cancel).await;
            break response.await;
        };
        self.routes.finish(&token);
        let _ = relay.await;
        let secs = |d: std::time::Duration| d.as_secs();
        match (answer, ended) {
            // An answer that beat the cancellation or timeout stands: the work was done.
            (Ok(ServerResult::CallToolResult(result)), _) if result.is_error != Some(true) => {
                Ok(result)
            }
            (Ok(ServerResult::CallToolResult(result)), _) => {
                let text = result_text(&result);
                Err(ToolError::new(if text.is_empty() {
                    format!("upstream {upstream}: the tool failed")
                } else {
                    text
                }))
            }
            (Err(_), Some(Ended::Cancelled)) => Err(ToolError::new("cancelled")),
            (Err(_), Some(Ended::Idle)) => Err(ToolError::new(format!(
                "upstream {upstream}: no answer or progress in {} s",
                secs(self.limits.idle)
            ))),
            (Err(_), Some(Ended::TooLong)) => Err(ToolError::new(format!(
                "upstream {upstream}: no answer in {} s",
                secs(self.limits.max)
            ))),
            (Err(e), None) => Err(failed(&e)),
            (Ok(_), _) => Err(ToolError::new(format!(
                "upstream {upstream}: unexpected answer to tools/call"
            ))),
        }
    }
}

impl Link {
    /// Calls the upstream's tool `name` for a price (a companion tool): free, with no
    /// progress relayed, bounded by [`PRICE_TIMEOUT`]. The answer, or why none came.
    pub(crate) async fn price(
        &self,
        name: &str,
        args: JsonObject,
    ) -> Result<CallToolResult, String> {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(name.to_owned()).with_arguments(args),
        ));
        match tokio::time::timeout(PRICE_TIMEOUT, self.peer.send_request(request)).await {
            Err(_) => Err(format!("no answer in {} s", PRICE_TIMEOUT.as_secs())),
            Ok(Err(e)) => {
                self.note_lost(&e);
                Err(self.fault().map_or_else(|| describe(&e), str::to_owned))
            }
            Ok(Ok(ServerResult::CallToolResult(result))) => Ok(result),
            Ok(Ok(_)) => Err("unexpected answer to tools/call".to_owned()),
        }
    }
}

/// What an upstream said changed, taken by the supervisor.
#[derive(Default)]
pub(crate) struct Changes {
    tools: AtomicBool,
    catalog: AtomicBool,
    /// Signalled on each change.
    pub(crate) notify: Notify,
}

impl Changes {
    /// Whether its tools, and its resources or prompts, changed since the last take.
    pub(crate) fn take(&self) -> (bool, bool) {
        (
            self.tools.swap(false, Ordering::SeqCst),
            self.catalog.swap(false, Ordering::SeqCst),
        )
    }

    fn set(&self, flag: &AtomicBool) {
        flag.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

/// The client side toward an upstream: signals its list changes.
#[derive(Clone)]
pub(crate) struct Handler {
    changes: Arc<Changes>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("brmcp-serve", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.set(&self.changes.tools);
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.set(&self.changes.catalog);
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.set(&self.changes.catalog);
    }
}

/// An upstream transport with progress taken off in arrival order.
pub(crate) struct Tap<T> {
    pub(crate) inner: T,
    pub(crate) routes: Arc<Routes>,
}

/// The method of a progress notification.
pub(crate) const PROGRESS_METHOD: &str = "notifications/progress";

impl<T: Transport<RoleClient>> Transport<RoleClient> for Tap<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            let message: ServerJsonRpcMessage = self.inner.receive().await?;
            if let rmcp::model::JsonRpcMessage::Notification(n) = &message {
                match &n.notification {
                    ServerNotification::ProgressNotification(p) => {
                        self.routes.dispatch(p.params.clone());
                        continue;
                    }
                    // Progress that did not read as progress (a duplicate or malformed
                    // field) routes to no call; passed on, written back it would read
                    // as progress under the upstream's own token.
                    ServerNotification::CustomNotification(c) if c.method == PROGRESS_METHOD => {
                        continue;
                    }
                    _ => {}
                }
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}
