//! One bot over stdio (or any rmcp transport), for agent hosts that spawn MCP servers.
//!
//! Only protocol goes to stdout; the bridge logs through `tracing`, which the host
//! points at stderr.

use rmcp::service::RoleServer;
use rmcp::transport::IntoTransport;
use rmcp::{ServerHandler, ServiceExt};

use super::link::BotLink;
use super::proxy::ProxyServer;
use super::{Bridge, BridgeError};
use brmcp_adapters::PeerId;

impl Bridge {
    /// Serves `bot` to one agent over `transport` until the agent leaves or the bot is
    /// de-listed.
    ///
    /// # Errors
    /// [`BridgeError::NotAllowed`], or [`BridgeError::Serve`] if the session could not
    /// start.
    pub async fn serve<T, E, A>(&self, bot: &PeerId, transport: T) -> Result<(), BridgeError>
    where
        T: IntoTransport<RoleServer, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let link = self
            .inner
            .link(bot)
            .ok_or_else(|| BridgeError::NotAllowed(bot.to_string()))?;
        let server = ProxyServer::new(self.inner.clone(), link.clone());
        serve_until_closed(server, &link, transport).await
    }
}

/// Serves `server` to one agent over `transport` until the agent leaves or `link`
/// closes (its bot or directory de-listed, or the bridge closed).
pub(super) async fn serve_until_closed<S, T, E, A>(
    server: S,
    link: &BotLink,
    transport: T,
) -> Result<(), BridgeError>
where
    S: ServerHandler,
    T: IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let running = tokio::select! {
        r = server.serve(transport) => r.map_err(|e| BridgeError::Serve(e.to_string()))?,
        () = link.closed.cancelled() => return Ok(()),
    };
    let stop = running.cancellation_token();
    tokio::select! {
        r = running.waiting() => {
            r.map_err(|e| BridgeError::Serve(e.to_string()))?;
        }
        () = link.closed.cancelled() => stop.cancel(),
    }
    Ok(())
}

/// Serves `bot` over this process's stdin and stdout until the agent closes stdin or
/// the bot is de-listed.
///
/// # Errors
/// As [`Bridge::serve`].
pub async fn serve_stdio(bridge: &Bridge, bot: &PeerId) -> Result<(), BridgeError> {
    bridge.serve(bot, rmcp::transport::stdio()).await
}
