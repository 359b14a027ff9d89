//! Where a charged call's caller waits (its session and request id), and the notices
//! owed to the callers of calls a dead process left pending: marked in the refund's
//! transaction at open, listed for the harness, cleared once told.

use brmcp_adapters::wire::{SessionId, UnixTime};
use rmcp::model::RequestId;
use rusqlite::{Connection, TransactionBehavior, params};

use super::{
    CallId, INTERRUPTED, Interrupted, Ledger, LedgerError, Origin, STOPPING_REFUSAL,
    lookup_pending, peer, refund_pending,
};
#[cfg(doc)]
use crate::server::billing::Billing;
use crate::server::billing::{MAX_REQUEST_ID_BYTES, NOTICE_WINDOW_SECS};

/// A charge's origin as stored: the session id and the request id's JSON, both or
/// neither (a request id over [`MAX_REQUEST_ID_BYTES`] is not kept).
pub(super) fn origin_to_sql(origin: Option<Origin<'_>>) -> (Option<String>, Option<String>) {
    let Some(origin) = origin else {
        return (None, None);
    };
    match serde_json::to_string(origin.request_id) {
        Ok(id) if id.len() <= MAX_REQUEST_ID_BYTES => (Some(origin.sid.to_string()), Some(id)),
        _ => (None, None),
    }
}

/// Marks the caller of `call`, just refunded as interrupted, to be told, if its origin
/// is known. Part of the refund's transaction: the notice exists exactly when the
/// refund does.
pub(super) fn mark(conn: &Connection, call: CallId) -> Result<(), LedgerError> {
    conn.execute(
        "UPDATE calls SET notify = 1 \
         WHERE id = ?1 AND session IS NOT NULL AND request_id IS NOT NULL",
        [call.get()],
    )?;
    Ok(())
}

/// The notices owed, oldest first; those past [`NOTICE_WINDOW_SECS`] (or unreadable)
/// are dropped.
pub(super) fn interrupted(
    conn: &mut Connection,
    now: UnixTime,
) -> Result<Vec<Interrupted>, LedgerError> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let cutoff = now.secs().saturating_sub_unsigned(NOTICE_WINDOW_SECS);
    tx.execute(
        "UPDATE calls SET notify = 0 WHERE notify = 1 AND finished_at < ?1",
        [cutoff],
    )?;
    let rows = {
        let mut stmt = tx.prepare(
            "SELECT id, caller, tool, session, request_id, finished_at FROM calls \
             WHERE notify = 1 ORDER BY id",
        )?;
        stmt.query_map([], |row| {
            Ok((
                CallId::new(row.get(0)?),
                peer(row, 1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, String>(4)?,
                UnixTime(row.get(5)?),
            ))
        })?
        .collect::<Result<Vec<_>, _>>()?
    };
    let mut owed = Vec::with_capacity(rows.len());
    for (call, caller, tool, sid, request_id, refunded_at) in rows {
        let parsed = sid
            .parse::<SessionId>()
            .ok()
            .zip(serde_json::from_str::<RequestId>(&request_id).ok());
        match parsed {
            Some((sid, request_id)) => owed.push(Interrupted {
                call,
                caller,
                tool,
                sid,
                request_id,
                refunded_at,
            }),
            None => {
                tracing::warn!(%call, "interrupted call's origin unreadable; caller not told");
                told(&tx, call)?;
            }
        }
    }
    tx.commit()?;
    Ok(owed)
}

/// The notice of `call` is no longer owed.
pub(super) fn told(conn: &Connection, call: CallId) -> Result<(), LedgerError> {
    conn.execute(
        "UPDATE calls SET notify = 0 WHERE id = ?1",
        params![call.get()],
    )?;
    Ok(())
}

impl Ledger {
    /// [`Billing::refuse_stopping`], failing with the ledger's own [`LedgerError`]: a
    /// finished row of price 0 carrying the notice (nothing else reads it as a call).
    ///
    /// # Errors
    /// As [`Billing::refuse_stopping`].
    pub fn refuse_stopping(
        &self,
        caller: &brmcp_adapters::PeerId,
        tool: &str,
        origin: Origin<'_>,
        now: UnixTime,
    ) -> Result<Option<CallId>, LedgerError> {
        self.owner()?;
        let (session, request_id) = origin_to_sql(Some(origin));
        if session.is_none() {
            return Ok(None);
        }
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute(
            "INSERT INTO calls \
             (caller, tool, price_atoms, state, started_at, finished_at, reason, session, \
              request_id, notify) \
             VALUES (?1, ?2, 0, 'refunded', ?3, ?3, ?4, ?5, ?6, 1)",
            params![
                caller.to_string(),
                tool,
                now.secs(),
                STOPPING_REFUSAL,
                session,
                request_id
            ],
        )?;
        let call = CallId::new(tx.last_insert_rowid());
        let ticket = self.commit(tx)?;
        drop(conn);
        self.durable(ticket)?;
        Ok(Some(call))
    }

    /// [`Billing::interrupt`], failing with the ledger's own [`LedgerError`].
    ///
    /// # Errors
    /// As [`Billing::interrupt`].
    pub fn interrupt(&self, call: CallId, now: UnixTime) -> Result<(), LedgerError> {
        self.owner()?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = lookup_pending(&tx, call)?;
        refund_pending(&tx, &found, INTERRUPTED, None, now)?;
        super::waiting::hold_for_retry(&tx, call, now)?;
        mark(&tx, call)?;
        // Answered to the caller as refunded once this returns.
        let ticket = self.commit(tx)?;
        drop(conn);
        self.durable(ticket)
    }
}
