//! On start: every call an earlier run left in flight is asked of its bot again under
//! its key, once the bot's link is up. The harness answers a completed call with its
//! result, waits a duplicate for a running one, and runs nothing again; the outcome
//! is kept for the agent's retry. An answer that is no outcome of the call (a refusal
//! that says to ask again, go-sdk's empty success) is not kept: the call is asked
//! again after a pause. Nothing is paid: a call the journal says was paid
//! that the bot still asks payment for ends with a tool error saying what was paid,
//! as on a live call.

use std::sync::Arc;
use std::time::Duration;

use brmcp_adapters::protocol::{
    CALL_INTERRUPTED, CALL_KEY_META, PaymentRequired, ToolPrice, is_no_outcome,
};
use brmcp_adapters::{PeerId, REQUEST_TIMEOUT, is_session_lost};
use rmcp::ServiceError;
use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CallToolResult, CancelledNotificationParam,
    ClientRequest, ContentBlock, RequestMetaObject, ResultType, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::journal::{HELD_SECS, Handing, Outcome, Row};
use super::{Calls, Live, logged};
use crate::bridge::Inner;
use crate::bridge::credit::Admission;
use crate::bridge::link::BotLink;
use crate::bridge::proxy::MAX_INTERRUPTED_RETRIES;
use crate::bridge::proxy::reask::MAX_REASKS;
use crate::bridge::quote::Listed;
use crate::bridge::spend::{CallPayment, SpendEntry, SpendLog, SpendStatus};

/// Pause before trying a bot again that could not be reached or lost the session: 5 s.
const RESUME_RETRY: Duration = Duration::from_secs(5);

/// Longest wait for the bot's answer to one resumed send: 2 minutes. Then the call is
/// sent again under its key: a session lost meanwhile cannot hold it for ever, and the
/// harness has a duplicate of a running call wait for it.
const RESUME_WAIT: Duration = Duration::from_secs(120);

/// Resumes, each in its own task, the calls earlier runs left in flight; once per
/// process.
pub(crate) fn resume(inner: &Arc<Inner>) {
    let calls = &inner.calls;
    if calls
        .resumed
        .swap(true, std::sync::atomic::Ordering::SeqCst)
    {
        return;
    }
    let Some(rows) = logged("resume", calls.journal.in_flight_before(&calls.run)) else {
        return;
    };
    for row in rows {
        let Ok(live) = calls.take_live(row.id) else {
            continue;
        };
        tracing::info!(agent = %row.agent, bot = %row.bot, tool = %row.tool, key = %row.key, paid = row.paid(), "resuming a call an earlier run left in flight");
        let inner = inner.clone();
        tokio::spawn(async move { resume_one(&inner, row, live).await });
    }
}

/// The request of `row` as it was sent, under its key.
fn request_of(row: &Row) -> Option<(ClientRequest, RequestMetaObject)> {
    let stored: Value = serde_json::from_str(&row.params).ok()?;
    let name = stored.get("name")?.as_str()?.to_owned();
    let mut params = CallToolRequestParams::new(name);
    if let Some(Value::Object(args)) = stored.get("arguments") {
        params = params.with_arguments(args.clone());
    }
    let mut meta = RequestMetaObject::new();
    meta.insert(CALL_KEY_META.into(), Value::String(row.key.clone()));
    Some((
        ClientRequest::CallToolRequest(CallToolRequest::new(params)),
        meta,
    ))
}

/// What the spend log's lookup of `row`'s payment needs.
fn call_payment<'a>(row: &'a Row, bot: &'a PeerId) -> CallPayment<'a> {
    CallPayment {
        bot,
        key: &row.key,
        agent: &row.agent,
        tool: &row.tool,
        atoms: row.paid_atoms.saturating_add(row.paying_atoms),
        since: row.created,
    }
}

