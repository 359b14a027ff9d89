//! The spend log: every payment the bridge made or tried, in SQLite.
//!
//! `<datadir>/`[`SPEND_FILE`] has one row per payment: `pending` from the moment the
//! daily budget is reserved until the payment settles, then `paid` or `failed`.
//!
//! **What counts against the daily cap**: `paid` rows of the last 24 hours, and every
//! `pending` row whatever its age. A payment whose outcome is unknown may still
//! complete, so it counts until its outcome is known or the user resolves it
//! ([`SpendLog::resolve_by_user`], `brmcp bridge spend resolve ID paid|failed`).
//! Pending rows are never pruned, so a late outcome always finds its row.
//!
//! **Which outcome settles which payment** ([`SpendLog::resolve_outcome`]): tip
//! outcomes carry no tag, only their id on the client's outcome stream (ids increase
//! in the order the client stores events). Each row records the stream position when
//! its tip was sent: the highest outcome id seen by then (and never below any
//! position or outcome this log has recorded, so a restart does not lower it). An
//! outcome can settle a row only if it is later than the row's position (an event
//! stored before the tip was sent is not its outcome), is for the same bot and amount,
//! and the row is pending, whether the bridge still waits for it (in flight) or not
//! (unconfirmed); the oldest such row takes it. The outcome's id is recorded with the
//! row it settled, so a replay of it settles nothing. What the stream cannot tell
//! apart, it cannot: a tip sent by hand to the same bot for the same amount after the
//! bridge's payment was sent may be taken for it.
//!
//! Every outcome is recorded here before the client is told it was received, also
//! the one a waiting payment takes, so a crash between the two cannot leave that
//! payment pending. The payer's own settlement of the payment it waited for
//! ([`SpendLog::settle_with`]) records the outcome's id too, so whichever of the two
//! comes first settles the row and the other changes nothing: an outcome settles one
//! row, with its own status. When two payments to one bot of one amount are in
//! flight, the payer and this rule may pair them with their outcomes the other way
//! round; the totals agree, and a payment whose outcome went to another stays
//! pending until the next outcome settles it.
//!
//! [`SpendLog::reserve`] checks the daily cap and inserts the row in one `BEGIN
//! IMMEDIATE` transaction, so concurrent payments can never exceed the cap together
//! (the Go bridge's check-then-record race).
//!
//! **Whose credit a bot holds** (the rules are the credit module's, `bridge::credit`):
//! a bot keeps one balance for the bridge's identity, shared by all its agents. Each
//! payment row also records the atoms of its credit that no call has collected yet
//! (`left_atoms`, the whole payment when reserved, 0 once failed): a call answered
//! after paying collects its price from its own row first ([`SpendLog::collect`]), a
//! call answered from credit without paying from its agent's rows, oldest confirmed
//! first. What stays (a paid call refused again until the bridge gave up, a tip
//! confirmed after the bridge stopped waiting, an approved payment whose call was
//! never retried) is [`SpendLog::uncollected`], the paying agent's: another agent's
//! call to that bot is not sent while it is there. Credit a call used that was not
//! its agent's (another agent's that had expired, or a balance the bridge never paid,
//! such as a tip sent by hand) is recorded in the `credit_use` table
//! ([`CreditUse`]), and counts against that agent's own daily cap as a payment would;
//! it never counts against the global cap, whose money was counted when paid.

mod call_payment;
mod credit;
mod outcomes;
mod schema;

pub use call_payment::CallPayment;

use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::settings::DEFAULT_AGENT;

/// The spend log's file name inside the data directory.
pub const SPEND_FILE: &str = "mcpspend.sqlite";

/// The rolling window of the daily cap: 24 hours, in seconds.
pub const DAY_SECS: i64 = 24 * 60 * 60;

/// Settled rows older than this are pruned when the log is opened: 90 days. The daily
/// cap needs one day; the rest is the user's history. Pending rows are never pruned.
pub const KEEP_SECS: i64 = 90 * DAY_SECS;

/// Where a payment stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendStatus {
    /// Reserved or in flight; counts toward the daily cap.
    Pending,
    /// Settled; counts toward the daily cap.
    Paid,
    /// Not made; does not count.
    Failed,
}

