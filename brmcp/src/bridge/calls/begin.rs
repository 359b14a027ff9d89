//! The journal's side of one agent `tools/call`: [`Calls::begin`] before it is sent
//! (a new call, an agent's own key, or a retry of a call that died with an earlier
//! run), the hooks the paid-call loop calls at each step, and [`Calls::finish`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use brmcp_adapters::PeerId;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ErrorData};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::json;

use super::bounds::MAX_CALLS_PER_AGENT;
use super::delivery::Delivery;
use super::journal::{Handing, NewCall, Outcome, Recorded, Row};
use super::key::{agent_key, args_digest, derived_key};
use super::state::State;
use super::{Calls, JournalError, Live, logged};
use crate::bridge::quote::Paid;

/// The header of the agent's MCP session (streamable HTTP).
const SESSION_HEADER: &str = "mcp-session-id";

/// What the proxy does with an agent's `tools/call`.
pub(crate) enum Begin {
    /// Run it under the journal's key.
    Run(Journaled),
    /// Answer it with the outcome the journal holds for it, under its call `key`.
    Held {
        /// The journal's call key: its task id.
        key: String,
        /// What the agent gets.
        outcome: Result<CallToolResponse, ErrorData>,
    },
}

/// A journaled call the proxy runs; a clone keeps it live in this process.
#[derive(Debug, Clone)]
pub(crate) struct Journaled {
    pub(super) id: i64,
    /// The key sent to the bot.
    pub(crate) key: String,
    /// What the call paid already (a call taken over from an earlier run): never
    /// paid again.
    pub(crate) paid: Option<Paid>,
    /// An earlier run sent it and paid nothing for it: a bot that reserves credit may
    /// hold it waiting for payment, and reserve another agent's tip for it (rule 2 of
    /// `credit`: it is sent alone).
    pub(crate) sent_unpaid: bool,
    sent: bool,
    /// Left for its agent's retry ([`Calls::leave`]): its end records nothing.
    left: Arc<AtomicBool>,
    /// Ended without its bot's outcome, nothing paid ([`Calls::refuse`]): its end
    /// records it cancelled.
    refused: Arc<AtomicBool>,
    /// Held for its drop: the call stops being live when the last clone goes.
    _live: Arc<Live>,
}

#[cfg(test)]
impl Journaled {
    /// The journal's call `id`, live in `calls`, as a run holds it.
    pub(super) fn of(calls: &Calls, id: i64) -> Self {
        let live = calls.take_live(id).expect("not live yet");
        Self {
            id,
            key: String::new(),
            paid: None,
            sent_unpaid: false,
            sent: false,
            left: Arc::default(),
            refused: Arc::default(),
            _live: Arc::new(live),
        }
    }
}

fn journal_error(e: &JournalError) -> ErrorData {
    ErrorData::internal_error(format!("{e}"), None)
}

/// What the journal holds for a call, as the agent gets it.
pub(crate) fn held_outcome(outcome: Option<&Outcome>) -> Result<CallToolResponse, ErrorData> {
    match outcome {
        Some(Outcome::Result(json)) => serde_json::from_str::<CallToolResult>(json)
            .map(CallToolResponse::Complete)
            .map_err(|e| ErrorData::internal_error(format!("held outcome: {e}"), None)),
        Some(Outcome::Error(json)) => Err(serde_json::from_str::<ErrorData>(json)
            .unwrap_or_else(|e| ErrorData::internal_error(format!("held outcome: {e}"), None))),
        Some(Outcome::TooLarge(n)) => Err(ErrorData::internal_error(
            format!(
                "the bot's answer to this call ({n} bytes) was larger than the bridge keeps; \
                 the call ran and is not run again under its key"
            ),
            None,
        )),
        None => Err(ErrorData::internal_error("held outcome: none", None)),
    }
}