/// The spend log's row of the call's latest payment (see
/// [`SpendLog::payment_for_call`]); for a payment the journal settled, the row it
/// recorded. `None`: no payment of the call reached the log.
fn spend_entry(inner: &Inner, row: &Row) -> Result<Option<SpendEntry>, String> {
    let spend = &inner.policy.spend;
    let bot: PeerId = row.bot.parse().map_err(|_| format!("bot {:?}", row.bot))?;
    if let Some(entry) = spend
        .payment_for_call(&call_payment(row, &bot))
        .map_err(|e| e.to_string())?
    {
        return Ok(Some(entry));
    }
    let Some(id) = row.spend_id else {
        return Ok(None);
    };
    spend.payment(id).map_err(|e| e.to_string())
}

/// Records as not made each payment the journal says an earlier run was about to
/// make and that never reached the spend log: the run died between the two writes (a
/// payment's approval waits there), so no tip went out. A call paying again has its
/// earlier payment in the log, the one the journal recorded: that is not this one.
/// Run once as the bridge opens, before a resume or an agent's retry reads the rows:
/// they then neither count the call as paid (and wait for credit that never comes, or
/// run on another agent's) nor pay for it twice.
pub(crate) fn unpaid_unreserved(calls: &Calls, spend: &SpendLog) {
    let Some(rows) = logged("payment check", calls.journal.in_flight_before(&calls.run)) else {
        return;
    };
    for row in rows.iter().filter(|r| r.paying_atoms > 0) {
        let Ok(bot) = row.bot.parse::<PeerId>() else {
            continue;
        };
        let Ok(latest) = spend.payment_for_call(&call_payment(row, &bot)) else {
            continue;
        };
        if latest.is_none_or(|e| Some(e.id) == row.spend_id) {
            tracing::info!(agent = %row.agent, bot = %row.bot, tool = %row.tool, key = %row.key, "a payment an earlier run was about to make was never made");
            logged("payment check", calls.journal.unpaid(row.id, calls.now()));
        }
    }
}

/// Whether the call paid, or may have: a settled payment, or one whose end the
/// journal did not record and the spend log does not say failed. A payment the
/// journal was about to make that never reached the spend log was not made (a crash
/// came between the two); one the log cannot be read for may have been.
fn may_have_paid(inner: &Inner, row: &Row) -> bool {
    if row.paid_atoms > 0 {
        return true;
    }
    if row.paying_atoms == 0 {
        return false;
    }
    match spend_entry(inner, row) {
        Ok(entry) => entry.is_some_and(|e| e.status != SpendStatus::Failed),
        Err(e) => {
            tracing::warn!(key = %row.key, error = %e, "spend log not read: the call counts as paid");
            true
        }
    }
}

/// What the spend log says of the call's payment, for the agent, and whether its tip's
/// outcome is still unknown (the row is pending).
fn payment_note(inner: &Inner, row: &Row) -> (String, bool) {
    let atoms = row.paid_atoms.saturating_add(row.paying_atoms);
    let (status, pending) = match spend_entry(inner, row) {
        Ok(Some(e)) => (
            format!(" (spend log row {}: {})", e.id, e.status.as_str()),
            e.status == SpendStatus::Pending,
        ),
        Ok(None) => (String::new(), false),
        Err(e) => (format!(" (spend log not read: {e})"), false),
    };
    (format!("{atoms} atoms{status}"), pending)
}

/// The answer to a resumed paid call the bot still asks payment for: what was paid,
/// where its credit is, and what to do.
fn not_paid_again(inner: &Inner, bot: &PeerId, row: &Row) -> String {
    let label = inner.settings().bot_label(bot);
    let (paid, pending) = payment_note(inner, row);
    let whose = if pending {
        format!(
            "its tip's outcome is not known yet: if it reached the bot, the credit is agent \
             {:?}'s there and its next call uses it; if not, its next call pays what the bot \
             asks",
            row.agent
        )
    } else {
        format!(
            "the credit stays with the bot as agent {:?}'s, and its next call to this bot \
             uses it",
            row.agent
        )
    };
    format!(
        "{}: paid {paid} to bot {label} for tool {:?} before it restarted, and the bot asks \
         for payment again; it was not paid again, and {whose}: call the tool again",
        inner.config.name, row.tool
    )
}