impl SpendStatus {
    /// The status as stored and shown: `pending`, `paid` or `failed`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Paid => "paid",
            Self::Failed => "failed",
        }
    }

    /// The status stored in column `index` of `row`; a value the schema's check
    /// forbids is a damaged row, an error.
    fn read(row: &rusqlite::Row<'_>, index: usize) -> rusqlite::Result<Self> {
        match row.get_ref(index)?.as_str()? {
            "pending" => Ok(Self::Pending),
            "paid" => Ok(Self::Paid),
            "failed" => Ok(Self::Failed),
            other => Err(rusqlite::Error::FromSqlConversionFailure(
                index,
                rusqlite::types::Type::Text,
                format!("spend status {other:?}").into(),
            )),
        }
    }
}

/// One row of the spend log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpendEntry {
    /// The row's id.
    pub id: i64,
    /// When the payment was reserved, unix seconds.
    pub ts: i64,
    /// The bot paid (lowercase uid).
    pub bot: String,
    /// The tool the payment was for.
    pub tool: String,
    /// How it was paid: `"tip"`.
    pub rail: String,
    /// The amount, in atoms.
    pub atoms: u64,
    /// Where it stands.
    pub status: SpendStatus,
    /// Why it failed.
    pub err: Option<String>,
    /// Pending with nobody waiting for it: the bridge gave up waiting for the tip's
    /// confirmation (or an earlier run did); its outcome may still arrive.
    pub unconfirmed: bool,
    /// The outcome stream's position when the tip was sent (see the module docs).
    pub tip_pos: u64,
    /// The id of the outcome that settled it, if an outcome did.
    pub outcome: Option<u64>,
    /// The agent that spent it (`default` for the file's `token`, and for every row
    /// written before agents were recorded).
    pub agent: String,
}

/// A tip outcome from the client's outcome stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TipOutcomeEvent<'a> {
    /// Its id on the stream.
    pub id: u64,
    /// The tip's payee.
    pub bot: PeerId,
    /// The tip's amount, in atoms.
    pub atoms: u64,
    /// Paid, or failed with the client's reason.
    pub outcome: Result<(), &'a str>,
}

/// What a tip outcome did to the spend log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// It settled this row.
    Settled(i64),
    /// It was recorded before: a replay, which settles nothing.
    Replay,
    /// No unresolved payment can be its: a tip sent by hand or by another program,
    /// or one whose payment was settled otherwise.
    NotOurs,
}

/// A payment whose credit a bot holds and no call has collected (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Uncollected {
    /// The payment's row.
    pub id: i64,
    /// When it was reserved, unix seconds.
    pub ts: i64,
    /// The bot that holds it (lowercase uid).
    pub bot: String,
    /// The agent that paid it: the credit is its.
    pub agent: String,
    /// The tool it was paid for.
    pub tool: String,
    /// Atoms not collected.
    pub atoms: u64,
    /// Whether its tip is still unconfirmed (pending).
    pub pending: bool,
    /// For a pending payment, since when its outcome is unknown, unix seconds: its
    /// reservation, or an older payment's whose uncertainty it took over
    /// ([`SpendLog::stays_pending_for`]).
    pub since: i64,
}

/// A call answered from credit that was not its agent's (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CreditUse {
    /// When, unix seconds.
    pub ts: i64,
    /// The bot (lowercase uid).
    pub bot: String,
    /// The tool called.
    pub tool: String,
    /// The agent whose call it was: the atoms count against its daily cap.
    pub agent: String,
    /// Atoms used.
    pub atoms: u64,
    /// The agent whose uncollected credit it was, or `None` for credit the bridge
    /// never paid.
    pub credit_of: Option<String>,
}

/// How a call's price was collected from the credit at a bot ([`SpendLog::collect`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Atoms from the calling agent's own payments.
    pub own: u64,
    /// Atoms from another agent's payments, or (`None`) from credit the bridge never
    /// paid; each recorded as a [`CreditUse`].
    pub others: Vec<(Option<String>, u64)>,
}

