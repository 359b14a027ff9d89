//! One agent `tools/call`: recorded in the call journal (`bridge::calls`), which gives
//! its key (fresh, or derived from the agent's own) or the outcome it holds for a
//! repeat; forwarded under that key, paid under the user's
//! policy and reissued under the same key; for an agent on protocol 2026-07-28, held
//! for its input (the approval of the payment, or a bot's request to the client) and
//! resumed by its retry (see [`input_required`]). A priced call is checked and held
//! by the credit rules before it is sent, records the credit it collected, and never
//! ends with the bot's raw `payment_required` body (see
//! [`credit`](crate::bridge::credit) and [`credit_gate`](super::credit_gate)).

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult, ClientRequest,
    ContentBlock, ErrorData, InputRequests, InputRequiredResult, InputResponses, RequestMetaObject,
    ServerResult,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::Value;

use super::held::{BotWait, Held};
use super::input_required::{
    self, APPROVAL_INPUT, Asks, Subject, approval_request, asks_by_input_required, can_ask_approval,
};
use super::{
    Attempts, BotInput, Failure, ProxyServer, Waiting, ask, caller, complete, expect,
    forwarded_meta,
};
use crate::bridge::calls::tasks::ApprovalMark;
use crate::bridge::calls::{Begin, Delivery, Journaled};
use crate::bridge::credit::{self, MAX_REPAYS, Slot};
use crate::bridge::policy::{Ask, Refusal};
use crate::bridge::quote::{Decision, DynamicQuote, Listed, Paid, decide};
use crate::bridge::settings::{Mode, Settings};
use crate::bridge::spend::Payment;
use brmcp_adapters::protocol::{CALL_KEY_META, PaymentRequired, ToolPrice};
use unanswered::is_task_run;

mod unanswered;

/// The state of one agent `tools/call` across its sends, reissues and (for an agent
/// asked through `input_required`) its retries.
struct CallState {
    request: ClientRequest,
    /// The forwarded `_meta`, with the call key.
    meta: RequestMetaObject,
    tool: String,
    attempts: Attempts,
    paid: Option<Paid>,
    polls: u32,
    relisted: bool,
    /// For an agent asked through `input_required`: the bot's requests to the client.
    asks: Option<Asks>,
    /// Its row in the call journal.
    journal: Journaled,
    /// The tool's price as listed when the call came.
    price: Option<ToolPrice>,
    /// The call's place at its bot, for a priced call or one that paid (rule 2 of
    /// [`credit`](crate::bridge::credit)).
    slot: Option<Slot>,
    /// The spend log row of the call's latest payment.
    row: Option<i64>,
    /// Payments made again after another call of the agent collected the credit.
    repays: u32,
}

/// A call held for its agent's input (see [`input_required`]).
pub(crate) struct HeldCall {
    call: CallState,
    wait: Suspended,
}

impl HeldCall {
    /// The bot's requests the call waits on, if it waits on the bot.
    pub(super) fn into_bot_wait(self) -> Option<BotWait> {
        match self.wait {
            Suspended::Bot(wait) => Some(wait),
            Suspended::Paying(_) | Suspended::Approval { .. } => None,
        }
    }
}

/// What a held call waits on.
enum Suspended {
    /// The bot's answer, once the agent answers the bot's requests.
    Bot(BotWait),
    /// A payment settling, its approval answered; the retry that waited for it was
    /// given up.
    Paying(Settling),
    /// A payment waiting for its approval, asked of the agent: where the agent's
    /// answer goes, and the payment.
    Approval {
        answer: tokio::sync::oneshot::Sender<ask::Answer>,
        settling: Settling,
    },
}

/// A payment being settled in the background (see
/// [`ask_by_input_required`](ProxyServer::ask_by_input_required)).
struct Settling {
    /// How it was settled.
    outcome: tokio::sync::oneshot::Receiver<Result<i64, Refusal>>,
    paid: Paid,
    /// The bot's `payment_required` answer.
    quote: CallToolResult,
}

