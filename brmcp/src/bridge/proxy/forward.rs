//! Forwarding one request to the bot: sent on the link's session and waited for while
//! the agent waits, with the agent's progress and cancellation relayed, a silent bot
//! given up on past the answer bound, and the request sent again on a fresh session
//! once, or after the bot's [`CALL_INTERRUPTED`] a bounded number of times.

use std::sync::Arc;

use rmcp::ServiceError;
use rmcp::model::{
    ClientRequest, ErrorCode, ErrorData, ProgressNotificationParam, RequestMetaObject, ServerResult,
};
use rmcp::service::{PeerRequestOptions, RequestContext, RoleServer};

use brmcp_adapters::protocol::CALL_INTERRUPTED;
use brmcp_adapters::{REQUEST_TIMEOUT, is_session_lost};

use super::input_required::{Asks, InputAsk, MAX_ASKS_PER_CALL};
use super::reask::{Answer, Reasks};
use super::{ProxyServer, ask, expect_complete, forwarded_meta};
use crate::bridge::link::{Conn, Silence, Tracked};

/// Retries of one logical request the bot answered [`CALL_INTERRUPTED`]: 3. The
/// harness says so once per interrupted call, after a restart; a bot that says it
/// again and again is not believed for ever.
pub(crate) const MAX_INTERRUPTED_RETRIES: u32 = 3;

/// The pause before the first retry of a call the bot answered [`CALL_INTERRUPTED`],
/// the second waiting twice as long, the third three times: 1 s. A bot that is
/// stopping says so to every call, and one retried at once finds it still stopping;
/// a bot restarts within seconds, and a retry sent while it is down waits for it.
const INTERRUPTED_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// Why a forwarded request got no answer from the bot.
pub(super) enum Failure {
    /// The bot answered with a JSON-RPC error: passed on as is.
    Rpc(ErrorData),
    /// The bot says the call was interrupted and refunded: worth a retry under the
    /// same call key (see [`MAX_INTERRUPTED_RETRIES`]).
    Interrupted(ErrorData),
    /// The session to the bot failed; worth one retry on a fresh session.
    Transport(String),
    /// The agent stopped waiting (it cancelled, timed out or closed its session).
    Cancelled,
    /// The bot said nothing within the answer bound: why, as far as can be told.
    Unanswered(String),
    /// The bot asked the client something while the call waited, for an agent asked
    /// through `input_required`: the call is to be held.
    Input(Box<BotInput>),
}

/// A forwarded call waiting for the bot's answer, past the send.
pub(super) struct Waiting {
    pub(super) conn: Arc<Conn>,
    pub(super) id: rmcp::model::RequestId,
    pub(super) rx: tokio::sync::oneshot::Receiver<Result<ServerResult, ServiceError>>,
    pub(super) upstream_token: rmcp::model::ProgressToken,
    pub(super) sent: tokio::time::Instant,
    pub(super) tracked: Tracked,
}

/// A forwarded call the bot asked the client something in: the call and the bot's
/// requests.
pub(super) struct BotInput {
    pub(super) waiting: Waiting,
    pub(super) asks: Vec<InputAsk>,
}

/// How the wait for one answer ended.
enum Waited {
    Answer(Box<Answer>),
    Cancelled,
    Silent(Silence),
    Input(Box<InputAsk>),
}

/// The next request the bot made to the client in the call, if the agent is asked
/// through `input_required`; never otherwise.
async fn next_ask(asks: &mut Option<&mut Asks>) -> Option<InputAsk> {
    match asks {
        Some(asks) => asks.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Tells the bot its request `id` is no longer waited for, `why`. Not waited for: a
/// host that cannot send (its connection down) would hold the agent's answer as long
/// as it holds the notice.
pub(super) fn cancel_at_bot(conn: &Conn, id: rmcp::model::RequestId, why: &'static str) {
    let peer = conn.peer().clone();
    tokio::spawn(async move {
        let notice = rmcp::model::CancelledNotificationParam::new(Some(id), Some(why.into()));
        let _ = peer.notify_cancelled(notice).await;
    });
}

impl From<Failure> for ErrorData {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::Rpc(e) | Failure::Interrupted(e) => e,
            Failure::Transport(e) => Self::internal_error(format!("bot unavailable: {e}"), None),
            Failure::Cancelled => Self::new(ErrorCode::INTERNAL_ERROR, "request cancelled", None),
            Failure::Unanswered(why) => Self::internal_error(why, None),
            Failure::Input(_) => Self::internal_error("the bot's request was not relayed", None),
        }
    }
}

