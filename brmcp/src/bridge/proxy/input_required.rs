//! Asking agents on protocol 2026-07-28, which forbids server-to-client requests: a
//! request that needs the agent's input (the approval of a payment, or a bot's
//! elicitation, sampling or roots request made during the agent's `tools/call`,
//! `prompts/get` or `resources/read`) is held, and the agent's request is answered with
//! `input_required`; the agent's retry with its answers and the `requestState` resumes
//! the held request.
//!
//! The state is a random handle into the link's own table of held requests
//! ([`HeldCalls`]), taken at most once, and only by the agent it was given to for the
//! tool, prompt or resource it was given for ([`Subject`]): a forged, replayed, expired
//! or foreign state finds nothing, and its retry is a new request (forwarded as it came,
//! so a bot's own `requestState` still reaches the bot).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, InputRequest, InputResponses, ProtocolVersion,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::ask::{Answer, declares_form};
use super::caller;
use crate::bridge::quote::DynamicQuote;
use crate::bridge::{Approver, Settings, lock};

/// How long a call waits for the agent's retry after its `input_required` (the default
/// of [`Config::input_hold`](crate::bridge::Config::input_hold)): 10 minutes, time for a
/// person to read and answer a form. Past it the held call is dropped: the
/// bot's request gets an error and the bot's call is cancelled. A held payment is kept
/// as long as its approval may still be decided (the settings' approval timeout and tip
/// wait) and then this long, so a payment approved elsewhere still reaches its call.
pub const INPUT_HOLD: Duration = Duration::from_secs(600);

/// Calls held for one agent's input on one bot at once: 16. An agent on the stateless
/// protocol has no session; its name (its token) is what the bound counts by. Past it a
/// bot's request gets an error and a payment is left to the other approval channels.
pub(crate) const MAX_HELD_PER_AGENT: usize = 16;

/// A bot's requests to the client queued in one call before the agent is asked: 8. A
/// bot asks one thing at a time in practice; past it the bot's request gets an error.
pub(crate) const MAX_ASKS_PER_CALL: usize = 8;

/// Random bytes in a `requestState`: 16, beyond guessing.
const STATE_BYTES: usize = 16;

/// The key of the approval question in `inputRequests`.
pub(crate) const APPROVAL_INPUT: &str = "brmcp/approval";

/// Whether the agent's request is on a protocol that asks through `input_required`
/// (2026-07-28 and later) rather than through server-to-client requests.
pub(crate) fn asks_by_input_required(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28)
}

/// A bot's request to the client, handed to the call of an agent asked through
/// `input_required`, and where its answer goes.
pub(crate) struct InputAsk {
    /// The bot's request.
    pub(crate) request: InputRequest,
    /// The agent's response, as it came in `inputResponses`.
    pub(crate) answer: oneshot::Sender<Value>,
}

/// What the link needs to hand a bot's requests to a call of an agent asked through
/// `input_required`.
#[derive(Clone)]
pub(crate) struct Inputs {
    /// What the agent's client declared on its request: only requests it can take are
    /// handed to it.
    pub(crate) capabilities: ClientCapabilities,
    /// Into the call.
    pub(crate) asks: mpsc::Sender<InputAsk>,
    /// How long the call is held for the agent's answer: the bot waits no longer.
    pub(crate) hold: Duration,
}

/// One call's end of [`Inputs`].
pub(crate) struct Asks {
    pub(crate) inputs: Inputs,
    pub(crate) rx: mpsc::Receiver<InputAsk>,
}

impl Asks {
    pub(crate) fn new(capabilities: ClientCapabilities, hold: Duration) -> Self {
        let (asks, rx) = mpsc::channel(MAX_ASKS_PER_CALL);
        Self {
            inputs: Inputs {
                capabilities,
                asks,
                hold,
            },
            rx,
        }
    }
}

