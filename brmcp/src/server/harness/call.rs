//! One `tools/call` after lookup and argument decoding (steps 3 to 9 of the harness's
//! order): the key claim, the rate limit, the price, the debit, the handler and its
//! outcome.

use std::sync::Arc;

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol::{BILLING_UNAVAILABLE, DUPLICATE_IN_PROGRESS, ORIGINAL_CALL_FAILED};
use brmcp_adapters::wire::SessionId;
use rmcp::model::{CallToolResult, ContentBlock, RequestId};
use rmcp::service::{RequestContext, RoleServer};

use tokio::sync::oneshot;

use super::stop::{Run, Running, Stop};
use super::{Counters, HarnessError, Shared, fit};
use crate::server::billing::{CallId, CallRequest, Charge, Keyed, Origin};
use crate::server::call_key::{ArgsHash, CallKey};
use crate::server::calls::Claim;
use crate::server::rate_limit::{CallRef, RATE_LIMITED};
use crate::server::tools::{CallContext, PreparedCall};

/// The longest handler error message kept in a refund's reason, in bytes.
const MAX_REASON_LEN: usize = 256;

/// The refund reason of a call whose answer was over [`fit::max_answer_bytes`].
pub const ANSWER_TOO_LARGE: &str = "answer too large to deliver";

/// The refund reason of a call whose answer could not be serialized.
const ANSWER_UNSENDABLE: &str = "answer does not serialize";