/// What the sends of one logical request (a call and its reissues) have used up.
#[derive(Default, Clone, Copy)]
pub(super) struct Attempts {
    /// The one retry on a fresh session after a failed one.
    pub(super) transport: bool,
    /// Retries after the bot's [`CALL_INTERRUPTED`].
    pub(super) interrupted: u32,
    /// The bot answered something for the request (an answer, progress) or was heard
    /// on the session while it waited: the answer bound no longer applies.
    pub(super) heard: bool,
    /// The request may be asked again under its key while the bot is heard but has
    /// not answered it (see `reask`): a call of a priced tool, or one paid for, whose
    /// bot is a serving harness that keeps a key's outcome. A plain MCP server's tool
    /// is never sent twice: the server would run it twice.
    pub(super) reask: bool,
}
impl ProxyServer {
    /// The session to the bot, while the agent waits for it.
    pub(super) async fn conn(
        &self,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<Arc<Conn>, Failure> {
        tokio::select! {
            biased;
            () = ctx.ct.cancelled() => Err(Failure::Cancelled),
            conn = self.link.ensure() => conn.map_err(|e| Failure::Transport(e.to_string())),
        }
    }

    /// Sends one request to the bot and waits for its answer, relaying progress and
    /// the agent's cancellation. Until the bot answers or sends progress of its own, an
    /// agent that asked for progress hears what it waits for. While the bot has said
    /// nothing for the logical request (`attempts.heard`), a bot that said nothing at
    /// all on the session since the send fails the request past the answer bound, with
    /// the reason, and the request is cancelled at the bot. With `asks` (an agent asked
    /// through `input_required`), a request the bot makes to the client meanwhile ends
    /// the wait with [`Failure::Input`].
    async fn forward_once(
        &self,
        conn: &Arc<Conn>,
        request: &ClientRequest,
        meta: &RequestMetaObject,
        ctx: &RequestContext<RoleServer>,
        attempts: &mut Attempts,
        asks: Option<&mut Asks>,
    ) -> Result<ServerResult, Failure> {
        // The agent's wait is the call's life: nothing is sent for a request it no
        // longer waits for.
        if ctx.ct.is_cancelled() {
            return Err(Failure::Cancelled);
        }
        let hub = &self.link.hub;
        let inputs = asks.as_ref().map(|a| a.inputs.clone());
        let tracked = hub.track(&ctx.peer, &ctx.id, self.session().is_none(), inputs);
        let options = PeerRequestOptions::no_options().with_meta(meta.clone());
        let handle = conn
            .peer()
            .send_request_with_option(request.clone(), options)
            .await
            .map_err(|e| Failure::Transport(e.to_string()))?;
        let waiting = Waiting {
            conn: conn.clone(),
            id: handle.id.clone(),
            upstream_token: handle.progress_token.clone(),
            rx: handle.rx,
            sent: tokio::time::Instant::now(),
            tracked,
        };
        self.wait(waiting, ctx, attempts, asks, Some((request, meta)))
            .await
    }

    /// Waits for the bot's answer to a sent request (see
    /// [`forward_once`](Self::forward_once)). A keyed call among `sent` (the request
    /// and its `_meta`) is asked again while the bot is heard but has not answered it
    /// (see `reask`).
    async fn wait(
        &self,
        waiting: Waiting,
        ctx: &RequestContext<RoleServer>,
        attempts: &mut Attempts,
        mut asks: Option<&mut Asks>,
        reask: Option<(&ClientRequest, &RequestMetaObject)>,
    ) -> Result<ServerResult, Failure> {
        let hub = &self.link.hub;
        let Waiting {
            conn,
            id,
            mut rx,
            upstream_token,
            sent,
            tracked,
        } = waiting;
        let agent_token = ctx.meta.get_progress_token();
        let route = agent_token.clone().map(|token| {
            hub.route_progress(conn.serial, upstream_token.clone(), ctx.peer.clone(), token)
        });
        let bound = self.bridge.config.answer_bound;
        let bot = self.bridge.settings().bot_label(&self.link.bot);
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + ask::PROGRESS_INTERVAL,
            ask::PROGRESS_INTERVAL,
        );
        let mut ticks: u32 = 0;
        // Counted from this wait, not the send: a call held for its agent's input
        // waits again once the input went to the bot, which owed no answer before.
        let reask = reask.filter(|_| attempts.reask);
        let now = tokio::time::Instant::now();
        let mut reasks = Reasks::new(reask, self.bridge.config.reask_after, now);
        let waited = loop {
            let silent = !attempts.heard;
            let bot_progress = route.as_ref().is_some_and(|r| r.heard());
            // Only a bot that is there is asked again: a silent one is given up on.
            let reask_due = reasks.due().filter(|_| attempts.heard);
            tokio::select! {
                biased;
                () = ctx.ct.cancelled() => break Waited::Cancelled,
                answer = &mut rx => {
                    attempts.heard = true;
                    break Waited::Answer(Box::new(answer));
                }
                answer = reasks.answer() => break Waited::Answer(Box::new(answer)),
                Some(asked) = next_ask(&mut asks) => {
                    attempts.heard = true;
                    break Waited::Input(Box::new(asked));
                }
                () = tokio::time::sleep_until(sent + bound), if silent => {
                    if bot_progress || conn.watch.heard_since(sent) {
                        // The bot is there and has the session: the call runs.
                        attempts.heard = true;
                    } else {
                        break Waited::Silent(Silence::of(&conn.watch));
                    }
                }
                () = tokio::time::sleep_until(reask_due.unwrap_or(sent)), if reask_due.is_some() => {
                    reasks.send(&conn).await;
                }
                // Until the bot's own progress for the call takes over.
                _ = tick.tick(), if !bot_progress && agent_token.is_some() => {
                    ticks = ticks.saturating_add(1);
                    if let Some(token) = &agent_token {
                        let progress = ProgressNotificationParam::new(token.clone(), f64::from(ticks))
                            .with_message(format!("waiting for an answer from bot {bot}"));
                        // A progress the agent cannot take changes nothing about the call.
                        let _ = ctx.peer.notify_progress(progress).await;
                    }
                }
            }
        };
        match &route {
            Some(route) => {
                hub.finish_progress(conn.serial, &upstream_token, route)
                    .await
            }
            None => hub.drop_progress(conn.serial, &upstream_token),
        }
        tracked.flush().await;
        let answer = match waited {
            Waited::Answer(answer) => *answer,
            Waited::Input(first) => {
                let mut asked = vec![*first];
                if let Some(asks) = asks {
                    while asked.len() < MAX_ASKS_PER_CALL
                        && let Ok(more) = asks.rx.try_recv()
                    {
                        asked.push(more);
                    }
                }
                let waiting = Waiting {
                    conn,
                    id,
                    rx,
                    upstream_token,
                    sent,
                    tracked,
                };
                return Err(Failure::Input(Box::new(BotInput {
                    waiting,
                    asks: asked,
                })));
            }
            Waited::Cancelled | Waited::Silent(_) => {
                let why = match waited {
                    Waited::Silent(_) => "no answer in time",
                    _ => "cancelled by the agent",
                };
                // A bridge that is stopping leaves the call running at the bot, for the
                // next start to collect (`bridge::calls`).
                if !self.bridge.calls.closing() {
                    cancel_at_bot(&conn, id, why);
                }
                return Err(match waited {
                    Waited::Silent(why) => {
                        tracing::info!(%bot, waited = ?bound, %why, "bot did not answer");
                        Failure::Unanswered(format!(
                            "bot {bot} did not answer within {bound:?}: {why}"
                        ))
                    }
                    _ => Failure::Cancelled,
                });
            }
        };
        match answer {
            Ok(Ok(result)) => Ok(result),
            // No answer in time, or the bot lost the session and it could not be
            // re-established on it (whatever the bot's implementation): whether the
            // call ran is unknown, which is what the call key is for.
            Ok(Err(ServiceError::McpError(e)))
                if e.code == REQUEST_TIMEOUT || is_session_lost(&e) =>
            {
                Err(Failure::Transport(e.message.to_string()))
            }
            Ok(Err(ServiceError::McpError(e))) if e.code == CALL_INTERRUPTED => {
                Err(Failure::Interrupted(e))
            }
            Ok(Err(ServiceError::McpError(e))) => Err(Failure::Rpc(e)),
            Ok(Err(e)) => Err(Failure::Transport(e.to_string())),
            Err(_) => Err(Failure::Transport("session to the bot closed".into())),
        }
    }

