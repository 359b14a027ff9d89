//! An HTTP upstream that stops: a call to it fails with an error naming the upstream
//! and what failed (not rmcp's transport type names), and its status turns down
//! instead of staying `up`. A sold tool's description carries its price.

use std::sync::Arc;
use std::time::Duration;

use brmcp::server::DynamicTools;
use brmcp::server::upstream::{UpstreamState, Upstreams};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorData,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::support::{ALICE, builder, env, is_error, params, text};
use crate::upstream_floods::caller;
use crate::upstream_supervision::{hook, next_in, upstreams};

/// An MCP server with one free tool, `hello`.
#[derive(Clone)]
struct Web;

impl ServerHandler for Web {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools: Vec<Tool> = serde_json::from_value(json!([
            {"name": "hello", "description": "Says hello.", "inputSchema": {"type": "object"}},
            {"name": "quote", "description": "A quote.", "inputSchema": {"type": "object"}},
        ]))
        .expect("tools");
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResult::success(vec![ContentBlock::text("hello")]).into())
    }
}

/// Serves [`Web`] at `http://{listener}/mcp` until `stop`.
fn serve_web(listener: tokio::net::TcpListener, stop: CancellationToken) {
    let service = StreamableHttpService::new(
        || Ok(Web),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default(),
    );
    let app = axum::Router::new().nest_service("/mcp", service);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_http_upstream_is_a_named_error_and_shown_down() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    serve_web(listener, stop.clone());
    let config = upstreams(json!([{
        "name": "web", "url": format!("http://{addr}/mcp"), "tools": {"hello": 0, "quote": 700}
    }]));
    let tools = DynamicTools::new();
    let (hook, rx) = hook();
    let started = Upstreams::start(&config.upstreams, &tools, None, Some(hook));
    let rx = tokio::task::spawn_blocking(move || {
        next_in(&rx, UpstreamState::Up);
        rx
    })
    .await
    .unwrap();
    let (b, clock, dir) = builder();
    let env = env(b.dynamic_tools(tools), clock, dir);
    let alice = caller(&env, ALICE).await;
    let served = alice.call("hello", json!({})).await;
    assert!(!is_error(&served), "{}", text(&served));
    // The model sees a sold tool's price in its description; a free one is as listed.
    let listed = alice.service.list_all_tools().await.expect("tools/list");
    let description = |name: &str| {
        listed
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| t.description.as_deref().map(str::to_owned))
    };
    assert_eq!(description("hello").as_deref(), Some("Says hello."));
    assert_eq!(
        description("quote").as_deref(),
        Some("A quote. (costs 700 atoms per call)")
    );

    // The server stops: the call names the upstream and what failed.
    stop.cancel();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let failed = alice
        .service
        .call_tool(params("hello", json!({}), None))
        .await
        .expect("an answer");
    assert!(is_error(&failed), "{}", text(&failed));
    let said = text(&failed);
    assert!(
        said.starts_with("upstream web: cannot reach it: "),
        "{said}"
    );
    assert!(!said.contains("Transport ["), "{said}");
    // And the status tells the truth.
    let down = tokio::task::spawn_blocking(move || next_in(&rx, UpstreamState::Down))
        .await
        .unwrap();
    let error = down.error.clone().unwrap_or_default();
    assert!(!error.contains("Transport ["), "{down:?}");
    assert_eq!(
        started.status()[0].state,
        UpstreamState::Down,
        "{:?}",
        started.status()
    );
    started.shutdown().await;
}