/// How asking the agent about a payment through `input_required` went.
enum Asked {
    /// The call is held; the agent's answer.
    Held(CallToolResponse),
    /// The payment was settled without the agent (refused before it was asked, or
    /// decided elsewhere): the call, how, and the bot's `payment_required` answer.
    Settled(Box<CallState>, Result<i64, Refusal>, CallToolResult),
}

/// Where a held call resumes.
enum Resume {
    Bot(Waiting),
    /// A payment, and the state its call was held under.
    Settling(Settling, String),
}

impl ProxyServer {
    /// One agent `tools/call` of the bot, paid under the user's policy (also the path
    /// of the directory tools' calls to their directory). The retry of a call held for
    /// the agent's input (its `requestState` one of ours, for this agent and tool)
    /// resumes that call; any other `requestState` is the bot's, forwarded as it came.
    pub(crate) async fn call(
        &self,
        params: CallToolRequestParams,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let subject = Subject::Tool(params.name.to_string());
        if let Some(state) = params.request_state.as_deref()
            && let Some(held) = self.link.held.take(state, caller(ctx).name(), &subject)
        {
            let Held::Call(held) = held else {
                return Err(ErrorData::internal_error("held request changed", None));
            };
            let responses = params.input_responses.unwrap_or_default();
            return self.resume(*held, state, &responses, ctx).await;
        }
        let agent = caller(ctx);
        let calls = &self.bridge.calls;
        let journal = match calls
            .begin(agent.name(), &self.link.bot, &params, ctx)
            .await?
        {
            Begin::Held { outcome, .. } => return outcome,
            Begin::Run(journal) => journal,
        };
        self.call_begun(params, journal, ctx).await
    }

    /// [`call`](Self::call) once recorded in the call journal (also the run of a task).
    pub(super) async fn call_begun(
        &self,
        params: CallToolRequestParams,
        journal: Journaled,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut meta = forwarded_meta(&ctx.meta);
        meta.insert(CALL_KEY_META.into(), Value::String(journal.key.clone()));
        let tool = params.name.to_string();
        let (price, slot) = match self.before_send(&tool, journal.sent_unpaid, ctx).await? {
            Ok(checked) => checked,
            Err(reason) => {
                let note = format!("{}: {reason}", self.bridge.config.name);
                let mut result = CallToolResult::error(vec![ContentBlock::text(note)]);
                complete(&mut result.result_type);
                // Refused before any send: nothing ran, so nothing is kept under its
                // key (but for a paid call taken over, and a task's run, whose task
                // reads its end).
                let outcome = Ok(CallToolResponse::Complete(result));
                let calls = &self.bridge.calls;
                if journal.paid.is_none() && !is_task_run(ctx) {
                    calls.refuse(&journal);
                }
                calls.finish(calls.running(&journal), &outcome, false, None);
                return outcome;
            }
        };
        let asks = asks_by_input_required(ctx).then(|| {
            let capabilities = ctx.client_capabilities().unwrap_or_default();
            Asks::new(capabilities, self.bridge.config.input_hold)
        });
        let attempts = Attempts {
            reask: credit::least_price(price).is_some() || journal.paid.is_some(),
            ..Attempts::default()
        };
        let call = CallState {
            request: ClientRequest::CallToolRequest(CallToolRequest::new(params)),
            meta,
            tool,
            attempts,
            paid: journal.paid,
            polls: 0,
            relisted: false,
            asks,
            journal,
            price,
            slot,
            row: None,
            repays: 0,
        };
        self.run_journaled(call, None, ctx).await
    }

    /// [`run`](Self::run), its end recorded in the call journal.
    async fn run_journaled(
        &self,
        call: CallState,
        resume: Option<Resume>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let journal = call.journal.clone();
        let running = self.bridge.calls.running(&journal);
        let outcome = self.run(call, resume, ctx).await;
        let agent_gone = ctx.ct.is_cancelled();
        let delivery = Delivery::of(ctx);
        self.bridge
            .calls
            .finish(running, &outcome, agent_gone, delivery.as_ref());
        outcome
    }