    /// [`forward`](Self::forward), the answer as `T` (see [`expect_complete`]).
    pub(super) async fn forward_complete<T: serde::de::DeserializeOwned>(
        &self,
        request: impl Into<ClientRequest>,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<T, ErrorData> {
        expect_complete(self.forward(request.into(), ctx).await?)
    }

    /// Forwards a request, retrying once on a fresh session if the session failed.
    pub(super) async fn forward(
        &self,
        request: ClientRequest,
        ctx: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, Failure> {
        let meta = forwarded_meta(&ctx.meta);
        self.forward_retrying(&request, &meta, ctx, &mut Attempts::default(), None, None)
            .await
    }

    /// Sends `request` with `meta` while the agent waits (or waits on in `resume`, a
    /// held call's send): on a failed session, once per `attempts` (which span every
    /// send of one logical call), again on a fresh session; on the bot's
    /// [`CALL_INTERRUPTED`], again after a pause ([`INTERRUPTED_RETRY_PAUSE`]), at most
    /// [`MAX_INTERRUPTED_RETRIES`] times.
    pub(super) async fn forward_retrying(
        &self,
        request: &ClientRequest,
        meta: &RequestMetaObject,
        ctx: &RequestContext<RoleServer>,
        attempts: &mut Attempts,
        mut asks: Option<&mut Asks>,
        mut resume: Option<Waiting>,
    ) -> Result<ServerResult, Failure> {
        loop {
            let (conn, answer) = match resume.take() {
                Some(waiting) => {
                    let conn = waiting.conn.clone();
                    let sent = Some((request, meta));
                    let answer = self
                        .wait(waiting, ctx, attempts, asks.as_deref_mut(), sent)
                        .await;
                    (conn, answer)
                }
                None => {
                    let conn = self.conn(ctx).await?;
                    let answer = self
                        .forward_once(&conn, request, meta, ctx, attempts, asks.as_deref_mut())
                        .await;
                    (conn, answer)
                }
            };
            match answer {
                // A call keeps its key: if an earlier attempt ran, the bot replays its
                // outcome; if it was refunded, the retry normally runs on that credit.
                Err(Failure::Transport(e)) if !attempts.transport => {
                    tracing::debug!(bot = %self.link.bot, error = %e, "retrying on a fresh session");
                    attempts.transport = true;
                    self.link.reset(&conn);
                }
                Err(Failure::Interrupted(e)) if attempts.interrupted < MAX_INTERRUPTED_RETRIES => {
                    tracing::info!(bot = %self.link.bot, reason = %e.message, "call interrupted at the bot; retrying it");
                    attempts.interrupted += 1;
                    let pause = INTERRUPTED_RETRY_PAUSE * attempts.interrupted;
                    tokio::select! {
                        () = ctx.ct.cancelled() => return Err(Failure::Cancelled),
                        () = tokio::time::sleep(pause) => {}
                    }
                }
                other => return other,
            }
        }
    }
}
