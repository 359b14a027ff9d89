//! Calls left for their agent's retry: a paid call whose answer did not come while
//! its agent waited is held by no run, and the agent's retry of the same tool and
//! arguments claims it (or gives it back when it stops waiting).

use rusqlite::{TransactionBehavior, params};

use super::{HELD_SECS, Journal, JournalError, Row};

/// The run of a call left for its agent's retry ([`Journal::leave`]): no process's
/// (a run is a random hex id).
const LEFT_RUN: &str = "left";

impl Journal {
    /// A paid call whose answer did not come while its agent waited (its credit had
    /// not reached the bot) is left for the agent's retry: no run holds it (so a
    /// retry of the same tool and arguments, or of its agent's own key, takes it over,
    /// paid, under its key; the next start resumes it), and it is not answered.
    /// Whether it was left (only a call paid or being paid is).
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn leave(&self, id: i64, now: i64) -> Result<bool, JournalError> {
        let changed = self
            .db()
            .execute(
                "UPDATE calls SET run = ?2, claimed = 0, updated = ?3 \
                 WHERE id = ?1 AND state IN ('paying', 'paid')",
                params![id, LEFT_RUN, now],
            )
            .map_err(|e| self.err(e))?;
        Ok(changed == 1)
    }

    /// The oldest call of an earlier run that `agent` made to `bot` with `tool` and
    /// these arguments under a key of the bridge's, not delivered nor cancelled nor
    /// taken by another retry: taken now (`claimed`), for the agent's retry.
    ///
    /// # Errors
    /// SQLite's, a damaged row.
    pub(crate) fn claim_retry(
        &self,
        agent: &str,
        bot: &str,
        tool: &str,
        args: &[u8; 32],
        run: &str,
        now: i64,
    ) -> Result<Option<Row>, JournalError> {
        let mut db = self.db();
        let tx = db
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let found = self
            .rows(
                &tx,
                "WHERE agent = ?1 AND bot = ?2 AND tool = ?3 AND args = ?4 AND own_key = 0 \
                 AND claimed = 0 AND run != ?5 AND state NOT IN ('delivered', 'cancelled') \
                 AND updated >= ?6 ORDER BY id LIMIT 1",
                params![
                    agent,
                    bot,
                    tool,
                    args.as_slice(),
                    run,
                    now.saturating_sub(HELD_SECS)
                ],
            )?
            .pop();
        if let Some(row) = &found {
            tx.execute(
                "UPDATE calls SET claimed = 1 WHERE id = ?1",
                params![row.id],
            )
            .map_err(|e| self.err(e))?;
            tx.commit().map_err(|e| self.err(e))?;
        }
        Ok(found.map(|mut r| {
            r.claimed = true;
            r
        }))
    }

    /// Gives a claimed call back for the agent's next retry (the retry stopped waiting).
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn release(&self, id: i64) -> Result<(), JournalError> {
        self.db()
            .execute(
                "UPDATE calls SET claimed = 0 WHERE id = ?1 AND state NOT IN ('delivered', 'cancelled')",
                params![id],
            )
            .map(drop)
            .map_err(|e| self.err(e))
    }
}
