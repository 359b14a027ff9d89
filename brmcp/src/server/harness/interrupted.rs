//! Telling callers that their paid call was interrupted: a harness that starts on a
//! ledger which refunded calls a dead process was running answers each caller's waiting
//! request, on its session, with [`CALL_INTERRUPTED`], so the caller retries while its
//! agent waits instead of waiting out its timeout.
//!
//! The refund is durable before anything is sent (it committed when the ledger was
//! opened, with the notice), and the notice is cleared only once sent: a crash in
//! between sends it again on the next start (a second answer to the same request is
//! ignored by the client), never a second refund.

use std::sync::Weak;
use std::time::Duration;

use brmcp_adapters::protocol::CALL_INTERRUPTED;
use rmcp::model::{ErrorData, ServerJsonRpcMessage};

use super::{Counters, Shared};
use crate::server::billing::{Interrupted, NOTICE_WINDOW_SECS};

/// The message of the [`CALL_INTERRUPTED`] answer.
pub const INTERRUPTED_NOTICE: &str =
    "call interrupted by a restart of the bot; refunded; retry with the same call key";

/// The first wait before a notice that could not be sent (the host not connected yet)
/// is tried again; it doubles up to [`NOTICE_RETRY_MAX`], for [`NOTICE_WINDOW_SECS`].
const NOTICE_RETRY_FIRST: Duration = Duration::from_secs(1);

/// The longest wait between two tries of a notice: a minute, so a host that comes back
/// is used within one.
const NOTICE_RETRY_MAX: Duration = Duration::from_secs(60);

/// Sends every notice owed, each in its own task.
pub(super) async fn tell_all(shared: Weak<Shared>) {
    let Some(strong) = shared.upgrade() else {
        return;
    };
    let now = strong.clock.now();
    let owed = match strong.blocking(move |b| b.interrupted(now)).await {
        Ok(owed) => owed,
        Err(e) => {
            tracing::error!(error = %e, "interrupted calls not read; their callers are not told");
            return;
        }
    };
    drop(strong);
    for notice in owed {
        tokio::spawn(tell(shared.clone(), notice));
    }
}

/// Sends one notice, retrying while its caller may still wait, then clears it.
async fn tell(shared: Weak<Shared>, notice: Interrupted) {
    let message = ServerJsonRpcMessage::error(
        ErrorData::new(CALL_INTERRUPTED, INTERRUPTED_NOTICE, None),
        Some(notice.request_id.clone()),
    );
    let deadline = notice.refunded_at.saturating_add(NOTICE_WINDOW_SECS);
    let mut wait = NOTICE_RETRY_FIRST;
    loop {
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let Some(router) = strong.started.get().map(|s| s.router.clone()) else {
            return;
        };
        drop(strong);
        match router.send_on(notice.caller, notice.sid, &message).await {
            Ok(()) => {
                tracing::info!(call = %notice.call, caller = %notice.caller, tool = %notice.tool,
                    "told the caller its call was interrupted and refunded");
                if let Some(strong) = shared.upgrade() {
                    Counters::bump(&strong.counters.interrupted_told);
                }
                break;
            }
            Err(e) => {
                let Some(strong) = shared.upgrade() else {
                    return;
                };
                if strong.clock.now() >= deadline {
                    tracing::warn!(call = %notice.call, error = %e,
                        "interrupted call's caller not told in time; giving up");
                    break;
                }
                tracing::debug!(call = %notice.call, error = %e, "interrupted notice not sent; retrying");
            }
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(NOTICE_RETRY_MAX);
    }
    let Some(strong) = shared.upgrade() else {
        return;
    };
    let call = notice.call;
    if let Err(e) = strong.blocking(move |b| b.told(call)).await {
        // Sent again on the next start: harmless.
        tracing::warn!(%call, error = %e, "interrupted notice not cleared");
    }
}