/// What the bot charged a resumed call it answered: the price its payment was made
/// against, else the tool's listed price (the last quoted, for a dynamic one); `None`
/// for a free tool.
fn charged_price(inner: &Inner, link: &BotLink, bot: &PeerId, row: &Row) -> Option<u64> {
    if row.price_atoms > 0 {
        return Some(row.price_atoms);
    }
    match link.listed(&row.tool) {
        Listed::Tool(Ok(Some(ToolPrice::Fixed(n)))) if n > 0 => Some(n),
        Listed::Tool(Ok(Some(ToolPrice::Dynamic))) => {
            inner.policy.credit.last_quote(bot, &row.tool)
        }
        _ => None,
    }
}

async fn resume_one(inner: &Inner, row: Row, live: Live) {
    let calls = &inner.calls;
    let deadline = row.updated.saturating_add(HELD_SECS);
    let (Ok(bot), Some((request, meta))) = (row.bot.parse::<PeerId>(), request_of(&row)) else {
        logged("resume", calls.journal.cancel(row.id, calls.now()));
        return;
    };
    let Some(link) = inner.link(&bot) else {
        tracing::info!(%bot, key = %row.key, "call not resumed: the bot is no longer allowed");
        return;
    };
    // Its task's cancel (the agent's `tasks/cancel`) stops it here too.
    let stop = CancellationToken::new();
    let _run = calls.task_resumed(row.id, stop.clone());
    let mut interrupted = 0;
    let mut stand_ins = 0;
    let mut polls = 0;
    let mut slot = None;
    loop {
        if stop.is_cancelled() {
            return;
        }
        if calls.now() > deadline || link.closed.is_cancelled() {
            tracing::info!(%bot, key = %row.key, "call not resumed within its replay window");
            return;
        }
        let conn = match link.ensure().await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::debug!(%bot, error = %e, "resume: bot not reached yet");
                tokio::time::sleep(RESUME_RETRY).await;
                continue;
            }
        };
        // A priced call never paid is charged from the bot's balance if it runs: it
        // takes its slot at the bot first, as any priced call does (rule 2 of
        // `credit`), so it runs on no other agent's credit. Alone: a bot that reserves
        // credit may hold it waiting, and reserve for it the next tip of its price,
        // whichever agent paid it.
        if slot.is_none()
            && !may_have_paid(inner, &row)
            && let Some(most) = unpaid_priced(&link, &row)
        {
            let settings = inner.settings();
            let wait = (inner.config.credit_wait, Admission::Alone);
            let admitted = tokio::select! {
                () = stop.cancelled() => return,
                s = inner.policy.admit(&settings, &bot, &row.agent, wait, most) => s,
            };
            match admitted {
                Ok(admitted) => slot = Some(admitted),
                Err(why) => {
                    tracing::info!(%bot, key = %row.key, %why, "resumed call not sent; left for its agent's retry");
                    return;
                }
            }
        }
        logged("send", calls.journal.sent(row.id, calls.now()));
        let options = PeerRequestOptions::no_options().with_meta(meta.clone());
        let handle = match conn
            .peer()
            .send_request_with_option(request.clone(), options)
            .await
        {
            Ok(handle) => handle,
            Err(e) => {
                tracing::debug!(%bot, error = %e, "resume: not sent");
                link.reset(&conn);
                tokio::time::sleep(RESUME_RETRY).await;
                continue;
            }
        };
        let id = handle.id.clone();
        let answer = tokio::select! {
            () = link.closed.cancelled() => return,
            () = stop.cancelled() => {
                // Cancelled by its agent (the journal says so already): the bot stops
                // it and refunds what it charged.
                let cancelled = CancelledNotificationParam::new(Some(id), Some("cancelled by its agent".into()));
                let _ = conn.peer().notify_cancelled(cancelled).await;
                return;
            }
            a = tokio::time::timeout(RESUME_WAIT, handle.await_response()) => a,
        };
        let Ok(answer) = answer else { continue };
        let now = calls.now();
        let result = match answer {
            Ok(ServerResult::CallToolResult(result)) => result,
            Ok(other) => match crate::bridge::reshape::<CallToolResult>(other, "bot's answer") {
                Ok(result) => result,
                // Input required, or a task: nothing the bridge can take without its agent.
                Err(_) => {
                    tracing::info!(%bot, key = %row.key, "resumed call needs its agent: left");
                    logged("resume", calls.journal.cancel(row.id, now));
                    return;
                }
            },
            Err(ServiceError::McpError(e))
                if e.code == CALL_INTERRUPTED && interrupted < MAX_INTERRUPTED_RETRIES =>
            {
                interrupted += 1;
                continue;
            }
            Err(ServiceError::McpError(e)) if e.code == REQUEST_TIMEOUT || is_session_lost(&e) => {
                link.reset(&conn);
                tokio::time::sleep(RESUME_RETRY).await;
                continue;
            }
            Err(ServiceError::McpError(e)) => {
                let kept = serde_json::to_string(&e).unwrap_or_default();
                logged(
                    "outcome",
                    calls
                        .journal
                        .answer(row.id, Outcome::Error(kept), Handing::Held, now),
                );
                return;
            }
            Err(e) => {
                tracing::debug!(%bot, error = %e, "resume: session failed");
                link.reset(&conn);
                tokio::time::sleep(RESUME_RETRY).await;
                continue;
            }
        };
        if is_no_outcome(&result) {
            // Not the call's outcome (the original still runs where the bot cannot wait
            // for it, say): asked again, a bounded number of times, then left for its
            // agent's retry.
            stand_ins += 1;
            if stand_ins > MAX_REASKS {
                tracing::info!(%bot, key = %row.key, "resumed call answered no outcome: left for its agent's retry");
                return;
            }
            tokio::time::sleep(RESUME_RETRY).await;
            continue;
        }
        if matches!(PaymentRequired::from_result(&result), Ok(Some(_))) {
            if !may_have_paid(inner, &row) {
                // Never paid, never run: nothing is owed, and the agent's retry is a
                // call of its own.
                tracing::info!(%bot, key = %row.key, "resumed call was never paid: dropped");
                logged("resume", calls.journal.cancel(row.id, now));
                return;
            }
            if polls < inner.config.poll_attempts {
                // The payment may not have reached the bot yet.
                polls += 1;
                tokio::time::sleep(inner.config.poll_interval).await;
                continue;
            }
            // A tool error, as the same refusal on a live call is: the call ended, and
            // the agent's retry (under a new key) is a call of its own.
            let mut refused =
                CallToolResult::error(vec![ContentBlock::text(not_paid_again(inner, &bot, &row))]);
            refused.result_type.get_or_insert(ResultType::COMPLETE);
            hold(calls, row.id, &refused, now);
            return;
        }
        if result.is_error != Some(true)
            && let Some(price) = charged_price(inner, &link, &bot, &row)
        {
            // Charged: it collects its credit (rule 4 of `credit`), or the spend log
            // would keep credit the bot no longer holds, holding other agents back.
            let own = may_have_paid(inner, &row)
                .then(|| spend_entry(inner, &row).ok().flatten())
                .flatten()
                .filter(|e| e.status != SpendStatus::Failed)
                .map(|e| e.id);
            inner
                .policy
                .collect(&bot, &row.agent, &row.tool, own, price);
        }
        if hold(calls, row.id, &result, now) {
            tracing::info!(%bot, key = %row.key, "resumed call answered; held for its agent");
        }
        drop((live, slot));
        return;
    }
}

/// Keeps `result` as journal row `id`'s outcome, held for its agent's retry; whether
/// it was kept.
fn hold(calls: &Calls, id: i64, result: &CallToolResult, now: i64) -> bool {
    match serde_json::to_string(result) {
        Ok(kept) => logged(
            "outcome",
            calls
                .journal
                .answer(id, Outcome::Result(kept), Handing::Held, now),
        )
        .is_some(),
        Err(e) => {
            tracing::warn!(error = %e, "call journal: outcome not kept");
            false
        }
    }
}

/// For a call of a tool the bot sells, the most a call of it can cost (`None`: not
/// known); `None` for a free tool or one not listed.
fn unpaid_priced(link: &BotLink, row: &Row) -> Option<Option<u64>> {
    let Listed::Tool(Ok(price)) = link.listed(&row.tool) else {
        return None;
    };
    crate::bridge::credit::least_price(price)?;
    Some(link.most_price(&row.tool, price))
}