/// Why the spend log failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SpendError {
    /// SQLite failed.
    #[error("spend log: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// The file is another application's database.
    #[error("spend log: {0} is not a brmcp spend log")]
    Foreign(String),
}

/// Whether paying `atoms` with `spent` already counted stays within `daily_cap`; a cap
/// of 0 never pays.
pub(crate) const fn fits_daily_cap(spent: u64, atoms: u64, daily_cap: u64) -> bool {
    daily_cap != 0 && spent.saturating_add(atoms) <= daily_cap
}

/// The reservation refused: the daily cap would be exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverDailyCap {
    /// Atoms pending or paid in the last 24 hours.
    pub spent: u64,
}

/// The reservation refused by a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverCap {
    /// The global daily cap would be exceeded.
    Daily(OverDailyCap),
    /// The agent's own daily cap would be exceeded; `spent` is the agent's.
    Agent(OverDailyCap),
}

/// A payment asked for, as [`SpendLog::reserve_as`] records it: `atoms` to `bot`, for
/// a call of `tool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Payment<'a> {
    /// The bot paid.
    pub bot: &'a PeerId,
    /// The tool the payment is for.
    pub tool: &'a str,
    /// How much, in atoms.
    pub atoms: u64,
}

impl<'a> Payment<'a> {
    /// Its fields.
    #[must_use]
    pub const fn new(bot: &'a PeerId, tool: &'a str, atoms: u64) -> Self {
        Self { bot, tool, atoms }
    }
}

/// Who makes a payment, as [`SpendLog::reserve_as`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spender<'a> {
    /// The agent paying.
    pub agent: &'a str,
    /// The agent's own daily cap, in atoms, if it has one.
    pub agent_cap: Option<u64>,
    /// The call journal's key of the call the payment is for, if any: how a restart
    /// tells a call's payment from another of the same agent, bot, tool and amount.
    pub call_key: Option<&'a str>,
}

impl<'a> Spender<'a> {
    /// `agent`'s payment for no journaled call.
    #[must_use]
    pub const fn agent(agent: &'a str, agent_cap: Option<u64>) -> Self {
        Self {
            agent,
            agent_cap,
            call_key: None,
        }
    }

    /// The payment for the call of `call_key`.
    #[must_use]
    pub const fn for_call(self, call_key: &'a str) -> Self {
        Self {
            call_key: Some(call_key),
            ..self
        }
    }
}

/// The spend log of one data directory.
#[derive(Debug)]
pub struct SpendLog {
    db: Mutex<Connection>,
}

/// `n` as SQLite's integer, saturating: amounts come within `i64` from the protocol
/// reader, and a saturated stream position only refuses more outcomes.
fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stored non-negative integer; a negative one (not written by this log) is 0.
fn u64_of(n: i64) -> u64 {
    u64::try_from(n).unwrap_or_default()
}

impl SpendLog {
    /// Opens (or creates) the log in `dir` and prunes settled rows (and records of
    /// credit used) older than [`KEEP_SECS`].
    ///
    /// # Errors
    /// [`SpendError`] when the file cannot be opened or is not a spend log.
    pub fn open(dir: &Path, now: UnixTime) -> Result<Self, SpendError> {
        let path = dir.join(SPEND_FILE);
        let db = schema::open(&path)?;
        db.execute(
            "DELETE FROM spend WHERE status != 'pending' AND ts < ?1",
            params![now.0.saturating_sub(KEEP_SECS)],
        )?;
        db.execute(
            "DELETE FROM credit_use WHERE ts < ?1",
            params![now.0.saturating_sub(KEEP_SECS)],
        )?;
        Ok(Self { db: Mutex::new(db) })
    }

    /// Marks every pending row unconfirmed: called by a bridge starting on this log,
    /// for the payments an earlier run was waiting for when it stopped. Their outcomes
    /// can then settle them ([`resolve_outcome`](Self::resolve_outcome)). Returns how many.
    ///
    /// # Errors
    /// SQLite's.
    pub fn unconfirm_left_pending(&self) -> Result<usize, SpendError> {
        Ok(self.db().execute(
            "UPDATE spend SET unconfirmed = 1 WHERE status = 'pending' AND unconfirmed = 0",
            [],
        )?)
    }

