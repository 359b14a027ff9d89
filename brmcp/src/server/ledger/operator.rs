//! The operator's calls: balances, manual credit and refund with their audit trail,
//! the journal, and tip bookkeeping.

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, Row, TransactionBehavior, params};

use super::retention::{reclaim, release_expired};
use super::{
    AuditAction, AuditEntry, Balance, CallId, CallState, JournalEntry, Ledger, LedgerError,
    PrunedCalls, Tip, TipRecord, add_balance, amount, amount_to_sql, bad_column, lookup, peer,
    seq_to_sql, sql_limit,
};
#[cfg(doc)]
use super::{Billing, MAX_JOURNAL_ROWS_PER_CALLER, VACUUM_FREE_PAGES};

impl Ledger {
    /// Release the keys of finished calls whose replay window has closed, dropping
    /// their outcomes, and give the file's free pages back once more than
    /// [`VACUUM_FREE_PAGES`] collect; returns how many keys were released.
    ///
    /// [`Billing::charge`] does this too (and prunes the caller's journal past
    /// [`MAX_JOURNAL_ROWS_PER_CALLER`]), so calling it is only needed to reclaim space
    /// while no calls come.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn purge_expired(&self, now: UnixTime) -> Result<usize, LedgerError> {
        self.owner()?;
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let released = release_expired(&tx, now)?;
        reclaim(&tx)?;
        // Rare, and answered to the operator as done: synced before it returns.
        let ticket = self.commit(tx)?;
        drop(conn);
        self.durable(ticket)?;
        Ok(released)
    }

    /// Every caller's balance, by caller, with the part reserved for its waiting calls
    /// (until [`purge_expired`](Self::purge_expired) or a charge drops the expired).
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn balances(&self) -> Result<Vec<Balance>, LedgerError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT caller, matoms, \
               (SELECT COALESCE(SUM(reserved_matoms), 0) FROM waiting w \
                WHERE w.caller = b.caller) \
             FROM balances b ORDER BY caller",
        )?;
        let rows = stmt.query_map([], |row| {
            Ok(Balance {
                caller: peer(row, 0)?,
                matoms: amount(row, 1)?,
                reserved_matoms: amount(row, 2)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Credit `matoms` to `caller` by hand, recorded in the audit trail with `reason`;
    /// returns the new balance.
    ///
    /// # Errors
    ///
    /// [`LedgerError::AmountOutOfRange`] or a SQLite failure; nothing changes.
    pub fn manual_credit(
        &self,
        caller: &PeerId,
        matoms: u64,
        reason: &str,
        now: UnixTime,
    ) -> Result<u64, LedgerError> {
        let caller = caller.to_string();
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let balance = add_balance(&tx, &caller, matoms)?;
        audit(&tx, now, &caller, AuditAction::Credit, matoms, None, reason)?;
        // Rare, and answered to the operator as done: synced before it returns.
        let ticket = self.commit(tx)?;
        drop(conn);
        self.durable(ticket)?;
        Ok(balance)
    }

    /// Give back the price of a completed call by hand: the call becomes refunded with
    /// `reason`, recorded in the audit trail; returns the caller's new balance.
    ///
    /// A keyed call's stored outcome still replays: the caller got the result and was
    /// paid back, and a retry must not run it again.
    ///
    /// # Errors
    ///
    /// [`LedgerError::UnknownCall`], [`LedgerError::NotRefundable`] (pending or already
    /// refunded), [`LedgerError::FreeCall`], [`LedgerError::AmountOutOfRange`] or a
    /// SQLite failure; nothing changes.
    pub fn manual_refund(
        &self,
        call: CallId,
        reason: &str,
        now: UnixTime,
    ) -> Result<u64, LedgerError> {
        let mut conn = self.conn();
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = lookup(&tx, call)?;
        if found.state != CallState::Completed {
            return Err(LedgerError::NotRefundable {
                call,
                state: found.state,
            });
        }
        let matoms = found.price_matoms()?;
        if matoms == 0 {
            return Err(LedgerError::FreeCall(call));
        }
        let balance = add_balance(&tx, &found.caller, matoms)?;
        tx.execute(
            "UPDATE calls SET state = 'refunded', reason = ?2, finished_at = ?3 WHERE id = ?1",
            params![call.get(), reason, now.secs()],
        )?;
        audit(
            &tx,
            now,
            &found.caller,
            AuditAction::Refund,
            matoms,
            Some(call),
            reason,
        )?;
        // Rare, and answered to the operator as done: synced before it returns.
        let ticket = self.commit(tx)?;
        drop(conn);
        self.durable(ticket)?;
        Ok(balance)
    }

    /// The newest `limit` journal entries, newest first, of `caller` or of everyone.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn journal(
        &self,
        caller: Option<&PeerId>,
        limit: usize,
    ) -> Result<Vec<JournalEntry>, LedgerError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "{JOURNAL_SELECT} WHERE ?1 IS NULL OR caller = ?1 ORDER BY id DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(
            params![caller.map(PeerId::to_string), sql_limit(limit)],
            entry_from_row,
        )?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The totals of `caller`'s calls pruned from the journal; zero when none were.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn pruned(&self, caller: &PeerId) -> Result<PrunedCalls, LedgerError> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                "SELECT completed, completed_atoms, refunded FROM pruned WHERE caller = ?1",
                [caller.to_string()],
                |row| {
                    Ok(PrunedCalls {
                        completed: amount(row, 0)?,
                        completed_atoms: amount(row, 1)?,
                        refunded: amount(row, 2)?,
                    })
                },
            )
            .optional()?
            .unwrap_or_default())
    }

    /// One journal entry.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn journal_entry(&self, call: CallId) -> Result<Option<JournalEntry>, LedgerError> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                &format!("{JOURNAL_SELECT} WHERE id = ?1"),
                [call.get()],
                entry_from_row,
            )
            .optional()?)
    }

    /// The newest `limit` audit entries, newest first.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn audit(&self, limit: usize) -> Result<Vec<AuditEntry>, LedgerError> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT id, at, caller, action, matoms, call_id, reason FROM audit \
             ORDER BY id DESC LIMIT ?1",
        )?;
        let rows = stmt.query_map([sql_limit(limit)], |row| {
            let action = match row.get_ref(3)?.as_str()? {
                "credit" => AuditAction::Credit,
                "refund" => AuditAction::Refund,
                other => return Err(bad_column(3, format!("unknown action {other:?}").into())),
            };
            Ok(AuditEntry {
                id: row.get(0)?,
                at: UnixTime(row.get(1)?),
                caller: peer(row, 2)?,
                action,
                matoms: amount(row, 4)?,
                call: row.get::<_, Option<i64>>(5)?.map(CallId::new),
                reason: row.get(6)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The client confirmed clearing every tip with a sequence id up to `up_to`: none
    /// of them is delivered again, so a tip with such an id arriving later is new.
    /// Returns how many tips were marked. Allowed beside the serving process too
    /// ([`attach`](Self::attach)): it only marks.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn clear_tips(&self, up_to: u64) -> Result<usize, LedgerError> {
        let conn = self.conn();
        // Ids above 2^63 - 1 are stored negative (see `seq_to_sql`).
        Ok(conn.execute(
            "UPDATE tips SET cleared = 1 WHERE cleared = 0 AND \
             ((?1 >= 0 AND seq BETWEEN 0 AND ?1) OR (?1 < 0 AND (seq >= 0 OR seq <= ?1)))",
            [seq_to_sql(up_to)],
        )?)
    }

    /// The last tip received with sequence id `seq`, if any.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn tip(&self, seq: u64) -> Result<Option<TipRecord>, LedgerError> {
        let conn = self.conn();
        Ok(conn
            .query_row(
                "SELECT caller, matoms, credited, received_at FROM tips WHERE seq = ?1 \
                 ORDER BY id DESC LIMIT 1",
                [seq_to_sql(seq)],
                |row| {
                    Ok(TipRecord {
                        tip: Tip {
                            seq,
                            caller: peer(row, 0)?,
                            matoms: amount(row, 1)?,
                        },
                        credited: row.get(2)?,
                        received_at: UnixTime(row.get(3)?),
                    })
                },
            )
            .optional()?)
    }
}

fn audit(
    conn: &Connection,
    now: UnixTime,
    caller: &str,
    action: AuditAction,
    matoms: u64,
    call: Option<CallId>,
    reason: &str,
) -> Result<(), LedgerError> {
    conn.execute(
        "INSERT INTO audit (at, caller, action, matoms, call_id, reason) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            now.secs(),
            caller,
            action.as_str(),
            amount_to_sql(matoms)?,
            call.map(CallId::get),
            reason
        ],
    )?;
    Ok(())
}

const JOURNAL_SELECT: &str = "SELECT id, caller, tool, price_atoms, state, started_at, \
     finished_at, reason, call_key, key_held, outcome IS NOT NULL FROM calls";

fn entry_from_row(row: &Row<'_>) -> rusqlite::Result<JournalEntry> {
    Ok(JournalEntry {
        id: CallId::new(row.get(0)?),
        caller: peer(row, 1)?,
        tool: row.get(2)?,
        price_atoms: amount(row, 3)?,
        state: CallState::from_sql(row, 4)?,
        started_at: UnixTime(row.get(5)?),
        finished_at: row.get::<_, Option<i64>>(6)?.map(UnixTime),
        reason: row.get(7)?,
        call_key: row.get(8)?,
        key_held: row.get(9)?,
        outcome_kept: row.get(10)?,
    })
}