/// The approval question as an `inputRequests` entry: a form with no fields naming the
/// bot (its [`bot_label`](crate::bridge::Settings::bot_label): name and uid, or the
/// uid), the tool and the amount.
pub(crate) fn approval_request(
    name: &str,
    bot: &str,
    tool: &str,
    atoms: u64,
    quoted: Option<DynamicQuote>,
) -> InputRequest {
    let whole = brmcp_adapters::protocol::ATOMS_PER_DCR;
    let dcr = format!("{}.{:08}", atoms / whole, atoms % whole);
    let quoted = quoted.map_or_else(String::new, |q| format!(" ({q})"));
    let message = format!(
        "{name}: pay {atoms} atoms ({dcr} DCR) to bot {bot} for tool {tool:?}{quoted}? Accept to pay, decline to refuse."
    );
    InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message,
            requested_schema: ElicitationSchema::new(BTreeMap::new()),
        },
    ))
}

/// Whether the agent's client may be asked the approval question through
/// `input_required`: it declared form elicitation on its request, and `settings` let
/// the agent approve its own payments ([`Approver::Agent`]).
pub(crate) fn can_ask_approval(ctx: &RequestContext<RoleServer>, settings: &Settings) -> bool {
    asks_by_input_required(ctx)
        && ctx.client_capabilities().is_some_and(|c| declares_form(&c))
        && settings.approver_of(&caller(ctx)) == Approver::Agent
}

/// Hands the agent's answer to the approval question in its retry to the held payment,
/// if the live `settings` still let the agent approve its own payments; else the answer
/// is dropped unread and the payment waits for the user's decision (the agent's
/// approvals were made the user's after it was asked).
pub(crate) fn answer_approval(
    answer: oneshot::Sender<Answer>,
    responses: &InputResponses,
    settings: &Settings,
    ctx: &RequestContext<RoleServer>,
) {
    let agent = caller(ctx);
    if settings.approver_of(&agent) != Approver::Agent {
        tracing::info!(
            agent = agent.name(),
            "the agent's answer to its approval is not taken: its approvals are the user's"
        );
        return;
    }
    // The payment may have been decided elsewhere meanwhile: the answer then changes
    // nothing.
    let _ = answer.send(approval_answer(responses));
}

/// The agent's answer to the approval question in its retry: missing or malformed is a
/// cancel (nothing is paid on what cannot be read as an accept).
pub(crate) fn approval_answer(responses: &InputResponses) -> Answer {
    let Some(response) = responses.get(APPROVAL_INPUT) else {
        return Answer::Cancel;
    };
    match serde_json::from_value::<ElicitResult>(response.clone()).map(|r| r.action) {
        Ok(ElicitationAction::Accept) => Answer::Accept,
        Ok(ElicitationAction::Decline) => Answer::Decline,
        _ => Answer::Cancel,
    }
}

/// Why a call could not be held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HoldError {
    /// The agent has [`MAX_HELD_PER_AGENT`] calls held on this bot already.
    #[error("too many calls wait for this agent's input")]
    Full,
    /// No random state could be drawn.
    #[error("no random state")]
    Entropy,
    /// The state holds another call.
    #[error("state in use")]
    Taken,
}

/// What a held request was for: its state serves only a retry of the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Subject {
    /// A `tools/call` of the named tool.
    Tool(String),
    /// A `prompts/get` of the named prompt.
    Prompt(String),
    /// A `resources/read` of the URI.
    Resource(String),
}

struct Entry<T> {
    agent: String,
    subject: Subject,
    /// Which holding of the state this is: a call held again under its state is not
    /// expired by the earlier holding's timer.
    generation: u64,
    held: T,
}

/// The calls of one bot link held for their agents' input, by `requestState`.
pub(crate) struct HeldCalls<T> {
    calls: Mutex<HashMap<String, Entry<T>>>,
    generations: AtomicU64,
}

impl<T> Default for HeldCalls<T> {
    fn default() -> Self {
        Self {
            calls: Mutex::new(HashMap::new()),
            generations: AtomicU64::new(0),
        }
    }
}