impl Shared {
    /// One `tools/call` after lookup and argument decoding: steps 3 to 9.
    ///
    /// [`Stop`] when a graceful stop took the call, or refused it as it began.
    pub(super) async fn call(
        self: Arc<Self>,
        call: Call,
        prepared: Box<dyn PreparedCall>,
        request: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let owner = match &call.keyed {
            None => None,
            Some((key, args)) => {
                match self
                    .in_flight
                    .claim(call.caller, key, (&call.tool, *args), &request.ct)
                {
                    Claim::Conflict(conflict) => {
                        Counters::bump(&self.counters.key_conflicts);
                        return Ok(refusal(conflict.to_string()));
                    }
                    Claim::Wait(waiter) => {
                        Counters::bump(&self.counters.waited);
                        let _registered =
                            self.waiting.register(&call.origin, waiter.owner_cancel());
                        return Ok(waiter
                            .answer()
                            .await
                            .unwrap_or_else(|| refusal(ORIGINAL_CALL_FAILED)));
                    }
                    Claim::Owner(owner) => Some(owner),
                }
            }
        };
        // Its own task: the request may be dropped (cancelled, session closed), but the
        // charge must still be completed or refunded and duplicates answered.
        let task = tokio::spawn(async move {
            let answer = self.run(call, prepared, request).await;
            if let Some(owner) = owner
                && let Ok(answer) = &answer
            {
                owner.finish(answer.clone());
            }
            answer
        });
        task.await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "tool call task failed");
            Ok(refusal("internal error"))
        })
    }

    /// Steps 3 (the ledger's side) to 9, for the owner of the call's key.
    async fn run(
        &self,
        call: Call,
        prepared: Box<dyn PreparedCall>,
        request: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        let Call {
            caller,
            tool,
            keyed,
            args,
            origin,
            priced,
        } = call;
        if let Some((key, args)) = &keyed {
            let now = self.clock.now();
            let at_once = self
                .billing
                .try_held(&caller, &tool, Keyed { key, args: *args }, now);
            let (key, args, name) = (key.clone(), *args, tool.clone());
            let held = self
                .or_blocking(at_once, move |b| {
                    b.held(&caller, &name, Keyed { key: &key, args }, now)
                })
                .await;
            match held {
                Ok(None) => {}
                Ok(Some(answer)) => return Ok(self.answer(answer, &tool)),
                Err(e) => return Ok(store_failure(&e)),
            }
        }
        let call_ref = match &keyed {
            Some((key, _)) => CallRef::Key(key.clone()),
            None => CallRef::Args(tool.clone(), args),
        };
        let Some(ticket) = self
            .limiter
            .take_for(&caller, &call_ref, self.clock.since_epoch())
        else {
            Counters::bump(&self.counters.rate_limited);
            return Ok(refusal(RATE_LIMITED));
        };
        // The rate counts runs: a call refused from here on hands its ticket back, or
        // (refused for payment) keeps it for its reissue.
        let give_back = |ticket| {
            let now = self.clock.since_epoch();
            self.limiter
                .give_back(&caller, call_ref.clone(), ticket, now);
        };
        let price_atoms = match prepared.price(&caller).await {
            Ok(price) => {
                let _ = priced.set(price);
                price
            }
            Err(message) => {
                // A price asked of someone else was work done: its ticket is spent.
                if !prepared.price_is_asked() {
                    give_back(ticket);
                }
                self.release_reserved(caller, keyed.as_ref()).await;
                return Ok(refusal(message));
            }
        };
        let charged = if self.running.stopping() {
            give_back(ticket);
            return Err(self.refused_at_stop(caller, &tool, origin, None).await);
        } else if price_atoms == 0 && keyed.is_none() {
            None
        } else {
            let now = self.clock.now();
            let (sid, request_id) = origin;
            let request = CallRequest {
                caller,
                tool: &tool,
                price_atoms,
                keyed: keyed.as_ref().map(|(key, args)| Keyed { key, args: *args }),
            };
            let at_once = self.billing.try_charge_from(
                &request,
                Some(Origin {
                    sid,
                    request_id: &request_id,
                }),
                now,
            );
            let (name, key) = (tool.clone(), keyed.clone());
            let charge = self
                .or_blocking(at_once, move |b| {
                    let request = CallRequest {
                        caller,
                        tool: &name,
                        price_atoms,
                        keyed: key.as_ref().map(|(key, args)| Keyed { key, args: *args }),
                    };
                    let origin = Origin {
                        sid,
                        request_id: &request_id,
                    };
                    b.charge_from(&request, Some(origin), now)
                })
                .await;
            match charge {
                Ok(Charge::Run(id)) => Some(id),
                Ok(answer @ Charge::Insufficient(_)) => {
                    let now = self.clock.since_epoch();
                    self.limiter.reserve(&caller, call_ref.clone(), ticket, now);
                    return Ok(self.answer(answer, &tool));
                }
                Ok(answer) => {
                    give_back(ticket);
                    return Ok(self.answer(answer, &tool));
                }
                Err(e) => {
                    give_back(ticket);
                    return Ok(store_failure(&e));
                }
            }
        };

        let request_id = request.id.clone();
        // Every call registers, so a graceful stop can end it (and then owns its end);
        // one charged as the stop began is refunded here and told so.
        let (stop_tx, stop_rx) = oneshot::channel();
        let run = charged.map_or_else(|| self.running.free(), Run::Charged);
        let running = Running {
            caller,
            sid: origin.0,
            request_id: request_id.clone(),
            stop: stop_tx,
        };
        if !self.running.start(run, running) {
            return Err(self
                .refused_at_stop(caller, &tool, (origin.0, request_id), charged)
                .await);
        }
        let context = CallContext {
            caller,
            tool: tool.clone(),
            price_atoms,
            call_key: keyed.map(|(key, _)| key),
            request,
        };
        // Its own task, so a panicking handler is an error answer, not a lost charge.
        Counters::bump(&self.counters.runs);
        let handler = tokio::spawn(prepared.run(context));
        let abort = handler.abort_handle();
        let joined = tokio::select! {
            joined = handler => Some(joined),
            _ = stop_rx => None,
        };
        let stopped = joined.is_none() || !self.running.finish(run);
        let Some(joined) = joined.filter(|_| !stopped) else {
            // The stop owns the call's end: it refunds it and answers its caller.
            abort.abort();
            return Err(Stop::Answered);
        };
        let (result, refund_reason) = match joined {
            Ok(Ok(result)) => (result, None),
            Ok(Err(e)) => self.failed(e.message()),
            Err(e) => {
                tracing::error!(%tool, error = %e, "tool handler panicked");
                self.failed("tool failed")
            }
        };
        // Framed before the charge is completed: an answer that cannot reach the caller
        // is refused and refunded, never charged and lost.
        let (result, outcome, refund_reason) =
            self.frame(result, refund_reason, &request_id, charged.is_some(), &tool);
        if let Some(id) = charged {
            self.finish(id, outcome, refund_reason).await;
        }
        Ok(result)
    }

    /// A call that came as the harness stopped, refused: a `charged` one refunded as
    /// interrupted (its key released, its credit held for its retry), an uncharged one
    /// recorded as refused (credit reserved for it stays reserved); either way its
    /// caller is kept to be told, so a refusal the closing session never carries
    /// reaches it from the next start.
    async fn refused_at_stop(
        &self,
        caller: PeerId,
        tool: &Arc<str>,
        origin: (SessionId, RequestId),
        charged: Option<CallId>,
    ) -> Stop {
        let (name, now) = (tool.clone(), self.clock.now());
        let mark = self
            .blocking(move |b| match charged {
                Some(id) => b.interrupt(id, now).map(|()| Some(id)),
                None => {
                    let (sid, request_id) = origin;
                    let origin = Origin {
                        sid,
                        request_id: &request_id,
                    };
                    b.refuse_stopping(&caller, &name, origin, now)
                }
            })
            .await;
        Stop::Refused(mark.unwrap_or_else(|e| {
            // A charge still pending is refunded and told at the next start.
            tracing::error!(error = %e, "call refused at the stop not recorded");
            None
        }))
    }

    /// A keyed call refused before its charge for a reason other than payment lets go
    /// of credit reserved for it ([`Billing::release_reserved`]); logged, never failing
    /// the refusal.
    pub(super) async fn release_reserved(
        &self,
        caller: PeerId,
        keyed: Option<&(CallKey, ArgsHash)>,
    ) {
        let Some((key, _)) = keyed else { return };
        let key = key.as_str().to_owned();
        if let Err(e) = self
            .blocking(move |b| b.release_reserved(&caller, &key))
            .await
        {
            tracing::warn!(%caller, error = %e, "credit reserved for a refused call not released");
        }
    }

    /// A handler's failure: its message as the answer, and the refund reason.
    fn failed(&self, message: &str) -> (CallToolResult, Option<String>) {
        Counters::bump(&self.counters.handler_errors);
        (refusal(message), Some(reason(message)))
    }

    /// The answer as it will be sent, its JSON (kept for the key's replay) and the
    /// refund reason: `result` if it fits one message, else a refusal saying why,
    /// refunded.
    fn frame(
        &self,
        result: CallToolResult,
        refund_reason: Option<String>,
        request_id: &RequestId,
        charged: bool,
        tool: &str,
    ) -> (CallToolResult, Option<String>, Option<String>) {
        let json = match serde_json::to_string(&result) {
            Ok(json) => json,
            Err(e) => {
                // Not reachable for rmcp's types; rmcp could not send it either.
                tracing::error!(%tool, error = %e, "tool result does not serialize");
                let result = refusal("internal error: the answer does not serialize");
                let json = serde_json::to_string(&result).ok();
                return (result, json, Some(ANSWER_UNSENDABLE.to_owned()));
            }
        };
        if fit::fits(json.len(), request_id, &self.router_config) {
            return (result, Some(json), refund_reason);
        }
        Counters::bump(&self.counters.answers_too_large);
        tracing::warn!(%tool, bytes = json.len(), "answer too large to deliver; refused");
        let result = refusal(fit::too_large(json.len(), &self.router_config, charged));
        let json = serde_json::to_string(&result).ok();
        (result, json, Some(ANSWER_TOO_LARGE.to_owned()))
    }

    /// The result of a call the store answered without a run, counted.
    fn answer(&self, charge: Charge, tool: &str) -> CallToolResult {
        self.counters.count_answer(&charge);
        answer_for(charge, tool)
    }

    /// Completes (no `refund_reason`) or refunds a charged call, keeping `outcome` (the
    /// answer's JSON) as its key's answer. Without an outcome the call stays pending
    /// and is refunded on the next start.
    async fn finish(&self, id: CallId, outcome: Option<String>, refund_reason: Option<String>) {
        let Some(outcome) = outcome else {
            tracing::error!(call = %id, "call outcome not recorded: no answer to keep");
            return;
        };
        let now = self.clock.now();
        let done = match refund_reason {
            // Committed at once, then synced on the blocking pool before the answer.
            None => match self.billing.try_complete(id, &outcome, now) {
                Some(Ok(commit)) => self.blocking(move |b| b.synced(commit)).await,
                Some(Err(e)) => Err(e.into()),
                None => self.blocking(move |b| b.complete(id, &outcome, now)).await,
            },
            Some(reason) => {
                self.blocking(move |b| b.refund(id, &reason, Some(&outcome), now))
                    .await
            }
        };
        if let Err(e) = done {
            // The call stays pending in the store and is refunded on the next start.
            tracing::error!(call = %id, error = %e, "call outcome not recorded");
        }
    }
}

