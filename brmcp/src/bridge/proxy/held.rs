//! A request of an agent asked through `input_required`, held for the agent's input
//! (see [`input_required`](super::input_required)): a `tools/call` waiting on its
//! payment or on the bot's requests to the client, or a `prompts/get` or
//! `resources/read` the bot asked the client something in. All are held in the link's
//! one table, under its one bound per agent.

use rmcp::model::{ErrorData, InputRequests, InputRequiredResult, InputResponses};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;
use tokio::sync::oneshot;

use super::call::HeldCall;
use super::input_required::Subject;
use super::read::HeldRead;
use super::{BotInput, ProxyServer, Waiting, caller, cancel_at_bot};

/// A request held for its agent's input.
pub(crate) enum Held {
    /// A `tools/call`.
    Call(Box<HeldCall>),
    /// A `prompts/get` or `resources/read`.
    Read(Box<HeldRead>),
}

impl Held {
    /// The bot's requests the held request waits on, if it waits on the bot.
    fn into_bot_wait(self) -> Option<BotWait> {
        match self {
            Self::Call(call) => call.into_bot_wait(),
            Self::Read(read) => Some(read.wait),
        }
    }
}

/// A forwarded request the bot asked the client something in: the bot's answer to
/// wait on, and where the agent's answers to the bot's requests go, by key.
pub(super) struct BotWait {
    waiting: Waiting,
    asked: Vec<(String, oneshot::Sender<Value>)>,
}

impl BotWait {
    /// The wait, and the bot's requests as `inputRequests` (keyed `bot/0`, `bot/1`, ...).
    pub(super) fn new(input: BotInput) -> (Self, InputRequests) {
        let BotInput { waiting, asks } = input;
        let mut requests = InputRequests::new();
        let mut asked = Vec::with_capacity(asks.len());
        for (n, ask) in asks.into_iter().enumerate() {
            let key = format!("bot/{n}");
            requests.insert(key.clone(), ask.request);
            asked.push((key, ask.answer));
        }
        (Self { waiting, asked }, requests)
    }

    /// Hands the agent's `responses` to the bot's requests (one left unanswered gets
    /// an error at the bot) and returns the wait for the bot's answer, now the retry's.
    pub(super) fn answer(
        self,
        responses: &InputResponses,
        ctx: &RequestContext<RoleServer>,
    ) -> Waiting {
        let Self { mut waiting, asked } = self;
        // Marked for the retry before the bot hears its answer, so what the bot asks
        // next reaches this request.
        waiting.tracked.retarget(&ctx.peer, &ctx.id);
        for (key, answer) in asked {
            if let Some(response) = responses.get(&key) {
                let _ = answer.send(response.clone());
            }
        }
        waiting
    }

    /// Tells the bot its request is no longer waited for, `why`; its requests to the
    /// client get their errors (their answer channels dropped).
    fn cancel(self, why: &'static str) {
        cancel_at_bot(&self.waiting.conn, self.waiting.id, why);
    }
}

impl ProxyServer {
    /// Holds `held`, a request about `subject` the bot asked the client something in,
    /// and returns the `input_required` carrying the bot's `requests`. Held past the
    /// configured hold ([`INPUT_HOLD`](super::input_required::INPUT_HOLD)), the
    /// request is cancelled at the bot; one that cannot be held fails like a request
    /// the agent gave up on.
    pub(super) fn hold_for_bot(
        &self,
        subject: &Subject,
        held: Held,
        requests: InputRequests,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<InputRequiredResult, ErrorData> {
        let agent = caller(ctx);
        let expire = |held: Held| {
            if let Some(wait) = held.into_bot_wait() {
                wait.cancel("no input from the agent in time");
            }
        };
        let hold = self.bridge.config.input_hold;
        match self
            .link
            .held
            .hold(agent.name(), subject, held, hold, expire)
        {
            Ok(state) => Ok(InputRequiredResult::new(Some(requests), Some(state))),
            Err((e, held)) => {
                if let Some(wait) = held.into_bot_wait() {
                    wait.cancel("the agent cannot be asked");
                }
                Err(ErrorData::internal_error(
                    format!("bot {} asked for input: {e}", self.link.bot),
                    None,
                ))
            }
        }
    }
}
