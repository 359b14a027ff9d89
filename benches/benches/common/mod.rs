//! The MCP server both fabric benches run: `echo` and `blob`.

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{ServerCapabilities, ServerConfig};
use rmcp::service::{RoleClient, RunningService};
use rmcp::{ServerHandler, schemars, tool, tool_handler, tool_router};

/// Arguments of `echo`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to send back.
    text: String,
}

/// Arguments of `blob`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct BlobArgs {
    /// Bytes of text to return.
    len: usize,
}

/// The bench server: `echo` and `blob`.
#[derive(Debug, Clone)]
pub(crate) struct BenchServer {
    tool_router: ToolRouter<Self>,
}

impl BenchServer {
    pub(crate) fn new() -> Self {
        Self {
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_router]
impl BenchServer {
    #[tool(description = "Echo the text back")]
    fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Return `len` bytes of text")]
    fn blob(&self, Parameters(BlobArgs { len }): Parameters<BlobArgs>) -> String {
        let mut text = "abcdefghijklmnopqrstuvwxyz".repeat(len / 26 + 1);
        text.truncate(len);
        text
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for BenchServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// An rmcp client session.
#[allow(dead_code)] // the session-memory bench holds a `brmcp_adapters::Client` instead
pub(crate) type Client = RunningService<RoleClient, ()>;