    /// Resumes a held call with the agent's `responses`.
    async fn resume(
        &self,
        held: HeldCall,
        state: &str,
        responses: &InputResponses,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let HeldCall { call, wait } = held;
        match wait {
            Suspended::Bot(wait) => {
                let waiting = wait.answer(responses, ctx);
                self.run_journaled(call, Some(Resume::Bot(waiting)), ctx)
                    .await
            }
            Suspended::Approval { answer, settling } => {
                let settings = self.bridge.settings();
                input_required::answer_approval(answer, responses, &settings, ctx);
                let resume = Resume::Settling(settling, state.to_owned());
                self.run_journaled(call, Some(resume), ctx).await
            }
            Suspended::Paying(settling) => {
                let resume = Resume::Settling(settling, state.to_owned());
                self.run_journaled(call, Some(resume), ctx).await
            }
        }
    }

    /// Runs a call to its answer: forwards it, pays under the user's policy and
    /// reissues it under the same key, or holds it for the agent's input.
    async fn run(
        &self,
        mut call: CallState,
        mut resume: Option<Resume>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let config = &self.bridge.config;
        // The bot's `payment_required` body is never the agent's answer: what the
        // bridge did, and for a call that paid, where its credit is.
        let refused = |reason: &dyn std::fmt::Display, call: &CallState| {
            let mut note = format!("{}: payment not made: {reason}", config.name);
            if let (Some(paid), Some(row)) = (call.paid, call.row)
                && !self.bridge.policy.credit_taken(row)
            {
                note.push_str(&format!(
                    "; the {} atoms this call paid stay with the bot as agent {:?}'s credit, \
                     which its next call to this bot uses",
                    paid.atoms,
                    caller(ctx).name()
                ));
            }
            // Nothing paid nor possibly paid: the call did not run at the bot.
            if call.paid.is_none() && !is_task_run(ctx) && !self.may_have_paid(call) {
                self.bridge.calls.refuse(&call.journal);
            }
            let mut result = CallToolResult::error(vec![ContentBlock::text(note)]);
            complete(&mut result.result_type);
            Ok(CallToolResponse::Complete(result))
        };
        loop {
            let (result, settled) = match resume.take() {
                Some(Resume::Settling(mut settling, state)) => {
                    let paid = settling.paid;
                    match self.settled(&mut settling.outcome, paid.atoms, ctx).await {
                        Ok(settled) => (settling.quote, Some((settled, paid))),
                        Err(e) => {
                            // The retry was given up while the payment settles: held
                            // again under its state, so the agent's next retry gets
                            // the paid call instead of paying anew.
                            self.hold_again(call, settling, &state, ctx);
                            return Err(e);
                        }
                    }
                }
                other => {
                    let waiting = match other {
                        Some(Resume::Bot(waiting)) => Some(waiting),
                        _ => None,
                    };
                    self.bridge.calls.sent(&mut call.journal);
                    let answer = self
                        .forward_retrying(
                            &call.request,
                            &call.meta,
                            ctx,
                            &mut call.attempts,
                            call.asks.as_mut(),
                            waiting,
                        )
                        .await;
                    let result = match answer {
                        Ok(result) => result,
                        Err(Failure::Input(input)) => {
                            return self.hold_call_for_bot(call, *input, ctx);
                        }
                        Err(e) => return Err(self.failed(&call, e, ctx)),
                    };
                    let mut result = match result {
                        ServerResult::CallToolResult(r) => r,
                        ServerResult::InputRequiredResult(r) => {
                            return Ok(CallToolResponse::InputRequired(r));
                        }
                        ServerResult::CreateTaskResult(r) => return Ok(CallToolResponse::Task(r)),
                        other => expect::<CallToolResult>(other)?,
                    };
                    complete(&mut result.result_type);
                    let Some(quote) = PaymentRequired::from_result(&result).transpose() else {
                        self.collected(&call.tool, call.paid, call.price, call.row, &result, ctx);
                        return Ok(CallToolResponse::Complete(result));
                    };
                    let tool = &call.tool;
                    let bounds = self.link.quote_bounds(tool);
                    let mut decision =
                        decide(tool, self.link.listed(tool), bounds, &quote, call.paid);
                    if let Decision::Refuse(refusal) = decision
                        && refusal.relist()
                        && !call.relisted
                    {
                        // The listing may be stale (a price changed since tools/list):
                        // the fresh one decides, once per call.
                        call.relisted = true;
                        let relist = tokio::select! {
                            biased;
                            () = ctx.ct.cancelled() => return Err(Failure::Cancelled.into()),
                            r = self.link.relist() => r,
                        };
                        if let Err(e) = relist {
                            tracing::debug!(bot = %self.link.bot, error = %e, "tools not listed again");
                        }
                        let bounds = self.link.quote_bounds(tool);
                        decision = decide(tool, self.link.listed(tool), bounds, &quote, call.paid);
                    }
                    match decision {
                        Decision::Pay { atoms, price_atoms } => {
                            // Nothing is paid for a call whose agent stopped waiting.
                            if ctx.ct.is_cancelled() {
                                return Err(Failure::Cancelled.into());
                            }
                            // A first payment also covers the part of what the bot
                            // holds (the price less its shortfall) that other agents
                            // paid and have not collected: that credit is not this
                            // call's to spend.
                            let atoms = if call.paid.is_none() {
                                let others = self
                                    .bridge
                                    .policy
                                    .others_credit(&self.link.bot, caller(ctx).name());
                                credit::first_payment(atoms, price_atoms, others)
                            } else {
                                atoms
                            };
                            let paid = Paid { price_atoms, atoms };
                            self.bridge
                                .policy
                                .credit
                                .quoted(&self.link.bot, tool, price_atoms);
                            let settings = self.bridge.settings();
                            if call.slot.is_none() {
                                // A call that comes to pay holds its bot like a priced one.
                                let alone = call.journal.sent_unpaid;
                                match self.admit(&settings, Some(price_atoms), alone, ctx).await? {
                                    Ok(slot) => call.slot = Some(slot),
                                    Err(reason) => return refused(&reason, &call),
                                }
                            }
                            self.bridge.calls.paying(&call.journal, paid);
                            let quoted = self.dynamic_quote(tool, price_atoms);
                            if settings.mode == Mode::Approval && can_ask_approval(ctx, &settings) {
                                match self
                                    .ask_by_input_required(
                                        call, &settings, paid, quoted, result, ctx,
                                    )
                                    .await?
                                {
                                    Asked::Held(response) => return Ok(response),
                                    Asked::Settled(back, settled, quote) => {
                                        call = *back;
                                        (quote, Some((settled, paid)))
                                    }
                                }
                            } else {
                                let settled =
                                    self.settle(&settings, &call, atoms, quoted, ctx).await?;
                                (result, Some((settled, paid)))
                            }
                        }
                        Decision::Refuse(refusal) => {
                            tracing::warn!(bot = %self.link.bot, tool, %refusal, "quote refused");
                            let label = self.bridge.settings().bot_label(&self.link.bot);
                            let reason = format!("bot {label} tool {tool:?}: {refusal}");
                            return refused(&reason, &call);
                        }
                        Decision::Wait => {
                            if let Some(row) = call.row
                                && call.repays < MAX_REPAYS
                                && self.bridge.policy.credit_taken(row)
                            {
                                // Another call of this agent collected this call's credit
                                // (the bot charged it first): this one pays again.
                                call.repays += 1;
                                call.paid = None;
                                call.row = None;
                                continue;
                            }
                            (result, None)
                        }
                    }
                }
            };
            match settled {
                Some((Ok(row), paid)) => {
                    call.paid = Some(paid);
                    call.attempts.reask = true;
                    call.row = Some(row);
                    if let Some(slot) = call.slot.as_mut() {
                        slot.paid(row);
                    }
                    self.bridge.calls.paid(&call.journal, row);
                    continue;
                }
                Some((Err(reason), _)) => {
                    self.bridge.calls.unpaid(&call.journal);
                    return refused(&reason, &call);
                }
                None => {}
            }
            // Paid, but the credit has not reached the bot yet.
            if call.polls >= config.poll_attempts {
                drop(result);
                // Its retry takes it over, paid, under its key (a task's run has no
                // retry: it ends with the answer below).
                // Not when another call of its agent took its credit: then it pays
                // again, which a call taken over never does.
                let task_run = is_task_run(ctx);
                let taken = call
                    .row
                    .is_some_and(|row| self.bridge.policy.credit_taken(row));
                let left = !task_run && !taken && self.bridge.calls.leave(&call.journal);
                return Ok(self.unanswered_after_paying(
                    &call.tool,
                    (call.paid, call.row),
                    (call.polls, taken, left),
                    ctx,
                ));
            }
            call.polls += 1;
            tokio::select! {
                biased;
                () = ctx.ct.cancelled() => return Err(Failure::Cancelled.into()),
                () = tokio::time::sleep(config.poll_interval) => {}
            }
        }
    }