impl<T: Send + 'static> HeldCalls<T> {
    /// Holds `held`, a request about `subject` by `agent`, for `hold`; returns its state. Past
    /// `hold`, unless taken, `expire` gets it. `held` comes back if it cannot be held.
    pub(crate) fn hold(
        self: &Arc<Self>,
        agent: &str,
        subject: &Subject,
        held: T,
        hold: Duration,
        expire: impl FnOnce(T) + Send + 'static,
    ) -> Result<String, (HoldError, T)> {
        let Ok(state) = crate::bridge::random_hex::<STATE_BYTES>() else {
            return Err((HoldError::Entropy, held));
        };
        self.hold_as(&state, agent, subject, held, hold, expire)?;
        Ok(state)
    }

    /// [`hold`](Self::hold) under a state taken from this table before (a call held
    /// again); a state held now is not replaced.
    pub(crate) fn hold_as(
        self: &Arc<Self>,
        state: &str,
        agent: &str,
        subject: &Subject,
        held: T,
        hold: Duration,
        expire: impl FnOnce(T) + Send + 'static,
    ) -> Result<(), (HoldError, T)> {
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        {
            let mut calls = lock(&self.calls);
            if calls.contains_key(state) {
                return Err((HoldError::Taken, held));
            }
            if calls.values().filter(|e| e.agent == agent).count() >= MAX_HELD_PER_AGENT {
                return Err((HoldError::Full, held));
            }
            calls.insert(
                state.to_owned(),
                Entry {
                    agent: agent.to_owned(),
                    subject: subject.clone(),
                    generation,
                    held,
                },
            );
        }
        let table: Weak<Self> = Arc::downgrade(self);
        let key = state.to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            let expired = table.upgrade().and_then(|t| {
                let mut calls = lock(&t.calls);
                let ours = calls.get(&key).is_some_and(|e| e.generation == generation);
                ours.then(|| calls.remove(&key).map(|e| e.held)).flatten()
            });
            if let Some(held) = expired {
                expire(held);
            }
        });
        Ok(())
    }

    /// The request held under `state` for `agent` and `subject`, taken out (a state
    /// serves once); `None` for any other state.
    pub(crate) fn take(&self, state: &str, agent: &str, subject: &Subject) -> Option<T> {
        let mut calls = lock(&self.calls);
        let ours = calls
            .get(state)
            .is_some_and(|e| e.agent == agent && e.subject == *subject);
        if !ours {
            return None;
        }
        calls.remove(state).map(|e| e.held)
    }

    /// Calls held now.
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.calls).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Arc<HeldCalls<u32>> {
        Arc::new(HeldCalls::default())
    }

    fn tool(name: &str) -> Subject {
        Subject::Tool(name.into())
    }

    #[tokio::test]
    async fn a_state_serves_once_and_only_its_agent_and_tool() {
        let calls = table();
        let state = calls
            .hold("alice", &tool("fortune"), 7, INPUT_HOLD, |_| {})
            .unwrap();
        assert_eq!(state.len(), STATE_BYTES * 2);
        assert_eq!(
            calls.take(&state, "mallory", &tool("fortune")),
            None,
            "another agent"
        );
        assert_eq!(
            calls.take(&state, "alice", &tool("quote")),
            None,
            "another tool"
        );
        let prompt = Subject::Prompt("fortune".into());
        assert_eq!(
            calls.take(&state, "alice", &prompt),
            None,
            "a prompt of its name"
        );
        assert_eq!(
            calls.take("0123456789abcdef", "alice", &tool("fortune")),
            None,
            "forged"
        );
        assert_eq!(calls.take(&state, "alice", &tool("fortune")), Some(7));
        assert_eq!(
            calls.take(&state, "alice", &tool("fortune")),
            None,
            "replayed"
        );
    }

    #[tokio::test]
    async fn held_calls_are_bounded_per_agent() {
        let calls = table();
        for i in 0..MAX_HELD_PER_AGENT {
            calls
                .hold("alice", &tool("t"), i as u32, INPUT_HOLD, |_| {})
                .unwrap();
        }
        let Err((e, back)) = calls.hold("alice", &tool("t"), 99, INPUT_HOLD, |_| {}) else {
            panic!("held past the bound");
        };
        assert_eq!((e, back), (HoldError::Full, 99));
        calls
            .hold("bob", &tool("t"), 1, INPUT_HOLD, |_| {})
            .unwrap();
        assert_eq!(calls.len(), MAX_HELD_PER_AGENT + 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_untaken_call_expires() {
        let calls = table();
        let (tx, rx) = oneshot::channel();
        let state = calls
            .hold(
                "alice",
                &tool("t"),
                5,
                Duration::from_secs(60),
                move |held| {
                    let _ = tx.send(held);
                },
            )
            .unwrap();
        assert_eq!(rx.await.unwrap(), 5);
        assert_eq!(calls.take(&state, "alice", &tool("t")), None);
        assert_eq!(calls.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_held_again_keeps_its_state_and_its_own_expiry() {
        let calls = table();
        let state = calls
            .hold("alice", &tool("t"), 1, Duration::from_secs(60), |_| {})
            .unwrap();
        assert_eq!(calls.take(&state, "alice", &tool("t")), Some(1));
        tokio::time::sleep(Duration::from_secs(30)).await;
        calls
            .hold_as(
                &state,
                "alice",
                &tool("t"),
                2,
                Duration::from_secs(60),
                |_| {},
            )
            .unwrap();
        let Err((e, _)) = calls.hold_as(&state, "alice", &tool("t"), 3, INPUT_HOLD, |_| {}) else {
            panic!("replaced a held call");
        };
        assert_eq!(e, HoldError::Taken);
        // Past the first holding's end, within the second's.
        tokio::time::sleep(Duration::from_secs(45)).await;
        assert_eq!(calls.take(&state, "alice", &tool("t")), Some(2));
    }

    #[test]
    fn the_approval_answer_is_read_strictly() {
        let answer = |v: Value| {
            let mut responses = InputResponses::new();
            responses.insert(APPROVAL_INPUT.into(), v);
            approval_answer(&responses)
        };
        assert_eq!(
            answer(serde_json::json!({"action": "accept"})),
            Answer::Accept
        );
        assert_eq!(
            answer(serde_json::json!({"action": "decline"})),
            Answer::Decline
        );
        assert_eq!(
            answer(serde_json::json!({"action": "cancel"})),
            Answer::Cancel
        );
        assert_eq!(answer(serde_json::json!({"action": "yes"})), Answer::Cancel);
        assert_eq!(answer(serde_json::json!("accept")), Answer::Cancel);
        assert_eq!(approval_answer(&InputResponses::new()), Answer::Cancel);
    }

    #[test]
    fn the_approval_form_names_bot_tool_and_amount() {
        let bot = brmcp_adapters::PeerId::from_bytes([0xab; 32]);
        let uid = bot.to_string();
        let named = Settings::default().with_bot("fortunes", bot).unwrap();
        for (settings, shown) in [
            (&named, format!("\"fortunes\" ({uid})")),
            (&Settings::default(), uid.clone()),
        ] {
            let label = settings.bot_label(&bot);
            let InputRequest::Elicitation(request) =
                approval_request("brmcp-bridge", &label, "fortune", 150_000_000, None)
            else {
                panic!("not an elicitation");
            };
            let value = serde_json::to_value(&request).unwrap();
            let message = value["params"]["message"].as_str().unwrap();
            assert_eq!(
                message,
                format!(
                    "brmcp-bridge: pay 150000000 atoms (1.50000000 DCR) to bot {shown} for tool \"fortune\"? Accept to pay, decline to refuse."
                )
            );
            assert_eq!(message.matches(&uid).count(), 1, "the uid once: {message}");
            assert_eq!(value["method"], "elicitation/create");
        }
        // A dynamically priced tool: the quote and the bound it is paid within.
        let quoted = DynamicQuote {
            price_atoms: 900,
            bounds: brmcp_adapters::protocol::PriceBounds::at_most(5000).unwrap(),
        };
        let InputRequest::Elicitation(request) =
            approval_request("b", "x", "search", 600, Some(quoted))
        else {
            panic!("not an elicitation");
        };
        let value = serde_json::to_value(&request).unwrap();
        assert_eq!(
            value["params"]["message"],
            "b: pay 600 atoms (0.00000600 DCR) to bot x for tool \"search\" (quoted 900 atoms, listed at most 5000 atoms)? Accept to pay, decline to refuse."
        );
    }
}
