//! The user's side of a payment waiting for approval, where the agent is: progress
//! notifications that keep its client waiting, and the approval question itself
//! (`elicitation/create`) when its client declared elicitation and the settings let
//! the agent approve its payments ([`Approver`]). [`confirm`] puts any
//! other yes-or-no question to the user the same way (adding a bot found in a
//! directory).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rmcp::model::{
    CancelledNotificationParam, ClientCapabilities, ElicitRequest, ElicitRequestParams,
    ElicitationAction, ElicitationSchema, ProgressNotificationParam, ProtocolVersion,
    ServerRequest,
};
use rmcp::model::{ClientResult, GetExtensions};
use rmcp::service::{OriginatingRequestId, PeerRequestOptions, RequestContext, RoleServer};

use crate::bridge::policy::Ask;
use crate::bridge::quote::DynamicQuote;
use crate::bridge::{Approver, Inner};

/// How often the agent hears that its call still waits on a payment. Clients that
/// reset their request timeout on progress (as the MCP SDKs can) then wait as long as
/// the approval and the tip take; 5 s is well inside the shortest common timeouts
/// (10 s and up) without flooding the agent.
pub(crate) const PROGRESS_INTERVAL: Duration = Duration::from_secs(5);

/// Sends progress for the agent's request every [`PROGRESS_INTERVAL`] while the
/// payment of `atoms` to `bot` (its [`bot_label`](crate::bridge::Settings::bot_label))
/// waits; never resolves (the caller drops it). Nothing if the request carries no
/// progress token.
pub(crate) async fn progress_while_paying(
    ctx: &RequestContext<RoleServer>,
    bot: &str,
    atoms: u64,
) -> Infallible {
    let Some(token) = ctx.meta.get_progress_token() else {
        return std::future::pending().await;
    };
    let message = format!("waiting for the payment of {atoms} atoms to bot {bot}");
    let mut ticks: u32 = 0;
    loop {
        tokio::time::sleep(PROGRESS_INTERVAL).await;
        ticks = ticks.saturating_add(1);
        let progress =
            ProgressNotificationParam::new(token.clone(), f64::from(ticks)).with_message(&message);
        // A progress the agent cannot take changes nothing about the payment.
        let _ = ctx.peer.notify_progress(progress).await;
    }
}

/// Whether the agent's client can be asked: it declared form elicitation on a
/// protocol that still allows server-to-client requests (on later ones, see
/// [`input_required`](super::input_required)).
pub(crate) fn can_ask(ctx: &RequestContext<RoleServer>) -> bool {
    let before_stateless = ctx
        .protocol_version()
        .is_none_or(|v| v < ProtocolVersion::V_2026_07_28);
    before_stateless && ctx.client_capabilities().is_some_and(|c| declares_form(&c))
}

/// Whether `capabilities` declare form elicitation (or elicitation without modes, which
/// means form).
pub(crate) fn declares_form(capabilities: &ClientCapabilities) -> bool {
    capabilities
        .elicitation
        .as_ref()
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// The question put to the user about paying `atoms` to `bot` (its label) for `tool`
/// (a dynamically priced one with its quote and bound).
fn question(name: &str, bot: &str, tool: &str, atoms: u64, quoted: Option<DynamicQuote>) -> String {
    let quoted = quoted.map_or_else(String::new, |q| format!(" ({q})"));
    format!(
        "{name}: pay {atoms} atoms to bot {bot} for tool {tool:?}{quoted}? Accept to pay, decline to refuse."
    )
}

/// The user's answer to a [`confirm`] question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Accepted.
    Accept,
    /// Declined.
    Decline,
    /// Dismissed without a choice.
    Cancel,
}

/// An answer to come, or why none will.
pub(crate) type Confirm<'a> = Pin<Box<dyn Future<Output = Result<Answer, String>> + Send + 'a>>;

/// The approval question for the agent's client, if it can be asked (see [`can_ask`])
/// and its [`Approver`] is the agent itself. Accept approves, unless the user made the
/// agent's approvals theirs meanwhile (the live settings, read when the answer comes):
/// the answer then waits for the parked approval. Decline, cancel and any failure
/// refuse. Dropped unanswered, it tells the client the question is withdrawn.
pub(crate) fn ask<'a>(
    ctx: &'a RequestContext<RoleServer>,
    bridge: &'a Inner,
    bot: &str,
    tool: &str,
    atoms: u64,
    quoted: Option<DynamicQuote>,
) -> Option<Ask<'a>> {
    let agent = super::caller(ctx);
    let answers = move || bridge.settings().approver_of(&agent) == Approver::Agent;
    if !answers() {
        return None;
    }
    let answer = confirm(ctx, question(&bridge.config.name, bot, tool, atoms, quoted))?;
    Some(Box::pin(async move {
        match answer.await {
            Ok(Answer::Accept) if answers() => Ok(()),
            Ok(Answer::Accept) => std::future::pending().await,
            Ok(Answer::Decline) => Err("payment declined by the user".into()),
            Ok(Answer::Cancel) => Err("payment approval cancelled by the user".into()),
            Err(e) => Err(format!("approval not given: {e}")),
        }
    }))
}

/// Puts `message` to the user as a form elicitation with no fields, if the agent's
/// client can be asked (see [`can_ask`]). Dropped unanswered, it tells the client the
/// question is withdrawn.
pub(crate) fn confirm(ctx: &RequestContext<RoleServer>, message: String) -> Option<Confirm<'_>> {
    if !can_ask(ctx) {
        return None;
    }
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: ElicitationSchema::new(BTreeMap::new()),
    };
    let mut request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
    // On streamable HTTP, the question goes out on the stream of the call it is about.
    request
        .extensions_mut()
        .insert(OriginatingRequestId(ctx.id.clone()));
    Some(Box::pin(async move {
        let handle = ctx
            .peer
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .map_err(|e| format!("not asked: {e}"))?;
        let mut withdraw = Withdraw {
            ctx,
            id: Some(handle.id.clone()),
        };
        let answer = handle.rx.await;
        withdraw.id = None;
        decision(answer)
    }))
}

/// The agent client's answer to `elicitation/create`.
fn decision(
    answer: Result<
        Result<ClientResult, rmcp::ServiceError>,
        tokio::sync::oneshot::error::RecvError,
    >,
) -> Result<Answer, String> {
    match answer {
        Ok(Ok(ClientResult::ElicitResult(result))) => match result.action {
            ElicitationAction::Accept => Ok(Answer::Accept),
            ElicitationAction::Decline => Ok(Answer::Decline),
            ElicitationAction::Cancel => Ok(Answer::Cancel),
            _ => Err("unknown elicitation action".into()),
        },
        Ok(Ok(_)) => Err("unexpected answer to elicitation/create".into()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("agent gone".into()),
    }
}

/// Cancels the question at the client if it is dropped unanswered (the parked
/// approval decided, the timeout struck, or the agent cancelled its call).
struct Withdraw<'a> {
    ctx: &'a RequestContext<RoleServer>,
    id: Option<rmcp::model::RequestId>,
}

impl Drop for Withdraw<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let peer = self.ctx.peer.clone();
        tokio::spawn(async move {
            let _ = peer
                .notify_cancelled(CancelledNotificationParam::new(
                    Some(id),
                    Some("decided otherwise".into()),
                ))
                .await;
        });
    }
}