    /// For a dynamically priced tool, its quote and the bound it was checked within,
    /// for the user's approval.
    fn dynamic_quote(&self, tool: &str, price_atoms: u64) -> Option<DynamicQuote> {
        matches!(
            self.link.listed(tool),
            Listed::Tool(Ok(Some(ToolPrice::Dynamic)))
        )
        .then(|| DynamicQuote {
            price_atoms,
            bounds: self.link.quote_bounds(tool),
        })
    }

    /// Decides and makes the payment of `atoms` for the call's tool while the agent
    /// waits, asking it by elicitation where its client can be asked.
    async fn settle(
        &self,
        settings: &Settings,
        call: &CallState,
        atoms: u64,
        quoted: Option<DynamicQuote>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Result<i64, Refusal>, ErrorData> {
        let (bot, tool) = (&self.link.bot, call.tool.as_str());
        let label = settings.bot_label(bot);
        let asked = (settings.mode == Mode::Approval)
            .then(|| ask::ask(ctx, &self.bridge, &label, tool, atoms, quoted))
            .flatten();
        let payer = caller(ctx);
        // A task's run waits for the approval: the 2025-11-25 form shows it.
        let _waiting = (settings.mode == Mode::Approval)
            .then(|| {
                ctx.extensions
                    .get::<ApprovalMark>()
                    .map(ApprovalMark::waiting)
            })
            .flatten();
        Ok(tokio::select! {
            biased;
            () = ctx.ct.cancelled() => return Err(Failure::Cancelled.into()),
            s = self.bridge.policy.settle(settings, (&payer, Some(&call.journal.key)), Payment::new(bot, tool, atoms), quoted, asked) => s,
            never = ask::progress_while_paying(ctx, &label, atoms) => match never {},
        })
    }

    /// How a payment settled in the background ends, while the agent waits.
    async fn settled(
        &self,
        outcome: &mut tokio::sync::oneshot::Receiver<Result<i64, Refusal>>,
        atoms: u64,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Result<i64, Refusal>, ErrorData> {
        let label = self.bridge.settings().bot_label(&self.link.bot);
        Ok(tokio::select! {
            biased;
            () = ctx.ct.cancelled() => return Err(Failure::Cancelled.into()),
            s = outcome => s.unwrap_or_else(|_| Err("payment not settled".into())),
            never = ask::progress_while_paying(ctx, &label, atoms) => match never {},
        })
    }

    /// Settles the payment `paid` in the background, its approval asked of the agent
    /// through `input_required` (and parked for the other channels, as always): the
    /// call is held, unless the payment is settled before it is asked (a cap refuses
    /// it) or the agent has too many calls held, when the agent waits here.
    async fn ask_by_input_required(
        &self,
        call: CallState,
        settings: &Settings,
        paid: Paid,
        quoted: Option<DynamicQuote>,
        quote: CallToolResult,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Asked, ErrorData> {
        let (answer, answered) = tokio::sync::oneshot::channel::<ask::Answer>();
        let (asking, asked) = tokio::sync::oneshot::channel::<()>();
        let (settle, mut outcome) = tokio::sync::oneshot::channel();
        let question: Ask<'static> = Box::pin(async move {
            // Polled once the caps allow the payment and it is parked.
            let _ = asking.send(());
            match answered.await {
                Ok(ask::Answer::Accept) => Ok(()),
                Ok(ask::Answer::Decline) => Err("payment declined by the user".into()),
                Ok(ask::Answer::Cancel) => Err("payment approval cancelled by the user".into()),
                // Never answered: the parked approval or its timeout decides.
                Err(_) => std::future::pending().await,
            }
        });
        let bridge = self.bridge.clone();
        let (payer, bot, tool) = (caller(ctx), self.link.bot, call.tool.clone());
        let key = call.journal.key.clone();
        let owned = settings.clone();
        tokio::spawn(async move {
            let settled = bridge
                .policy
                .settle(
                    &owned,
                    (&payer, Some(&key)),
                    Payment::new(&bot, &tool, paid.atoms),
                    quoted,
                    Some(question),
                )
                .await;
            let _ = settle.send(settled);
        });
        let parked = tokio::select! {
            biased;
            s = &mut outcome => {
                let settled = s.unwrap_or_else(|_| Err("payment not settled".into()));
                return Ok(Asked::Settled(Box::new(call), settled, quote));
            }
            a = asked => a.is_ok(),
        };
        let settling = Settling {
            outcome,
            paid,
            quote,
        };
        if !parked {
            let mut settling = settling;
            let settled = self.settled(&mut settling.outcome, paid.atoms, ctx).await?;
            return Ok(Asked::Settled(Box::new(call), settled, settling.quote));
        }
        let label = settings.bot_label(&self.link.bot);
        let request = approval_request(
            &self.bridge.config.name,
            &label,
            &call.tool,
            paid.atoms,
            quoted,
        );
        let hold = Duration::from_secs(settings.approval_timeout_secs)
            .saturating_add(Duration::from_secs(settings.tip_wait_secs))
            .saturating_add(self.bridge.config.input_hold);
        let agent = caller(ctx);
        let subject = Subject::Tool(call.tool.clone());
        let held = Held::Call(Box::new(HeldCall {
            call,
            wait: Suspended::Approval { answer, settling },
        }));
        match self
            .link
            .held
            .hold(agent.name(), &subject, held, hold, drop)
        {
            Ok(state) => {
                let mut requests = InputRequests::new();
                requests.insert(APPROVAL_INPUT.into(), request);
                Ok(Asked::Held(CallToolResponse::InputRequired(
                    InputRequiredResult::new(Some(requests), Some(state)),
                )))
            }
            Err((e, held)) => {
                tracing::info!(bot = %self.link.bot, error = %e, "approval not asked of the agent");
                let Held::Call(held) = held else {
                    return Err(ErrorData::internal_error("held request changed", None));
                };
                let HeldCall { call, wait } = *held;
                let Suspended::Approval {
                    answer,
                    mut settling,
                } = wait
                else {
                    return Err(ErrorData::internal_error("held request changed", None));
                };
                // Left to the other channels.
                drop(answer);
                let settled = self.settled(&mut settling.outcome, paid.atoms, ctx).await?;
                Ok(Asked::Settled(Box::new(call), settled, settling.quote))
            }
        }
    }

    /// Holds `call` again under `state`, its payment still settling, for the agent's
    /// next retry (the configured hold).
    fn hold_again(
        &self,
        call: CallState,
        settling: Settling,
        state: &str,
        ctx: &RequestContext<RoleServer>,
    ) {
        let subject = Subject::Tool(call.tool.clone());
        let held = Held::Call(Box::new(HeldCall {
            call,
            wait: Suspended::Paying(settling),
        }));
        let hold = self.bridge.config.input_hold;
        let agent = caller(ctx);
        if let Err((e, _)) = self
            .link
            .held
            .hold_as(state, agent.name(), &subject, held, hold, drop)
        {
            tracing::info!(bot = %self.link.bot, error = %e, "call not held again");
        }
    }

    /// Holds a call the bot asked the client something in (see
    /// [`hold_for_bot`](Self::hold_for_bot)), and answers the agent with
    /// `input_required` carrying the bot's requests.
    fn hold_call_for_bot(
        &self,
        call: CallState,
        input: BotInput,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let (wait, requests) = BotWait::new(input);
        let subject = Subject::Tool(call.tool.clone());
        let held = Held::Call(Box::new(HeldCall {
            call,
            wait: Suspended::Bot(wait),
        }));
        let asked = self.hold_for_bot(&subject, held, requests, ctx)?;
        Ok(CallToolResponse::InputRequired(asked))
    }
}
