//! How a call ends without its bot's outcome: a send that failed on the bridge's
//! side, and whether a payment of the call may have gone out, which decides whether
//! the call's key keeps the ending or its retry asks the bot again.

use rmcp::model::ErrorData;
use rmcp::service::{RequestContext, RoleServer};

use super::CallState;
use crate::bridge::calls::tasks::ApprovalMark;
use crate::bridge::proxy::{Failure, ProxyServer};
use crate::bridge::spend::SpendStatus;

impl ProxyServer {
    /// The call's send failed on the bridge's side (the bot unreachable, or silent past
    /// the answer bound), which is not the call's outcome, unlike the bot's own error
    /// answer. A paid call is left for its agent's retry (and the next start's resume),
    /// paying nothing more, and the error says so; an unpaid one to a bot that keeps
    /// its keys' outcomes (a priced tool: a serving harness) ends cancelled, so the
    /// retry under its key asks the bot again. A plain MCP server's free tool keeps
    /// the error: sent again, it would run again. A task's run keeps it: its task reads it.
    pub(super) fn failed(
        &self,
        call: &CallState,
        failure: Failure,
        ctx: &RequestContext<RoleServer>,
    ) -> ErrorData {
        let ours = matches!(failure, Failure::Transport(_) | Failure::Unanswered(_));
        let mut error = ErrorData::from(failure);
        if !ours || is_task_run(ctx) {
            return error;
        }
        if let Some(paid) = call.paid {
            if self.bridge.calls.leave(&call.journal) {
                error.message = format!(
                    "{}; {}: the call paid {} atoms and is kept, paid: called again with the \
                     same arguments (or the same brmcp/callKey), it goes on where it stands, \
                     paying nothing more",
                    error.message, self.bridge.config.name, paid.atoms
                )
                .into();
            }
        } else if call.attempts.reask && !self.may_have_paid(call) {
            self.bridge.calls.refuse(&call.journal);
        }
        error
    }

    /// Whether a payment of the call reached the spend log and was not refused or
    /// failed: a tip that may have gone out (its outcome not known) or went out.
    pub(super) fn may_have_paid(&self, call: &CallState) -> bool {
        match self
            .bridge
            .policy
            .spend
            .payment_of_key(&self.link.bot, &call.journal.key)
        {
            Ok(payment) => payment.is_some_and(|p| p.status != SpendStatus::Failed),
            Err(e) => {
                tracing::warn!(error = %e, "spend log not read");
                true
            }
        }
    }
}

/// Whether `ctx` is a task's run, whose task reads the call's end from the journal.
pub(super) fn is_task_run(ctx: &RequestContext<RoleServer>) -> bool {
    ctx.extensions.get::<ApprovalMark>().is_some()
}
