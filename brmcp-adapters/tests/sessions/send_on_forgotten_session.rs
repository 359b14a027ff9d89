//! A server that lost a session (here: a new router for the same identity, as after a
//! restart) still answers a request the client is waiting for on it: `send_on` reaches
//! the client's dialed session, which fails the pending request with that error.
//! `serve_sessions` tells the server which session it serves.

use std::time::Duration;

use brmcp_adapters::mem::{Fabric, uid};
use brmcp_adapters::protocol::CALL_INTERRUPTED;
use brmcp_adapters::wire::SessionId;
use brmcp_adapters::{PeerId, RouterConfig};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ErrorData, RequestId, ServerCapabilities,
    ServerConfig, ServerJsonRpcMessage,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceError, ServiceExt};
use tokio::sync::mpsc;

const SERVER: u32 = 1;
const CLIENT: u32 = 2;

/// Tells which (peer, session, request) called `hang`, then never answers.
struct Hang {
    peer: PeerId,
    sid: SessionId,
    seen: mpsc::UnboundedSender<(PeerId, SessionId, RequestId)>,
}

impl ServerHandler for Hang {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let _ = self.seen.send((self.peer, self.sid, context.id));
        std::future::pending().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_sent_on_a_forgotten_session_reaches_the_waiting_request() {
    let fabric = Fabric::new(41);
    let first = fabric.router(uid(SERVER), RouterConfig::server());
    let (seen, mut calls) = mpsc::unbounded_channel();
    first.serve_sessions(move |peer, sid| Hang {
        peer: *peer,
        sid,
        seen: seen.clone(),
    });
    let client_router = fabric.router(uid(CLIENT), RouterConfig::client());
    let transport = client_router.dial(uid(SERVER)).unwrap();
    let dialed = transport.sid();
    let client = ().serve(transport).await.unwrap();
    let pending = tokio::spawn(async move {
        client
            .call_tool(CallToolRequestParams::new("hang"))
            .await
            .map(|_| ())
    });
    let (peer, sid, id) = tokio::time::timeout(Duration::from_secs(20), calls.recv())
        .await
        .expect("the call reached the server")
        .unwrap();
    assert_eq!((peer, sid), (uid(CLIENT), dialed));

    // The server's process is gone; a new one knows no session.
    first.close();
    drop(first);
    let second = fabric.router(uid(SERVER), RouterConfig::server());
    let answer = ServerJsonRpcMessage::error(
        ErrorData::new(CALL_INTERRUPTED, "call interrupted", None),
        Some(id),
    );
    second.send_on(peer, sid, &answer).await.unwrap();
    let failed = tokio::time::timeout(Duration::from_secs(20), pending)
        .await
        .expect("the pending call was answered within seconds")
        .unwrap();
    match failed {
        Err(ServiceError::McpError(e)) => {
            assert_eq!(e.code, CALL_INTERRUPTED);
            assert_eq!(e.message, "call interrupted");
        }
        other => panic!("expected the interrupted error, got {other:?}"),
    }
    assert_eq!(
        second.stats().sessions_open,
        0,
        "no session was opened for it"
    );
}