/// Who calls which tool, with which key.
pub(super) struct Call {
    pub(super) caller: PeerId,
    pub(super) tool: Arc<str>,
    pub(super) keyed: Option<(CallKey, ArgsHash)>,
    /// The hash of its arguments (a reissue without a key is known by it).
    pub(super) args: ArgsHash,
    /// The caller's session and the request's id, kept with a charge.
    pub(super) origin: (SessionId, RequestId),
    /// Its price, once priced (for the call log; a price asked of an upstream is asked
    /// once).
    pub(super) priced: Arc<std::sync::OnceLock<u64>>,
}

/// A tool error result with one text content.
pub(super) fn refusal(message: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message.into())])
}

/// The answer for anything [`Billing::charge`] or [`Billing::held`] says other than
/// `Run`.
fn answer_for(charge: Charge, tool: &str) -> CallToolResult {
    match charge {
        Charge::Replay(outcome) => serde_json::from_str(&outcome).unwrap_or_else(|e| {
            tracing::error!(error = %e, "stored outcome does not parse");
            refusal("duplicate call: stored outcome unreadable")
        }),
        Charge::Insufficient(shortfall) => refusal(shortfall.payment_required_json(tool)),
        Charge::OutcomeNotRetained => refusal(
            "duplicate call: outcome not retained (too large, or dropped by the per-caller bound)",
        ),
        Charge::InProgress => refusal(DUPLICATE_IN_PROGRESS),
        Charge::KeyConflict(conflict) => refusal(conflict.to_string()),
        Charge::Run(id) => {
            // Never passed here; a charge without a handler run would stay pending.
            tracing::error!(call = %id, "charge answered without a run");
            refusal("internal error")
        }
    }
}

fn store_failure(e: &HarnessError) -> CallToolResult {
    tracing::error!(error = %e, "billing store failed");
    refusal(BILLING_UNAVAILABLE)
}

/// A refund reason: the handler's message, cut to [`MAX_REASON_LEN`] bytes.
fn reason(message: &str) -> String {
    let mut end = message.len().min(MAX_REASON_LEN);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("handler error: {}", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refund_reasons_are_cut_on_a_char_boundary() {
        let long = "é".repeat(200);
        let cut = reason(&long);
        assert!(cut.len() <= "handler error: ".len() + MAX_REASON_LEN);
        assert!(cut.starts_with("handler error: éé"));
        assert_eq!(reason("boom"), "handler error: boom");
    }
}
