//! Which outcome settles which payment (the rule of the module docs of `spend`): the
//! payer's own settlement, the outcome stream's, the user's, and a payment left
//! pending in an older one's place.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{Resolution, SpendError, SpendLog, SpendStatus, TipOutcomeEvent, i64_of, raise_floor};

impl SpendLog {
    /// Settles a pending row: `Ok` is paid, `Err(reason)` failed. `false` if it was
    /// not pending.
    ///
    /// # Errors
    /// SQLite's.
    pub fn settle(&self, id: i64, outcome: Result<(), &str>) -> Result<bool, SpendError> {
        self.settle_with(id, outcome, None)
    }

    /// [`settle`](Self::settle) by the outcome with stream id `outcome_id`, which is
    /// recorded with the row: `false` as well if that outcome settled a row already.
    ///
    /// # Errors
    /// SQLite's.
    pub fn settle_with(
        &self,
        id: i64,
        outcome: Result<(), &str>,
        outcome_id: Option<u64>,
    ) -> Result<bool, SpendError> {
        let mut db = self.db();
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if let Some(outcome_id) = outcome_id {
            if recorded(&tx, outcome_id)? {
                return Ok(false);
            }
            raise_floor(&tx, outcome_id)?;
        }
        let settled = settle_row(&tx, id, outcome, outcome_id)?;
        tx.commit()?;
        Ok(settled)
    }

    /// Settles a pending row as the user says (`brmcp bridge spend resolve`), whatever
    /// its age: `paid` keeps counting for its 24 hours, `failed` frees its budget.
    /// `false` if no pending row has this id.
    ///
    /// # Errors
    /// SQLite's.
    pub fn resolve_by_user(&self, id: i64, paid: bool) -> Result<bool, SpendError> {
        let outcome = if paid {
            Ok(())
        } else {
            Err("marked failed by the user")
        };
        self.settle(id, outcome)
    }

    /// Marks a pending row unconfirmed: the bridge stopped waiting for its payment,
    /// which may still complete. It keeps counting toward the daily cap.
    ///
    /// # Errors
    /// SQLite's.
    pub fn unconfirm(&self, id: i64) -> Result<bool, SpendError> {
        let n = self.db().execute(
            "UPDATE spend SET unconfirmed = 1 WHERE id = ?1 AND status = 'pending'",
            params![id],
        )?;
        Ok(n == 1)
    }

    /// Row `id` stays pending because the outcome its payer saw, `outcome`, settled an
    /// older pending payment of the same bot and amount (module docs): the payment
    /// whose outcome is still unknown is, in truth, that older one (or one older still,
    /// whose place it took in turn), so the uncertainty row `id` now stands for dates
    /// from that older payment. Without this, a tip lost as the host went down would
    /// pass its uncertainty to each later payment of its bot and amount, each one
    /// renewing how long it holds other agents back (`bridge::credit`, rule 3).
    /// `false` if `id` is not pending or no row holds `outcome`.
    ///
    /// # Errors
    /// SQLite's.
    pub fn stays_pending_for(&self, id: i64, outcome: u64) -> Result<bool, SpendError> {
        let n = self.db().execute(
            // `outcome` is unique, so `o` is one row or none.
            "UPDATE spend SET pending_since = o.since \
             FROM (SELECT coalesce(pending_since, ts) AS since FROM spend WHERE outcome = ?2) AS o \
             WHERE spend.id = ?1 AND spend.status = 'pending' \
             AND o.since < coalesce(spend.pending_since, spend.ts)",
            params![id, i64_of(outcome)],
        )?;
        Ok(n == 1)
    }

    /// Settles the payment `event` is the outcome of, by the rule of the module docs:
    /// the oldest pending row (in flight or unconfirmed) to the same bot of the same
    /// amount whose position is below the outcome's id, whatever its age. The outcome
    /// is recorded, so a replay of it, or the payer's settlement by it, settles nothing.
    ///
    /// # Errors
    /// SQLite's.
    pub fn resolve_outcome(&self, event: &TipOutcomeEvent<'_>) -> Result<Resolution, SpendError> {
        let mut db = self.db();
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if recorded(&tx, event.id)? {
            return Ok(Resolution::Replay);
        }
        raise_floor(&tx, event.id)?;
        let row: Option<i64> = tx
            .query_row(
                "SELECT id FROM spend WHERE status = 'pending' \
                 AND bot = ?1 AND atoms = ?2 AND tip_pos < ?3 ORDER BY id LIMIT 1",
                params![event.bot.to_string(), i64_of(event.atoms), i64_of(event.id)],
                |r| r.get(0),
            )
            .optional()?;
        let resolution = match row {
            Some(row) if settle_row(&tx, row, event.outcome, Some(event.id))? => {
                Resolution::Settled(row)
            }
            _ => Resolution::NotOurs,
        };
        tx.commit()?;
        Ok(resolution)
    }
}

/// Whether an outcome with this id settled a row already.
fn recorded(db: &Connection, outcome_id: u64) -> rusqlite::Result<bool> {
    db.query_row(
        "SELECT count(*) FROM spend WHERE outcome = ?1",
        params![i64_of(outcome_id)],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )
}

/// Settles pending row `id` by `outcome`, recording the outcome's stream id.
fn settle_row(
    db: &Connection,
    id: i64,
    outcome: Result<(), &str>,
    outcome_id: Option<u64>,
) -> rusqlite::Result<bool> {
    let (status, err) = match outcome {
        Ok(()) => (SpendStatus::Paid, None),
        Err(e) => (SpendStatus::Failed, Some(e)),
    };
    // A failed payment left no credit at the bot.
    let n = db.execute(
        "UPDATE spend SET status = ?2, err = ?3, outcome = ?4, \
         left_atoms = CASE WHEN ?2 = 'failed' THEN 0 ELSE left_atoms END \
         WHERE id = ?1 AND status = 'pending'",
        params![id, status.as_str(), err, outcome_id.map(i64_of)],
    )?;
    Ok(n == 1)
}