impl Calls {
    /// Records `agent`'s call of `params` to `bot` before its first send, or finds
    /// the call it repeats: one under the agent's own `brmcp/callKey` (its exact
    /// outcome, or the call taken over where it stands), or, without a key, one of the
    /// same tool and arguments an earlier run left undelivered (its held outcome, or
    /// the call taken over). A call another request or a resume runs now is waited for.
    ///
    /// # Errors
    /// A malformed `brmcp/callKey`, a key used for another call, the agent's bounds
    /// full of calls in flight, the journal's failure; and the agent stopping its wait.
    pub(crate) async fn begin(
        &self,
        agent: &str,
        bot: &PeerId,
        params: &CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Begin, ErrorData> {
        let own =
            agent_key(&ctx.meta).map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let args = args_digest(params.arguments.as_ref());
        let tool = params.name.as_ref();
        let bot = bot.to_string();
        let stored = json!({"name": tool, "arguments": params.arguments}).to_string();
        let request = serde_json::to_string(&ctx.id).unwrap_or_default();
        let session = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.headers.get(SESSION_HEADER))
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let own_key = own.as_ref().map(|k| derived_key(agent, k));
        let template = NewCall {
            agent,
            session: session.as_deref(),
            request: &request,
            key: "",
            own_key: own_key.is_some(),
            bot: &bot,
            tool,
            args,
            params: &stored,
            run: &self.run,
        };
        loop {
            let now = self.now();
            // A call past its replay window is not found: the bot forgot its key too.
            self.journal.expire(now).map_err(|e| journal_error(&e))?;
            let found = match &own_key {
                Some(key) => self.journal.by_key(&bot, key),
                None => self
                    .journal
                    .claim_retry(agent, &bot, tool, &args, &self.run, now),
            }
            .map_err(|e| journal_error(&e))?;
            let Some(row) = found else {
                let key = match &own_key {
                    Some(key) => key.clone(),
                    None => crate::bridge::random_hex::<16>()
                        .map_err(|e| ErrorData::internal_error(format!("call key: {e}"), None))?,
                };
                match self.record(
                    &NewCall {
                        key: &key,
                        ..template
                    },
                    agent,
                )? {
                    Some(journaled) => return Ok(Begin::Run(journaled)),
                    // Another request of the agent's key recorded it a moment ago.
                    None => continue,
                }
            };
            if own.is_some() && (row.agent != agent || row.tool != tool || row.args != args) {
                return Err(ErrorData::invalid_params(
                    format!(
                        "brmcp/callKey {:?} was used for another call (another tool or other arguments): \
                         a key names one call",
                        own.as_deref().unwrap_or_default()
                    ),
                    None,
                ));
            }
            let live = loop {
                let mut running = match self.take_live(row.id) {
                    Ok(live) => break live,
                    Err(running) => running,
                };
                tokio::select! {
                    biased;
                    () = ctx.ct.cancelled() => {
                        if own.is_none() {
                            logged("release", self.journal.release(row.id));
                        }
                        return Err(ErrorData::internal_error("request cancelled", None));
                    }
                    _ = running.wait_for(|done| *done) => {}
                }
            };
            // Read again under the live mark: what ran before may have ended it.
            let Some(row) = self.journal.get(row.id).map_err(|e| journal_error(&e))? else {
                continue;
            };
            match row.state {
                State::Answered | State::Delivered => {
                    match Delivery::of(ctx) {
                        Some(delivery) => delivery.hand(row.id, own.is_none()),
                        None => {
                            logged("delivery", self.journal.deliver(row.id, self.now()));
                        }
                    }
                    tracing::info!(agent, bot, tool, key = %row.key, "held outcome handed to the agent's repeat");
                    return Ok(Begin::Held {
                        outcome: held_outcome(row.outcome.as_ref()),
                        key: row.key,
                    });
                }
                // Nothing owed and nothing ran: a retry is a call of its own.
                State::Cancelled if own.is_none() => {
                    let key = crate::bridge::random_hex::<16>()
                        .map_err(|e| ErrorData::internal_error(format!("call key: {e}"), None))?;
                    drop(live);
                    if let Some(journaled) = self.record(
                        &NewCall {
                            key: &key,
                            ..template
                        },
                        agent,
                    )? {
                        return Ok(Begin::Run(journaled));
                    }
                }
                _ => {
                    self.journal
                        .reopen(row.id, &self.run, self.now())
                        .map_err(|e| journal_error(&e))?;
                    tracing::info!(agent, bot, tool, key = %row.key, paid = row.paid(), "call taken over from where it stood");
                    return Ok(Begin::Run(self.taken(&row, live)));
                }
            }
        }
    }

    /// A call taken over where `row` stands.
    fn taken(&self, row: &Row, live: Live) -> Journaled {
        let paid = row.paid().then_some(Paid {
            price_atoms: row.price_atoms,
            atoms: row.paid_atoms.saturating_add(row.paying_atoms),
        });
        Journaled {
            id: row.id,
            key: row.key.clone(),
            sent_unpaid: paid.is_none() && matches!(row.state, State::Sent | State::Paying),
            paid,
            sent: false,
            left: Arc::default(),
            refused: Arc::default(),
            _live: Arc::new(live),
        }
    }

    /// Records a new call; `None` if its key is in the journal already (or another
    /// request took the new row over at once).
    fn record(&self, call: &NewCall<'_>, agent: &str) -> Result<Option<Journaled>, ErrorData> {
        match self
            .journal
            .record(call, self.now())
            .map_err(|e| journal_error(&e))?
        {
            Recorded::New(id) => {
                // Another request of the same key found the row first and runs it:
                // this one waits for it, as any repeat does.
                let Ok(live) = self.take_live(id) else {
                    return Ok(None);
                };
                Ok(Some(Journaled {
                    id,
                    key: call.key.to_owned(),
                    paid: None,
                    sent_unpaid: false,
                    sent: false,
                    left: Arc::default(),
                    refused: Arc::default(),
                    _live: Arc::new(live),
                }))
            }
            Recorded::Exists => Ok(None),
            Recorded::Full => Err(ErrorData::internal_error(
                format!(
                    "agent {agent:?} has {MAX_CALLS_PER_AGENT} calls in flight or held at the bridge; \
                     wait for some to end"
                ),
                None,
            )),
        }
    }

