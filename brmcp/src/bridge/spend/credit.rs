//! The spend log's record of whose credit a bot holds: the credit of each payment that
//! no call has collected, and the calls answered from credit not their agent's (see
//! the module docs of `spend`).

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{Collected, CreditUse, SpendError, SpendLog, Uncollected, i64_of, u64_of};

impl SpendLog {
    /// The payments whose credit `bot` (every bot, for `None`) holds uncollected,
    /// oldest first.
    ///
    /// # Errors
    /// SQLite's.
    pub fn uncollected(&self, bot: Option<&PeerId>) -> Result<Vec<Uncollected>, SpendError> {
        let db = self.db();
        let mut stmt = db.prepare(
            "SELECT id, ts, bot, agent, tool, left_atoms, status, coalesce(pending_since, ts) \
             FROM spend \
             WHERE left_atoms > 0 AND status != 'failed' AND (?1 IS NULL OR bot = ?1) \
             ORDER BY id",
        )?;
        let rows = stmt.query_map(params![bot.map(ToString::to_string)], |r| {
            Ok(Uncollected {
                id: r.get(0)?,
                ts: r.get(1)?,
                bot: r.get(2)?,
                agent: r.get(3)?,
                tool: r.get(4)?,
                atoms: u64_of(r.get(5)?),
                pending: r.get::<_, String>(6)? == "pending",
                since: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// The atoms of payment `id`'s credit no call has collected: 0 once a call
    /// collected it (its own, or another of its agent's answered from credit) or once
    /// it failed.
    ///
    /// # Errors
    /// SQLite's.
    pub fn left_of(&self, id: i64) -> Result<u64, SpendError> {
        let left: Option<i64> = self
            .db()
            .query_row(
                "SELECT left_atoms FROM spend WHERE id = ?1 AND status != 'failed'",
                params![id],
                |r| r.get(0),
            )
            .optional()?;
        Ok(left.map_or(0, u64_of))
    }

    /// Records that `agent`'s call of `tool` at `bot` was answered and charged `atoms`
    /// from the credit there: from payment `own` (the call's own) first, then from the
    /// agent's other uncollected payments (confirmed before pending, oldest first),
    /// then from other agents' (the same order); what remains was credit the bridge
    /// never paid. What was not the agent's is recorded as [`CreditUse`] rows, which
    /// count against the agent's daily cap. One transaction.
    ///
    /// A call's own payment still pending goes first only among the agent's pending
    /// ones, after its confirmed credit: its tip may never have reached the bot (lost
    /// as the host went down, its place in the outcome stream taken by a later tip of
    /// the same amount), and then the bot charged the call from that credit. So what
    /// stays uncollected is the uncertain payment, which its outcome decides (failed:
    /// nothing), never confirmed credit the bot no longer holds.
    ///
    /// # Errors
    /// SQLite's.
    pub fn collect(
        &self,
        now: UnixTime,
        bot: &PeerId,
        agent: &str,
        tool: &str,
        own: Option<i64>,
        atoms: u64,
    ) -> Result<Collected, SpendError> {
        let mut db = self.db();
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let bot_text = bot.to_string();
        let mut rest = atoms;
        let mut collected = Collected::default();
        if let Some(id) = own
            && confirmed(&tx, id)?
        {
            collected.own = take(&tx, id, &mut rest)?;
        }
        for (id, whose) in candidates(&tx, &bot_text, agent, own)? {
            if rest == 0 {
                break;
            }
            let took = take(&tx, id, &mut rest)?;
            if took == 0 {
                continue;
            }
            if whose == agent {
                collected.own += took;
            } else {
                add(&mut collected.others, Some(whose), took);
            }
        }
        if rest > 0 {
            add(&mut collected.others, None, rest);
        }
        for (whose, used) in &collected.others {
            tx.execute(
                "INSERT INTO credit_use (ts, bot, tool, agent, atoms, credit_of) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![now.0, bot_text, tool, agent, i64_of(*used), whose],
            )?;
        }
        tx.commit()?;
        Ok(collected)
    }

    /// Every call answered from credit not its agent's, oldest first.
    ///
    /// # Errors
    /// SQLite's.
    pub fn credit_uses(&self) -> Result<Vec<CreditUse>, SpendError> {
        let db = self.db();
        let mut stmt = db
            .prepare("SELECT ts, bot, tool, agent, atoms, credit_of FROM credit_use ORDER BY id")?;
        let rows = stmt.query_map([], |r| {
            Ok(CreditUse {
                ts: r.get(0)?,
                bot: r.get(1)?,
                tool: r.get(2)?,
                agent: r.get(3)?,
                atoms: u64_of(r.get(4)?),
                credit_of: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Adds `atoms` to `whose` share.
fn add(others: &mut Vec<(Option<String>, u64)>, whose: Option<String>, atoms: u64) {
    match others.iter_mut().find(|(w, _)| *w == whose) {
        Some((_, n)) => *n = n.saturating_add(atoms),
        None => others.push((whose, atoms)),
    }
}

/// The uncollected payments at `bot` a charge is taken from after the call's own
/// confirmed payment: `agent`'s before others', confirmed before pending, the call's
/// own (`own`) first among the pending, oldest first.
fn candidates(
    db: &Connection,
    bot: &str,
    agent: &str,
    own: Option<i64>,
) -> rusqlite::Result<Vec<(i64, String)>> {
    let mut stmt = db.prepare(
        "SELECT id, agent FROM spend WHERE bot = ?1 AND left_atoms > 0 AND status != 'failed' \
         ORDER BY agent != ?2, status = 'pending', id IS NOT ?3, id",
    )?;
    let rows = stmt.query_map(params![bot, agent, own], |r| Ok((r.get(0)?, r.get(1)?)))?;
    rows.collect()
}

/// Whether payment `id`'s tip is confirmed (the row is `paid`).
fn confirmed(db: &Connection, id: i64) -> rusqlite::Result<bool> {
    let status: Option<String> = db
        .query_row("SELECT status FROM spend WHERE id = ?1", params![id], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(status.as_deref() == Some("paid"))
}

/// Takes up to `rest` atoms of payment `id`'s uncollected credit; returns how many.
fn take(db: &Connection, id: i64, rest: &mut u64) -> rusqlite::Result<u64> {
    let left: Option<i64> = db
        .query_row(
            "SELECT left_atoms FROM spend WHERE id = ?1 AND status != 'failed'",
            params![id],
            |r| r.get(0),
        )
        .optional()?;
    let took = left.map_or(0, u64_of).min(*rest);
    if took > 0 {
        db.execute(
            "UPDATE spend SET left_atoms = left_atoms - ?2 WHERE id = ?1",
            params![id, i64_of(took)],
        )?;
        *rest -= took;
    }
    Ok(took)
}
