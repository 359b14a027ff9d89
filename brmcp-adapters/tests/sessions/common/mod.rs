//! Shared rmcp handlers and helpers for the adapter's integration tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod client_parking;
pub mod raw;

pub use brmcp_test_support::go_router;
pub use brmcp_test_support::{call, text};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use brmcp_adapters::{PeerId, Router};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    ProgressNotificationParam, ProtocolVersion, RequestMetaObject, ServerCapabilities, ServerConfig,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::{
    ClientLifecycleMode, ClientServiceExt, ErrorData, Peer, RoleClient, RoleServer, ServerHandler,
    ServiceExt, schemars, tool, tool_handler, tool_router,
};
use tokio::sync::Notify;

/// Handlers alive for a probe served with [`serve`]: the probe is held by the test,
/// the router's factory and each handler.
pub fn handlers(probe: &Arc<Probe>) -> usize {
    Arc::strong_count(probe) - 2
}

/// What the test server saw, for assertions.
#[derive(Debug, Default)]
pub struct Probe {
    /// Tool calls that ran.
    pub calls: AtomicUsize,
    /// `wait` calls that saw their cancellation token fire.
    pub cancelled: AtomicUsize,
    /// Signalled when a `wait` call starts.
    pub started: Notify,
    /// Signalled when a `wait` call is cancelled.
    pub cancel_seen: Notify,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    pub text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct BigArgs {
    pub len: usize,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct SleepArgs {
    pub secs: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct StepsArgs {
    pub steps: u32,
}

/// The text `big` returns for `len`: a recognizable pattern, so corruption shows.
pub fn pattern(len: usize) -> String {
    (0..len)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect()
}

#[derive(Debug, Clone)]
pub struct TestServer {
    tool_router: ToolRouter<Self>,
    probe: Arc<Probe>,
}

impl TestServer {
    pub fn new(probe: Arc<Probe>) -> Self {
        Self {
            tool_router: Self::tool_router(),
            probe,
        }
    }
}

#[tool_router]
impl TestServer {
    #[tool(description = "Echo the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        self.probe.calls.fetch_add(1, Ordering::SeqCst);
        text
    }

    #[tool(description = "Return a text of the given length")]
    fn big(&self, Parameters(BigArgs { len }): Parameters<BigArgs>) -> String {
        self.probe.calls.fetch_add(1, Ordering::SeqCst);
        pattern(len)
    }

    #[tool(description = "Report progress, then finish")]
    async fn progress(
        &self,
        Parameters(StepsArgs { steps }): Parameters<StepsArgs>,
        meta: RequestMetaObject,
        client: Peer<RoleServer>,
    ) -> Result<String, ErrorData> {
        self.probe.calls.fetch_add(1, Ordering::SeqCst);
        let token = meta
            .get_progress_token()
            .ok_or_else(|| ErrorData::invalid_params("progress token required", None))?;
        for step in 0..steps {
            let _ = client
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), f64::from(step))
                        .with_total(f64::from(steps)),
                )
                .await;
        }
        Ok(format!("done {steps}"))
    }

    #[tool(description = "Name the client and the protocol version of the session")]
    fn whoami(&self, client: Peer<RoleServer>) -> String {
        client.peer_info().map_or_else(
            || "unknown".to_owned(),
            |info| {
                let version = serde_json::to_value(&info.protocol_version).unwrap_or_default();
                format!(
                    "{} {}",
                    info.client_info.name,
                    version.as_str().unwrap_or("")
                )
            },
        )
    }

    #[tool(description = "Sleep, then answer")]
    async fn sleep(&self, Parameters(SleepArgs { secs }): Parameters<SleepArgs>) -> String {
        self.probe.calls.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(secs)).await;
        format!("slept {secs}")
    }

    #[tool(description = "Wait until cancelled")]
    async fn wait(&self, ctx: RequestContext<RoleServer>) -> String {
        self.probe.calls.fetch_add(1, Ordering::SeqCst);
        self.probe.started.notify_one();
        tokio::select! {
            () = ctx.ct.cancelled() => {
                self.probe.cancelled.fetch_add(1, Ordering::SeqCst);
                self.probe.cancel_seen.notify_one();
                "cancelled".into()
            }
            () = tokio::time::sleep(Duration::from_secs(3600)) => "done".into(),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// Serves every session the router accepts with a `TestServer` sharing one probe.
pub fn serve(router: &Router) -> Arc<Probe> {
    let probe = Arc::new(Probe::default());
    let shared = probe.clone();
    router.serve(move |_peer: &PeerId| TestServer::new(shared.clone()));
    probe
}

/// Which lifecycle a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// `initialize` / `notifications/initialized`.
    Legacy,
    /// `server/discover` and per-request metadata (2026-07-28).
    Stateless,
}

pub type Client = RunningService<RoleClient, ()>;

/// A client session to `server` over `router` with the given lifecycle.
pub async fn connect(router: &Router, server: PeerId, lifecycle: Lifecycle) -> Client {
    let transport = router.dial(server).expect("dial");
    match lifecycle {
        Lifecycle::Legacy => ().serve(transport).await.expect("initialize"),
        Lifecycle::Stateless => ()
            .serve_with_lifecycle(
                transport,
                ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                },
            )
            .await
            .expect("discover"),
    }
}