    /// Before a send of the call.
    pub(crate) fn sent(&self, call: &mut Journaled) {
        if !call.sent {
            call.sent = logged("send", self.journal.sent(call.id, self.now())).is_some();
        }
    }

    /// Before a payment of `paid` is made for the call.
    pub(crate) fn paying(&self, call: &Journaled, paid: Paid) {
        logged(
            "payment",
            self.journal
                .paying(call.id, paid.price_atoms, paid.atoms, self.now()),
        );
    }

    /// The call's payment settled: recorded with its spend-log `row`, the one its
    /// settle wrote (never another payment of the same agent, bot, tool and atoms).
    pub(crate) fn paid(&self, call: &Journaled, row: i64) {
        logged("payment", self.journal.paid(call.id, Some(row), self.now()));
    }

    /// The call's payment was not made.
    pub(crate) fn unpaid(&self, call: &Journaled) {
        logged("refused payment", self.journal.unpaid(call.id, self.now()));
    }

    /// A paid call whose answer did not come while its agent waited is left for the
    /// agent's retry ([`Journal::leave`](super::journal::Journal::leave)): its end then
    /// records no answer. Whether it was left.
    pub(crate) fn leave(&self, call: &Journaled) -> bool {
        let left = logged("leave", self.journal.leave(call.id, self.now())) == Some(true);
        call.left.store(left, Ordering::SeqCst);
        left
    }

    /// The call ends without an outcome of its bot's, nothing paid for it nor possibly
    /// paid: the bridge refused it (its caps, its quote, the user, a failed tip), or a
    /// priced call's send failed on the bridge's side before the bot asked for payment.
    /// Its end records it cancelled instead of keeping that answer as its outcome, so
    /// the agent's retry under its own `brmcp/callKey` is tried afresh (after the user
    /// raised a cap, or the bot came back): a key stands for what ran, as at the bot.
    pub(crate) fn refuse(&self, call: &Journaled) {
        call.refused.store(true, Ordering::SeqCst);
    }

    /// A guard of a call while it runs for its agent: a run dropped before it ended
    /// (its agent's request gone with its future) is recorded as cancelled, as an
    /// agent's cancellation is, unless the bridge is stopping.
    pub(crate) fn running<'a>(&'a self, call: &'a Journaled) -> Running<'a> {
        Running {
            calls: self,
            call,
            ended: false,
        }
    }

    /// The call ended with `outcome` for the agent: an answer (a result or an error) is
    /// kept and delivered (a paid result going out on `delivery`'s response once that
    /// response was written); a request the agent stopped waiting for (`agent_gone`) is
    /// cancelled, unless the bridge is stopping, when it is left to the next start; a
    /// call held for the agent's input or turned into a task goes on.
    pub(crate) fn finish(
        &self,
        mut running: Running<'_>,
        outcome: &Result<CallToolResponse, ErrorData>,
        agent_gone: bool,
        delivery: Option<&Delivery>,
    ) {
        running.ended = true;
        let call = running.call;
        if call.left.load(Ordering::SeqCst) {
            return;
        }
        let now = self.now();
        if call.refused.load(Ordering::SeqCst) {
            logged("cancel", self.journal.cancel(call.id, now));
            return;
        }
        // A result the call paid for stays answered until its response was written
        // (when it goes out on an HTTP response); anything else is delivered at once.
        let mut handing = Handing::Now;
        let kept = match outcome {
            Ok(CallToolResponse::Complete(result)) => {
                if delivery.is_some() {
                    handing = Handing::HeldIfPaid;
                }
                serde_json::to_string(result).map(Outcome::Result)
            }
            Ok(_) => return,
            Err(_) if agent_gone && self.closing() => return,
            Err(_) if agent_gone => {
                logged("cancel", self.journal.cancel(call.id, now));
                return;
            }
            Err(e) => serde_json::to_string(e).map(Outcome::Error),
        };
        match kept {
            Ok(kept) => {
                let answered = logged("outcome", self.journal.answer(call.id, kept, handing, now));
                if let Some(delivery) = delivery
                    && handing == Handing::HeldIfPaid
                    && answered.flatten() == Some(State::Answered)
                {
                    delivery.hand(call.id, false);
                }
            }
            Err(e) => tracing::warn!(error = %e, "call journal: outcome not kept"),
        }
    }
}

/// See [`Calls::running`].
pub(crate) struct Running<'a> {
    calls: &'a Calls,
    call: &'a Journaled,
    ended: bool,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.ended && !self.calls.closing() {
            let now = self.calls.now();
            logged("cancel", self.calls.journal.cancel(self.call.id, now));
        }
    }
}
