//! One connection to an upstream MCP server, as its client: started from the
//! [`Endpoint`] (a child process or a streamable-HTTP URL), with its progress taken off
//! the transport in arrival order (so all of a call's progress is relayed before its
//! answer) and its list changes signalled to the supervisor.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, JsonObject, ProgressToken,
    ServerJsonRpcMessage, ServerNotification, ServerResult,
};
use rmcp::service::{
    NotificationContext, PeerRequestOptions, RoleClient, RunningService, RxJsonRpcMessage,
    TxJsonRpcMessage,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess, Transport};
use rmcp::{ClientHandler, Peer, ServiceExt};
use tokio::sync::{Notify, mpsc};

use super::config::Endpoint;
use crate::early_progress::EarlyProgress;
use crate::server::{CallContext, ToolError};

/// How long a forwarded call may go without an answer or progress: an upstream that
/// hangs must not hold the caller (and the charge) forever.
pub const CALL_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest a forwarded call may take in all, progress or not.
pub const CALL_MAX_TIMEOUT: Duration = Duration::from_secs(3600);

/// Upstream progress tokens whose progress arrived before their call was registered,
/// kept at once; the oldest go first.
const EARLY_TOKENS: usize = 64;

/// Early progress notifications kept per token.
const EARLY_PER_TOKEN: usize = 16;

/// Progress notifications of one call queued for a caller who reads slower than the
/// upstream sends: the rest are dropped (progress is advisory), not held without end.
const QUEUED_PER_CALL: usize = 64;

/// A live connection to an upstream.
pub(crate) struct Connection {
    /// The service; dropping it closes the connection (and kills a child process).
    pub(crate) running: RunningService<RoleClient, Handler>,
    /// Signalled when the upstream says its tools, resources or prompts changed.
    pub(crate) changed: Arc<Notify>,
    /// The child's process id, for a command upstream.
    pub(crate) pid: Option<u32>,
}

/// What a forwarded call needs of its connection. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Link {
    peer: Peer<RoleClient>,
    routes: Arc<Routes>,
    upstream: Arc<str>,
}

/// Opens a connection and completes the MCP handshake.
pub(crate) async fn connect(name: &str, endpoint: &Endpoint) -> Result<(Connection, Link), String> {
    let routes = Arc::new(Routes::default());
    let changed = Arc::new(Notify::new());
    let handler = Handler {
        changed: changed.clone(),
    };
    let (running, pid) = match endpoint {
        Endpoint::Command {
            command,
            args,
            env,
            cwd,
        } => {
            let mut cmd = tokio::process::Command::new(command);
            cmd.args(args).envs(env).kill_on_drop(true);
            if let Some(cwd) = cwd {
                cmd.current_dir(cwd);
            }
            let mut cmd = process_wrap::tokio::CommandWrap::from(cmd);
            // Its own group: killing it (restart, stop) ends what it started too.
            #[cfg(unix)]
            cmd.wrap(process_wrap::tokio::ProcessGroup::leader());
            let (child, _) = TokioChildProcess::builder(cmd)
                .stderr(std::process::Stdio::inherit())
                .spawn()
                .map_err(|e| format!("cannot start {command:?}: {e}"))?;
            let pid = child.id();
            let tap = Tap {
                inner: child,
                routes: routes.clone(),
            };
            let running = handler.serve(tap).await.map_err(|e| e.to_string())?;
            (running, pid)
        }
        Endpoint::Url {
            url,
            headers,
            bearer_env,
        } => {
            let mut config = StreamableHttpClientTransportConfig::with_uri(url.clone());
            if let Some(var) = bearer_env {
                let token = std::env::var(var)
                    .map_err(|_| format!("the bearer token variable {var} is not set"))?;
                config = config.auth_header(token);
            }
            for (key, value) in headers {
                let key = axum::http::HeaderName::try_from(key.as_str())
                    .map_err(|e| format!("header {key:?}: {e}"))?;
                let value = axum::http::HeaderValue::try_from(value.as_str())
                    .map_err(|e| format!("header {key}: {e}"))?;
                config.custom_headers.insert(key, value);
            }
            let tap = Tap {
                inner: StreamableHttpClientTransport::from_config(config),
                routes: routes.clone(),
            };
            let running = handler.serve(tap).await.map_err(|e| e.to_string())?;
            (running, None)
        }
    };
    let link = Link {
        peer: running.peer().clone(),
        routes,
        upstream: name.into(),
    };
    Ok((
        Connection {
            running,
            changed,
            pid,
        },
        link,
    ))
}

impl Link {
    /// The upstream's peer, for listing.
    pub(crate) fn peer(&self) -> &Peer<RoleClient> {
        &self.peer
    }

