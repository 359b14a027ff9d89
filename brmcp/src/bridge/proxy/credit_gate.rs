//! The credit rules of [`credit`] at the agent-facing proxy: a priced call checked
//! and given its slot at the bot before it is sent, the credit an answered call
//! collected, and the answer of a paid call the bot still refuses for payment.

use rmcp::model::{CallToolResponse, CallToolResult, ContentBlock, ErrorData};
use rmcp::service::{RequestContext, RoleServer};

use super::{Failure, ProxyServer, caller, complete};
use crate::bridge::credit::{self, Admission, Slot};
use crate::bridge::policy::Refusal;
use crate::bridge::quote::{Listed, Paid};
use crate::bridge::settings::{Caller, Settings};
use brmcp_adapters::protocol::ToolPrice;

impl ProxyServer {
    /// Rules 1 and 2 of [`credit`] before a call's first send: the tool's listed price,
    /// and for a tool the bot sells the call's slot at the bot; a refusal when its
    /// agent could not pay the price or waited in vain for another agent's calls or
    /// credit there. A call an earlier run sent and never paid for (`sent_unpaid`)
    /// is admitted alone.
    pub(super) async fn before_send(
        &self,
        tool: &str,
        sent_unpaid: bool,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Result<(Option<ToolPrice>, Option<Slot>), Refusal>, ErrorData> {
        // The listing comes with the session; without one the send fails as it would.
        match self.conn(ctx).await {
            Ok(_) => {}
            Err(Failure::Cancelled) => return Err(Failure::Cancelled.into()),
            Err(_) => return Ok(Ok((None, None))),
        }
        let price = match self.link.listed(tool) {
            Listed::Tool(Ok(price)) => price,
            Listed::Unknown | Listed::Tool(Err(_)) => None,
        };
        let Some(least) = credit::least_price(price) else {
            return Ok(Ok((price, None)));
        };
        let settings = self.bridge.settings();
        let agent = caller(ctx);
        let label = settings.bot_label(&self.link.bot);
        if let Err(reason) = self
            .bridge
            .policy
            .may_pay(&settings, &agent, &self.link.bot, least)
        {
            return Ok(Err(format!(
                "agent {:?}'s call of bot {label} tool {tool:?} not sent, payment not made: \
                 {reason}",
                agent.name()
            )));
        }
        let most = self.link.most_price(tool, price);
        Ok(match self.admit(&settings, most, sent_unpaid, ctx).await? {
            Ok(slot) => Ok((price, Some(slot))),
            Err(reason) => Err(format!(
                "call of bot {label} tool {tool:?} not sent: {reason}"
            )),
        })
    }

    /// The call's slot at the bot (rule 2 of [`credit`]) for a call costing at `most`
    /// atoms (`None`: not known), while the agent waits; `alone` for a call an earlier
    /// run sent and never paid for.
    pub(super) async fn admit(
        &self,
        settings: &Settings,
        most: Option<u64>,
        alone: bool,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Result<Slot, Refusal>, ErrorData> {
        let agent: Caller = caller(ctx);
        let wait = self.bridge.config.credit_wait;
        let admission = if alone {
            Admission::Alone
        } else {
            Admission::at(self.reserves_credit())
        };
        let bot = &self.link.bot;
        Ok(tokio::select! {
            biased;
            () = ctx.ct.cancelled() => return Err(Failure::Cancelled.into()),
            s = self.bridge.policy.admit(settings, bot, agent.name(), (wait, admission), most) => s,
        })
    }

    /// Whether the bot's session (running or parked) says it reserves credit per call
    /// (rule 2 of [`credit`]); not without a session, nor when the flag is malformed.
    fn reserves_credit(&self) -> bool {
        self.link.about().is_some_and(|about| about.reserves_credit)
    }

    /// Rule 4 of [`credit`]: a priced call answered (not an error, which the bot
    /// refunds) collected its price from the credit at the bot.
    pub(super) fn collected(
        &self,
        tool: &str,
        paid: Option<Paid>,
        price: Option<ToolPrice>,
        row: Option<i64>,
        result: &CallToolResult,
        ctx: &RequestContext<RoleServer>,
    ) {
        if result.is_error == Some(true) {
            return;
        }
        let credit = &self.bridge.policy.credit;
        let atoms = match (paid, price) {
            (Some(paid), _) => paid.price_atoms,
            (None, Some(ToolPrice::Fixed(n))) if n > 0 => n,
            // A price the bridge was not told: the last one quoted (see `credit`).
            (None, Some(ToolPrice::Dynamic)) => match credit.last_quote(&self.link.bot, tool) {
                Some(n) => n,
                None => return,
            },
            // Free, or not sold.
            _ => return,
        };
        let agent = caller(ctx);
        self.bridge
            .policy
            .collect(&self.link.bot, agent.name(), tool, row, atoms);
    }

    /// The answer to a paid call the bot still refuses for payment after the polls:
    /// what was paid, where the credit is, and what to do.
    pub(super) fn unanswered_after_paying(
        &self,
        tool: &str,
        (paid, row): (Option<Paid>, Option<i64>),
        (polls, taken, left): (u32, bool, bool),
        ctx: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let label = self.bridge.settings().bot_label(&self.link.bot);
        let agent = caller(ctx);
        let paid = paid.map_or(0, |p| p.atoms);
        let row = row.map_or_else(String::new, |r| format!(" (spend log row {r})"));
        tracing::warn!(bot = %self.link.bot, tool, paid, taken, "paid call still refused for payment");
        let whose = if left {
            format!(
                "the credit stays with the bot as agent {:?}'s and the call is kept, paid \
                 (called again with the same arguments, it goes on where it stands, paying \
                 nothing more)",
                agent.name()
            )
        } else if taken {
            format!(
                "the credit went to another call of agent {:?}, which the bot answered first",
                agent.name()
            )
        } else {
            format!(
                "the credit stays with the bot as agent {:?}'s, and its next call to this bot \
                 uses it",
                agent.name()
            )
        };
        let note = format!(
            "{}: paid {paid} atoms to bot {label} for tool {:?}{row}, but the bot still asks \
             for payment after {} reissues; {whose}: call the tool again",
            self.bridge.config.name, tool, polls,
        );
        let mut result = CallToolResult::error(vec![ContentBlock::text(note)]);
        complete(&mut result.result_type);
        CallToolResponse::Complete(result)
    }
}
