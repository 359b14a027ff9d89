//! The ledger's totals, as `brmcp serve status` shows them: what callers hold, and
//! what the journal recorded over a recent window.

use brmcp_adapters::wire::UnixTime;
use rusqlite::params;

use super::{Ledger, LedgerError};

/// The window "recent" totals cover: 24 hours, the span of the bridge's daily cap.
pub const TOTALS_WINDOW_SECS: i64 = 24 * 60 * 60;

/// What the ledger holds and recorded in the last [`TOTALS_WINDOW_SECS`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct LedgerTotals {
    /// Callers with a balance row.
    pub callers: u64,
    /// The sum of every balance, in milliatoms (reserved credit included).
    pub balances_matoms: u64,
    /// The part of those balances reserved for calls refused for payment that wait
    /// for their retry, in milliatoms.
    #[serde(default)]
    pub reserved_matoms: u64,
    /// Paid (or keyed) calls started in the window.
    pub calls_24h: u64,
    /// Atoms charged for calls of the window that completed.
    pub earned_atoms_24h: u64,
    /// Calls refunded in the window (by a failed handler, a restart or the operator).
    pub refunds_24h: u64,
    /// Calls charged and still running (or left by a dead process).
    pub pending: u64,
}

impl Ledger {
    /// The totals at `now` (journal rows pruned by retention are not counted; they are
    /// far older than the window).
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn totals(&self, now: UnixTime) -> Result<LedgerTotals, LedgerError> {
        let since = now.secs().saturating_sub(TOTALS_WINDOW_SECS);
        let conn = self.conn();
        let (callers, balances): (i64, i64) = conn.query_row(
            "SELECT COUNT(*), COALESCE(SUM(matoms), 0) FROM balances",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        let reserved: i64 = conn.query_row(
            "SELECT COALESCE(SUM(reserved_matoms), 0) FROM waiting WHERE expires_at > ?1",
            [now.secs()],
            |r| r.get(0),
        )?;
        let (calls, earned, refunds, pending): (i64, i64, i64, i64) = conn.query_row(
            // A refusal while stopping (`STOPPING_REFUSAL`) is a notice, not a call.
            "SELECT \
               COUNT(*) FILTER (WHERE started_at >= ?1 AND reason IS NOT ?2), \
               COALESCE(SUM(price_atoms) FILTER (WHERE started_at >= ?1 AND state = 'completed'), 0), \
               COUNT(*) FILTER (WHERE state = 'refunded' AND finished_at >= ?1 AND reason IS NOT ?2), \
               COUNT(*) FILTER (WHERE state = 'pending') \
             FROM calls",
            params![since, super::STOPPING_REFUSAL],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        Ok(LedgerTotals {
            callers: n(callers),
            balances_matoms: n(balances),
            reserved_matoms: n(reserved),
            calls_24h: n(calls),
            earned_atoms_24h: n(earned),
            refunds_24h: n(refunds),
            pending: n(pending),
        })
    }

    /// Calls started and atoms earned (completed calls' prices) per UTC day and tool,
    /// over the `days` days up to `now` (today included), oldest first: the operator
    /// page's chart.
    ///
    /// # Errors
    ///
    /// A SQLite failure.
    pub fn daily_revenue(
        &self,
        now: UnixTime,
        days: i64,
    ) -> Result<Vec<DailyRevenue>, LedgerError> {
        let today = now.secs().div_euclid(DAY_SECS);
        let since = (today - days.max(1) + 1) * DAY_SECS;
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT started_at / ?2 AS day, tool, COUNT(*), \
               COALESCE(SUM(price_atoms) FILTER (WHERE state = 'completed'), 0) \
             FROM calls WHERE started_at >= ?1 GROUP BY day, tool ORDER BY day, tool",
        )?;
        let n = |v: i64| u64::try_from(v).unwrap_or(0);
        let rows = stmt.query_map(params![since, DAY_SECS], |r| {
            Ok(DailyRevenue {
                day: r.get::<_, i64>(0)? * DAY_SECS,
                tool: r.get(1)?,
                calls: n(r.get(2)?),
                earned_atoms: n(r.get(3)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }
}

/// Seconds of a UTC day, the unit of [`Ledger::daily_revenue`].
const DAY_SECS: i64 = 24 * 60 * 60;

/// One day's calls and earnings of one tool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct DailyRevenue {
    /// The day's first second (UTC), unix seconds.
    pub day: i64,
    /// The tool.
    pub tool: String,
    /// Calls started that day.
    pub calls: u64,
    /// Atoms charged for those of them that completed.
    pub earned_atoms: u64,
}
