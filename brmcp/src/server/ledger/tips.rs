//! Recording a tip: once per tip (a redelivery, by id or within the replay window, is
//! a duplicate), credited to its caller's balance when allowed and, in the same
//! transaction, reserved for the caller's calls waiting for it.

use brmcp_adapters::wire::UnixTime;
use rusqlite::{TransactionBehavior, params};

use super::group_sync::{GroupSync, Ticket};
use super::tip_replays::replayed;
use super::{
    Ledger, LedgerError, Tip, TipOutcome, add_balance, amount_to_sql, seq_to_sql, waiting,
};

impl Ledger {
    /// [`Ledger::record_tip`] up to its commit: the ticket to make it durable with.
    pub(super) fn record_tip_unsynced(
        &self,
        tip: &Tip,
        allowed: bool,
        now: UnixTime,
    ) -> Result<(Option<Ticket>, TipOutcome), LedgerError> {
        let caller = tip.caller.to_string();
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let matoms = amount_to_sql(tip.matoms)?;
        let same_id: Vec<(String, i64)> = {
            let mut stmt =
                tx.prepare("SELECT caller, matoms FROM tips WHERE seq = ?1 AND cleared = 0")?;
            stmt.query_map([seq_to_sql(tip.seq)], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?
        };
        if same_id.iter().any(|(c, m)| *c == caller && *m == matoms) {
            // A barrier: every commit so far, the first delivery's included.
            let barrier = self.sync.as_ref().map(GroupSync::ticket);
            return Ok((barrier, TipOutcome::Duplicate));
        }
        if replayed(&tx, tip.seq, &caller, matoms, now)? {
            tracing::warn!(
                seq = tip.seq,
                %caller,
                matoms,
                "tip redelivered after its id was cleared; not credited again"
            );
            // Cleared once its acknowledgement was confirmed: long durable.
            return Ok((None, TipOutcome::Duplicate));
        }
        if let Some((other, other_matoms)) = same_id.first() {
            // Not a redelivery: the client reused the id (its logs were reset, or it is
            // another client). Credited as the new tip it is.
            tracing::warn!(
                seq = tip.seq,
                %caller,
                matoms,
                earlier_caller = %other,
                earlier_matoms = other_matoms,
                "tip sequence id reused by another tip; recorded as a new tip"
            );
        }
        tx.prepare_cached(
            "INSERT INTO tips (seq, caller, matoms, credited, received_at) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![
            seq_to_sql(tip.seq),
            caller,
            matoms,
            allowed,
            now.secs()
        ])?;
        if allowed {
            add_balance(&tx, &caller, tip.matoms)?;
            // The credit goes to the calls refused for payment that wait for it, in the
            // tip's transaction: no crash leaves it credited and not reserved.
            waiting::expire(&tx, now)?;
            waiting::reserve(&tx, &caller, tip.matoms, now)?;
        }
        let ticket = self.commit(tx)?;
        let outcome = if allowed {
            TipOutcome::Credited
        } else {
            TipOutcome::NotCredited
        };
        Ok((ticket, outcome))
    }
}
