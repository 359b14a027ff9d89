//! The steps of one call, each written before it is taken: sent, paying, paid or
//! unpaid, answered, delivered, cancelled, and reopened by a later run; a step its
//! state does not allow changes nothing.

use rusqlite::{TransactionBehavior, params};

use super::rows::{Outcome, Row, i64_of, u64_of};
use super::{Journal, JournalError};
use crate::bridge::calls::bounds::make_room;
use crate::bridge::calls::state::{Event, State};

/// Whether an answered call is delivered with its answer ([`Journal::answer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handing {
    /// Delivered with it: its agent has it already, or needs no proof it came.
    Now,
    /// Held, answered, until its agent takes it.
    Held,
    /// Held if the call paid (it is delivered once its response was written), else
    /// delivered with it.
    HeldIfPaid,
}

impl Journal {
    /// Moves the call `id` by `event` if its state allows it, with `set` (SQL
    /// assignments over `?2`, `?3`) applied in the same write; the state it is in after.
    fn step(
        &self,
        id: i64,
        event: Event,
        set: &str,
        extra: (i64, Option<String>),
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        self.step_with(
            id,
            |row| {
                let paid = match event {
                    // Whether a payment before this one settled.
                    Event::Unpaid => row.paid_atoms > 0,
                    _ => row.paid(),
                };
                row.state.next(event, paid)
            },
            set,
            extra,
            now,
        )
    }

    /// As [`step`](Self::step), the state after decided by `next` from the row as it
    /// stands in the write's transaction.
    fn step_with(
        &self,
        id: i64,
        next: impl FnOnce(&Row) -> Option<State>,
        set: &str,
        extra: (i64, Option<String>),
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        let mut db = self.db();
        let tx = db
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.err(e))?;
        let Some(row) = self.rows(&tx, "WHERE id = ?1", params![id])?.pop() else {
            return Ok(None);
        };
        let Some(next) = next(&row) else {
            return Ok(None);
        };
        let sql = format!(
            "UPDATE calls SET state = ?4, updated = ?5{}{set} WHERE id = ?1",
            if set.is_empty() { "" } else { ", " }
        );
        tx.execute(&sql, params![id, extra.0, extra.1, next.as_str(), now])
            .map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(Some(next))
    }

    /// Before a send of the call.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn sent(&self, id: i64, now: i64) -> Result<Option<State>, JournalError> {
        self.step(id, Event::Send, "", (0, None), now)
    }

    /// Before a payment of `atoms` (the tool's price `price_atoms`) is made.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn paying(
        &self,
        id: i64,
        price_atoms: u64,
        atoms: u64,
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        self.step(
            id,
            Event::Pay,
            "paying_atoms = ?2, price_atoms = CAST(?3 AS INTEGER)",
            (i64_of(atoms), Some(price_atoms.to_string())),
            now,
        )
    }

    /// The payment settled; `spend_id` is its spend-log row, if found.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn paid(
        &self,
        id: i64,
        spend_id: Option<i64>,
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        self.step(
            id,
            Event::Paid,
            "paid_atoms = paid_atoms + paying_atoms, paying_atoms = 0, \
             spend_id = COALESCE(CAST(?3 AS INTEGER), spend_id)",
            (0, spend_id.map(|s| s.to_string())),
            now,
        )
    }

    /// The payment was not made.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn unpaid(&self, id: i64, now: i64) -> Result<Option<State>, JournalError> {
        self.step(id, Event::Unpaid, "paying_atoms = 0", (0, None), now)
    }

    /// The bot's outcome, kept (bounded), and delivered in the same write unless
    /// `handing` holds it. Room is made within the agent's bounds; an outcome that does
    /// not fit is kept as its size.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn answer(
        &self,
        id: i64,
        outcome: Outcome,
        handing: Handing,
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        let mut outcome = outcome.bounded();
        if let Some(row) = self.get(id)? {
            let (_, text) = outcome.columns();
            let bytes = i64::try_from(text.len()).unwrap_or(i64::MAX);
            let db = self.db();
            // This row is in flight while room is made, so it is never the one evicted.
            if !make_room(&db, self.bounds, &row.agent, 0, bytes).map_err(|e| self.err(e))? {
                outcome = Outcome::TooLarge(u64_of(bytes));
            }
        }
        let (kind, text) = outcome.columns();
        let set = format!("outcome_kind = '{kind}', outcome = ?3");
        let next = |row: &Row| {
            let answered = row.state.next(Event::Answer, row.paid())?;
            let deliver = match handing {
                Handing::Now => true,
                Handing::Held => false,
                Handing::HeldIfPaid => row.paid_atoms == 0,
            };
            Some(
                deliver
                    .then(|| answered.next(Event::Deliver, row.paid()))
                    .flatten()
                    .unwrap_or(answered),
            )
        };
        self.step_with(id, next, &set, (0, Some(text)), now)
    }

    /// The outcome is handed to the agent.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn deliver(&self, id: i64, now: i64) -> Result<Option<State>, JournalError> {
        self.step(id, Event::Deliver, "", (0, None), now)
    }

    /// The agent stopped waiting.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn cancel(&self, id: i64, now: i64) -> Result<Option<State>, JournalError> {
        self.step(id, Event::Cancel, "", (0, None), now)
    }

    /// This run takes the call `id` over, to run it from where it stands.
    ///
    /// # Errors
    /// SQLite's.
    pub(crate) fn reopen(
        &self,
        id: i64,
        run: &str,
        now: i64,
    ) -> Result<Option<State>, JournalError> {
        self.step(
            id,
            Event::Reopen,
            "run = ?3, claimed = 1",
            (0, Some(run.to_owned())),
            now,
        )
    }
}
