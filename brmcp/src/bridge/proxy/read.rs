//! One agent `prompts/get` or `resources/read`: forwarded to the bot; for an agent on
//! protocol 2026-07-28, held while the bot asks the client something (see
//! [`input_required`](super::input_required)) and resumed by the agent's retry, the bot's one request going
//! on with the agent's answers.

use rmcp::model::{ClientRequest, ErrorData, InputResponses, RequestMetaObject, ServerResult};
use rmcp::service::{RequestContext, RoleServer};

use super::held::{BotWait, Held};
use super::input_required::{Asks, Subject, asks_by_input_required};
use super::{Attempts, Failure, ProxyServer, Waiting, caller, forwarded_meta};

/// The state of one agent `prompts/get` or `resources/read` across its sends and (for
/// an agent asked through `input_required`) its retries.
struct ReadState {
    request: ClientRequest,
    meta: RequestMetaObject,
    subject: Subject,
    attempts: Attempts,
    /// For an agent asked through `input_required`: the bot's requests to the client.
    asks: Option<Asks>,
}

/// A `prompts/get` or `resources/read` held for its agent's answers to the bot's
/// requests.
pub(crate) struct HeldRead {
    read: ReadState,
    pub(super) wait: BotWait,
}

impl ProxyServer {
    /// Forwards `request`, a `prompts/get` or `resources/read` of `subject`. The retry
    /// of one held for the agent's input (its `state` one of ours, for this agent and
    /// subject) resumes it with `responses`; any other state is the bot's, forwarded
    /// as it came. The answer is the bot's, or `input_required` carrying the bot's
    /// requests to the client.
    pub(super) async fn read(
        &self,
        request: ClientRequest,
        subject: Subject,
        state: Option<&str>,
        responses: Option<InputResponses>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        if let Some(state) = state
            && let Some(held) = self.link.held.take(state, caller(ctx).name(), &subject)
        {
            let Held::Read(held) = held else {
                return Err(ErrorData::internal_error("held request changed", None));
            };
            let HeldRead { read, wait } = *held;
            let waiting = wait.answer(&responses.unwrap_or_default(), ctx);
            return self.run_read(read, Some(waiting), ctx).await;
        }
        let asks = asks_by_input_required(ctx).then(|| {
            let capabilities = ctx.client_capabilities().unwrap_or_default();
            Asks::new(capabilities, self.bridge.config.input_hold)
        });
        let read = ReadState {
            request,
            meta: forwarded_meta(&ctx.meta),
            subject,
            attempts: Attempts::default(),
            asks,
        };
        self.run_read(read, None, ctx).await
    }

    /// Sends a read (or waits on in `resume`, a held read's send) to the bot's answer,
    /// or holds it for the agent's input.
    async fn run_read(
        &self,
        mut read: ReadState,
        resume: Option<Waiting>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let answer = self
            .forward_retrying(
                &read.request,
                &read.meta,
                ctx,
                &mut read.attempts,
                read.asks.as_mut(),
                resume,
            )
            .await;
        match answer {
            Ok(result) => Ok(result),
            Err(Failure::Input(input)) => {
                let (wait, requests) = BotWait::new(*input);
                let subject = read.subject.clone();
                let held = Held::Read(Box::new(HeldRead { read, wait }));
                let asked = self.hold_for_bot(&subject, held, requests, ctx)?;
                Ok(ServerResult::InputRequiredResult(asked))
            }
            Err(e) => Err(e.into()),
        }
    }
}