    fn db(&self) -> MutexGuard<'_, Connection> {
        self.db.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Atoms counted against the daily cap at `now`: paid in the 24 hours before it,
    /// and pending whatever their age.
    ///
    /// # Errors
    /// SQLite's.
    pub fn spent_today(&self, now: UnixTime) -> Result<u64, SpendError> {
        Ok(spent(&self.db(), now)?)
    }

    /// [`spent_today`](Self::spent_today) of `agent`'s payments only.
    ///
    /// # Errors
    /// SQLite's.
    pub fn spent_today_by(&self, now: UnixTime, agent: &str) -> Result<u64, SpendError> {
        Ok(spent_by(&self.db(), now, agent)?)
    }

    /// Payments pending (their outcome not known yet) and their atoms.
    ///
    /// # Errors
    /// SQLite's.
    pub fn pending(&self) -> Result<(u64, u64), SpendError> {
        let (count, atoms): (i64, i64) = self.db().query_row(
            "SELECT COUNT(*), COALESCE(SUM(atoms), 0) FROM spend WHERE status = 'pending'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok((u64_of(count), u64_of(atoms)))
    }

    /// Reserves `atoms` for a payment to `bot` if the daily total stays within
    /// `daily_cap`, as one transaction; the row starts `pending`. `tip_pos` is the
    /// outcome stream's position now (see the module docs); the row records it, raised
    /// to the highest position or outcome this log has recorded.
    ///
    /// # Errors
    /// `Ok(Err(OverDailyCap))` when it would not fit; `Err` for SQLite's errors.
    pub fn reserve(
        &self,
        now: UnixTime,
        bot: &PeerId,
        tool: &str,
        atoms: u64,
        daily_cap: u64,
        tip_pos: u64,
    ) -> Result<Result<i64, OverDailyCap>, SpendError> {
        let payer = Spender::agent(DEFAULT_AGENT, None);
        let reserved = self.reserve_as(
            now,
            &payer,
            Payment::new(bot, tool, atoms),
            daily_cap,
            tip_pos,
        );
        Ok(reserved?.map_err(|(OverCap::Daily(over) | OverCap::Agent(over))| over))
    }

    /// [`reserve`](Self::reserve) for `payer`'s payment, which must also fit the
    /// agent's own daily cap (when it has one) counting its payments only; both checks
    /// and the row in one transaction, so concurrent agents cannot together pass
    /// either cap. The row names the call it pays for, when there is one.
    ///
    /// # Errors
    /// `Ok(Err(OverCap))` when it would not fit; `Err` for SQLite's errors.
    pub fn reserve_as(
        &self,
        now: UnixTime,
        payer: &Spender<'_>,
        payment: Payment<'_>,
        daily_cap: u64,
        tip_pos: u64,
    ) -> Result<Result<i64, OverCap>, SpendError> {
        let Payment { bot, tool, atoms } = payment;
        let mut db = self.db();
        let tx = db.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if let Some(cap) = payer.agent_cap {
            let spent = spent_by(&tx, now, payer.agent)?;
            if !fits_daily_cap(spent, atoms, cap) {
                return Ok(Err(OverCap::Agent(OverDailyCap { spent })));
            }
        }
        let spent = spent(&tx, now)?;
        if !fits_daily_cap(spent, atoms, daily_cap) {
            return Ok(Err(OverCap::Daily(OverDailyCap { spent })));
        }
        let tip_pos = raise_floor(&tx, tip_pos)?;
        tx.execute(
            "INSERT INTO spend (ts, bot, tool, rail, atoms, status, tip_pos, agent, left_atoms, \
             call_key) VALUES (?1, ?2, ?3, 'tip', ?4, 'pending', ?5, ?6, ?4, ?7)",
            params![
                now.0,
                bot.to_string(),
                tool,
                i64_of(atoms),
                i64_of(tip_pos),
                payer.agent,
                payer.call_key,
            ],
        )?;
        let id = tx.last_insert_rowid();
        tx.commit()?;
        Ok(Ok(id))
    }

    /// Records that the outcome stream reached `pos` (every outcome up to it was seen),
    /// so later payments are recorded at no lower position, across restarts too.
    ///
    /// # Errors
    /// SQLite's.
    pub fn raise_floor(&self, pos: u64) -> Result<(), SpendError> {
        raise_floor(&self.db(), pos)?;
        Ok(())
    }

    /// The status of row `id` and, if it failed, why; `None` if there is no such row.
    ///
    /// # Errors
    /// SQLite's.
    pub fn status(&self, id: i64) -> Result<Option<(SpendStatus, Option<String>)>, SpendError> {
        let row = self
            .db()
            .query_row(
                "SELECT status, err FROM spend WHERE id = ?1",
                params![id],
                |r| Ok((SpendStatus::read(r, 0)?, r.get(1)?)),
            )
            .optional()?;
        Ok(row)
    }

    /// Every row, oldest first.
    ///
    /// # Errors
    /// SQLite's.
    pub fn entries(&self) -> Result<Vec<SpendEntry>, SpendError> {
        let db = self.db();
        let mut stmt = db.prepare(&format!("SELECT {ENTRY_COLUMNS} FROM spend ORDER BY id"))?;
        let rows = stmt.query_map([], entry)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// The columns [`entry`] reads, in its order.
pub(super) const ENTRY_COLUMNS: &str =
    "id, ts, bot, tool, rail, atoms, status, err, unconfirmed, tip_pos, outcome, agent";

/// A [`SpendEntry`] from a row of [`ENTRY_COLUMNS`].
pub(super) fn entry(r: &rusqlite::Row<'_>) -> rusqlite::Result<SpendEntry> {
    Ok(SpendEntry {
        id: r.get(0)?,
        ts: r.get(1)?,
        bot: r.get(2)?,
        tool: r.get(3)?,
        rail: r.get(4)?,
        atoms: u64_of(r.get(5)?),
        status: SpendStatus::read(r, 6)?,
        err: r.get(7)?,
        unconfirmed: r.get(8)?,
        tip_pos: u64_of(r.get(9)?),
        outcome: r.get::<_, Option<i64>>(10)?.map(u64_of),
        agent: r.get(11)?,
    })
}

fn spent(db: &Connection, now: UnixTime) -> rusqlite::Result<u64> {
    let total: i64 = db.query_row(
        "SELECT COALESCE(SUM(atoms), 0) FROM spend \
         WHERE status = 'pending' OR (status = 'paid' AND ts > ?1)",
        params![now.0.saturating_sub(DAY_SECS)],
        |r| r.get(0),
    )?;
    Ok(u64_of(total))
}

/// [`spent`] of `agent`'s rows only, and the credit not its own that its calls used
/// in the last 24 hours.
fn spent_by(db: &Connection, now: UnixTime, agent: &str) -> rusqlite::Result<u64> {
    let since = now.0.saturating_sub(DAY_SECS);
    let paid: i64 = db.query_row(
        "SELECT COALESCE(SUM(atoms), 0) FROM spend WHERE agent = ?2 \
         AND (status = 'pending' OR (status = 'paid' AND ts > ?1))",
        params![since, agent],
        |r| r.get(0),
    )?;
    let used: i64 = db.query_row(
        "SELECT COALESCE(SUM(atoms), 0) FROM credit_use WHERE agent = ?2 AND ts > ?1",
        params![since, agent],
        |r| r.get(0),
    )?;
    Ok(u64_of(paid).saturating_add(u64_of(used)))
}

/// Raises the recorded floor of stream positions to `pos`; returns the floor.
fn raise_floor(db: &Connection, pos: u64) -> rusqlite::Result<u64> {
    db.execute(
        "INSERT INTO tip_floor (id, pos) VALUES (1, ?1) \
         ON CONFLICT (id) DO UPDATE SET pos = max(pos, excluded.pos)",
        params![i64_of(pos)],
    )?;
    db.query_row("SELECT pos FROM tip_floor WHERE id = 1", [], |r| {
        r.get(0).map(u64_of)
    })
}

#[cfg(test)]
mod tests;
