//! Asking the bot again for an answer it may have lost. A bot that ran a paid call can
//! lose its answer (its brclient's connection dropped as the answer went out, and it
//! does not send it again) while its session stays up and carries other answers: only
//! the request timeout (10 minutes) would end the wait, and an agent that retries
//! sooner without a call key of its own pays again. So a keyed `tools/call` of a
//! priced tool (or one paid for) that the bot is heard on the session for but has not
//! answered is sent again under its key, as both serving harnesses expect of a client
//! (a plain MCP server's free tool is never sent twice: it would run twice): one still running the call has the
//! duplicate wait for it and answers both, one that finished it replays its outcome,
//! one that never got it runs it once. An answer that is no outcome of the call
//! ([`is_no_outcome`]: a refusal that says to ask again, go-sdk's empty success) is not
//! taken; the wait goes on.

use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use rmcp::ServiceError;
use rmcp::model::{CallToolResult, ClientRequest, RequestMetaObject, ServerResult};
use rmcp::service::PeerRequestOptions;
use tokio::sync::oneshot;
use tokio::time::Instant;

use brmcp_adapters::protocol::{CALL_INTERRUPTED, CALL_KEY_META, is_no_outcome};

use crate::bridge::link::Conn;

/// Re-asks of one call: 3, the first a re-ask pause (`Config::reask_after`) after the
/// send, each next after twice the pause before it. A tool that runs for minutes gets
/// its answer sent at most this many times more, and a bot that lost it is asked within
/// seven pauses.
pub const MAX_REASKS: u32 = 3;

/// What one send of a request is answered, as the session gives it.
pub(super) type Answer = Result<Result<ServerResult, ServiceError>, oneshot::error::RecvError>;

/// The re-asks of one wait for an answer: what to send, when, and their answers.
pub(super) struct Reasks<'a> {
    /// The keyed `tools/call` and its `_meta`; `None` for any other request, which is
    /// never sent again (without a key, a second send could run it twice).
    ask: Option<(&'a ClientRequest, &'a RequestMetaObject)>,
    /// The wait before the next re-ask.
    pause: Duration,
    next: Instant,
    sent: u32,
    answers: FuturesUnordered<oneshot::Receiver<Result<ServerResult, ServiceError>>>,
}

impl<'a> Reasks<'a> {
    /// The re-asks of `request` sent with `meta`, waited for from `from`: the first
    /// `pause` later.
    pub(super) fn new(
        ask: Option<(&'a ClientRequest, &'a RequestMetaObject)>,
        pause: Duration,
        from: Instant,
    ) -> Self {
        let ask = ask.filter(|(request, meta)| {
            matches!(request, ClientRequest::CallToolRequest(_)) && meta.contains_key(CALL_KEY_META)
        });
        Self {
            ask,
            pause,
            next: from + pause,
            sent: 0,
            answers: FuturesUnordered::new(),
        }
    }

    /// When the next re-ask is due; `None` when none is to be sent.
    pub(super) fn due(&self) -> Option<Instant> {
        (self.ask.is_some() && self.sent < MAX_REASKS).then_some(self.next)
    }

    /// Sends the call again on `conn`. A send that fails is not retried here: the
    /// original's wait sees the session fail too.
    pub(super) async fn send(&mut self, conn: &Conn) {
        let Some((request, meta)) = self.ask else {
            return;
        };
        self.sent += 1;
        self.pause = self.pause.saturating_mul(2);
        self.next = Instant::now() + self.pause;
        let options = PeerRequestOptions::no_options().with_meta(meta.clone());
        match conn
            .peer()
            .send_request_with_option(request.clone(), options)
            .await
        {
            Ok(handle) => {
                tracing::info!(
                    reask = self.sent,
                    key = key_of(meta),
                    "no answer yet from a bot that is heard; asked again under the call key"
                );
                self.answers.push(handle.rx);
            }
            Err(e) => tracing::debug!(error = %e, "re-ask not sent"),
        }
    }

    /// The first answer to a re-ask that is the call's ([`taken`]), waiting on past
    /// the others; pending while there is none.
    pub(super) async fn answer(&mut self) -> Answer {
        loop {
            match self.answers.next().await {
                Some(answer) => {
                    if let Some(answer) = taken(answer) {
                        let key = self.ask.map(|(_, meta)| key_of(meta));
                        tracing::info!(key, "answer got by asking again");
                        return answer;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        }
    }
}

/// The call key in `meta`, for the log.
fn key_of(meta: &RequestMetaObject) -> &str {
    meta.get(CALL_KEY_META)
        .and_then(|key| key.as_str())
        .unwrap_or_default()
}

/// A re-ask's answer, if it is the call's: an outcome (not [`is_no_outcome`]), or the
/// bot's word that the call was interrupted and refunded ([`CALL_INTERRUPTED`]), which
/// the original waits for too. Anything else (the session failing, a refusal that says
/// to ask again) leaves the original's wait to decide.
fn taken(answer: Answer) -> Option<Answer> {
    match &answer {
        Ok(Ok(result)) => super::expect::<CallToolResult>(result.clone())
            .is_ok_and(|result| !is_no_outcome(&result))
            .then_some(answer),
        Ok(Err(ServiceError::McpError(e))) if e.code == CALL_INTERRUPTED => Some(answer),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{CallToolRequestParams, ContentBlock, ErrorData, ListToolsRequest};

    use super::*;
    use brmcp_adapters::protocol::DUPLICATE_IN_PROGRESS;

    fn call() -> ClientRequest {
        ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
            CallToolRequestParams::new("fortune"),
        ))
    }

    fn keyed() -> RequestMetaObject {
        let mut meta = RequestMetaObject::new();
        meta.insert(CALL_KEY_META.into(), "0123456789abcdef".into());
        meta
    }

    fn result(result: CallToolResult) -> Answer {
        Ok(Ok(ServerResult::CallToolResult(result)))
    }

    #[test]
    fn only_a_keyed_call_is_asked_again() {
        let now = Instant::now();
        let pause = Duration::from_secs(30);
        let (call, keyed) = (call(), keyed());
        assert_eq!(
            Reasks::new(Some((&call, &keyed)), pause, now).due(),
            Some(now + pause)
        );
        let unkeyed = RequestMetaObject::new();
        assert_eq!(Reasks::new(Some((&call, &unkeyed)), pause, now).due(), None);
        let list = ClientRequest::ListToolsRequest(ListToolsRequest::default());
        assert_eq!(Reasks::new(Some((&list, &keyed)), pause, now).due(), None);
        assert_eq!(Reasks::new(None, pause, now).due(), None);
    }

    #[test]
    fn outcomes_and_interruptions_are_taken_refusals_to_ask_again_are_not() {
        let fortune = CallToolResult::success(vec![ContentBlock::text("fortune #1")]);
        assert!(taken(result(fortune)).is_some());
        let interrupted = ErrorData::new(CALL_INTERRUPTED, "call interrupted", None);
        assert!(taken(Ok(Err(ServiceError::McpError(interrupted)))).is_some());

        let in_progress = CallToolResult::error(vec![ContentBlock::text(DUPLICATE_IN_PROGRESS)]);
        assert!(taken(result(in_progress)).is_none());
        assert!(taken(result(CallToolResult::success(vec![]))).is_none());
        let other = ErrorData::internal_error("session to the bot closed", None);
        assert!(taken(Ok(Err(ServiceError::McpError(other)))).is_none());
        assert!(taken(Ok(Err(ServiceError::TransportClosed))).is_none());
    }
}