    /// Calls the upstream's tool `name` for `call`: the caller's progress is relayed
    /// (all of it before the answer), the caller's cancellation is passed on, and an
    /// upstream error, failure or timeout is an error (so the charge is refunded).
    pub(crate) async fn call(
        &self,
        name: &str,
        args: JsonObject,
        call: &CallContext,
    ) -> Result<CallToolResult, ToolError> {
        let failed =
            |e: &dyn std::fmt::Display| ToolError::new(format!("upstream {}: {e}", self.upstream));
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(
            CallToolRequestParams::new(name.to_owned()).with_arguments(args),
        ));
        let options = PeerRequestOptions::with_timeout(CALL_IDLE_TIMEOUT)
            .reset_timeout_on_progress()
            .with_max_total_timeout(CALL_MAX_TIMEOUT);
        let handle = self
            .peer
            .send_request_with_option(request, options)
            .await
            .map_err(|e| failed(&e))?;
        let (id, token) = (handle.id.clone(), handle.progress_token.clone());
        let relay = self.routes.route(
            token.clone(),
            call.peer().clone(),
            call.request().meta.get_progress_token(),
        );
        let ct = call.request().ct.clone();
        let response = handle.await_response();
        tokio::pin!(response);
        let mut cancelled = false;
        let answer = tokio::select! {
            answer = &mut response => answer,
            () = ct.cancelled() => {
                cancelled = true;
                // Sending the cancellation also ends the pending request here, so the
                // response future finishes (and cleans up) promptly.
                let cancel = CancelledNotificationParam::new(
                    Some(id),
                    Some("cancelled by the caller".into()),
                );
                let _ = self.peer.notify_cancelled(cancel).await;
                response.await
            }
        };
        self.routes.finish(&token);
        let _ = relay.await;
        match answer {
            Err(_) if cancelled => Err(ToolError::new("cancelled")),
            Err(e) => Err(failed(&e)),
            Ok(ServerResult::CallToolResult(result)) if result.is_error == Some(true) => {
                let text: Vec<&str> = result
                    .content
                    .iter()
                    .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
                    .collect();
                Err(ToolError::new(if text.is_empty() {
                    format!("upstream {}: the tool failed", self.upstream)
                } else {
                    text.join(" ")
                }))
            }
            // An answer that beat the cancellation stands: the work was done.
            Ok(ServerResult::CallToolResult(result)) => Ok(result),
            Ok(_) => Err(failed(&"unexpected answer to tools/call")),
        }
    }
}

/// The client side toward an upstream: signals its list changes.
#[derive(Clone)]
pub(crate) struct Handler {
    changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("brmcp-serve", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    async fn on_resource_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }

    async fn on_prompt_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changed.notify_one();
    }
}

/// Where each upstream progress token's notifications go.
struct Routes(Mutex<RoutesInner>);

impl Default for Routes {
    fn default() -> Self {
        Self(Mutex::new(RoutesInner {
            routes: HashMap::new(),
            early: EarlyProgress::new(EARLY_TOKENS, EARLY_PER_TOKEN),
        }))
    }
}

struct RoutesInner {
    routes: HashMap<ProgressToken, mpsc::Sender<rmcp::model::ProgressNotificationParam>>,
    early: EarlyProgress,
}

impl Routes {
    fn lock(&self) -> std::sync::MutexGuard<'_, RoutesInner> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Relays `upstream`'s progress to the caller's `token` (dropped without one) until
    /// [`finish`](Self::finish); the task ends once all of it is sent.
    fn route(
        &self,
        upstream: ProgressToken,
        caller: Peer<rmcp::RoleServer>,
        token: Option<ProgressToken>,
    ) -> tokio::task::JoinHandle<()> {
        let (tx, mut rx) = mpsc::channel(QUEUED_PER_CALL);
        let mut inner = self.lock();
        for params in inner.early.take(&upstream) {
            let _ = tx.try_send(params);
        }
        inner.routes.insert(upstream, tx);
        drop(inner);
        tokio::spawn(async move {
            while let Some(mut params) = rx.recv().await {
                let Some(token) = &token else { continue };
                params.progress_token = token.clone();
                if let Err(e) = caller.notify_progress(params).await {
                    tracing::debug!(error = %e, "progress not relayed");
                }
            }
        })
    }

    fn finish(&self, upstream: &ProgressToken) {
        let mut inner = self.lock();
        inner.routes.remove(upstream);
        inner.early.take(upstream);
    }

    /// Called by the tap, in arrival order.
    fn dispatch(&self, params: rmcp::model::ProgressNotificationParam) {
        let mut inner = self.lock();
        if let Some(tx) = inner.routes.get(&params.progress_token) {
            if tx.try_send(params).is_err() {
                tracing::debug!("progress dropped: the caller is behind");
            }
            return;
        }
        inner.early.push(params);
    }
}

/// An upstream transport with progress taken off in arrival order.
struct Tap<T> {
    inner: T,
    routes: Arc<Routes>,
}

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
            if let rmcp::model::JsonRpcMessage::Notification(n) = &message
                && let ServerNotification::ProgressNotification(p) = &n.notification
            {
                self.routes.dispatch(p.params.clone());
                continue;
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{NumberOrString, ProgressNotificationParam};

    #[test]
    fn early_progress_is_bounded() {
        let routes = Routes::default();
        for token in 0..(EARLY_TOKENS as i64 + 10) {
            for i in 0..(EARLY_PER_TOKEN + 5) {
                routes.dispatch(ProgressNotificationParam::new(
                    ProgressToken(NumberOrString::Number(token)),
                    i as f64,
                ));
            }
        }
        let lens = routes.lock().early.lens();
        assert_eq!(lens.len(), EARLY_TOKENS);
        assert!(lens.values().all(|&n| n == EARLY_PER_TOKEN));
        assert!(!lens.contains_key(&ProgressToken(NumberOrString::Number(0))));
    }
}
