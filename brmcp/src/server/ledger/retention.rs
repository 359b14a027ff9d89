//! How long the paid-call journal keeps what, and how the file gives space back.
//!
//! A finished call's outcome goes when its replay window closes ([`OUTCOME_TTL_SECS`]);
//! its compact money row (caller, tool, price, state, times, key) stays until the
//! caller has more than [`MAX_JOURNAL_ROWS_PER_CALLER`] of them, and the oldest go
//! first, summed into the `pruned` table so the money they record is never lost.
//! The file is `auto_vacuum = INCREMENTAL` and hands free pages back to the operating
//! system once more than [`VACUUM_FREE_PAGES`] of them collect.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rusqlite::{Connection, OptionalExtension, params};

use super::{LedgerError, sql_limit};
use brmcp_adapters::wire::UnixTime;

#[cfg(doc)]
use crate::server::call_key::{MAX_OUTCOME_BYTES, OUTCOME_TTL_SECS};

/// Finished calls the journal keeps per caller: 2048 (and up to [`PRUNE_EVERY`] less one
/// more between two prunes), over an hour of calls at the default rate limit (twice the
/// replay window), months for a caller paying by hand.
/// Only rows whose key no longer blocks a retry (never a pending or replayable call)
/// and that no operator action points to are pruned; their count and price are added
/// to the caller's `pruned` totals. Without it, a caller at the rate limit adds
/// 43,200 rows a day forever.
pub const MAX_JOURNAL_ROWS_PER_CALLER: usize = 2048;

/// Bytes of replayable outcomes the journal keeps for one caller: 16 MiB, sixteen
/// maximal outcomes ([`MAX_OUTCOME_BYTES`]). Outcomes are kept for their replay window
/// ([`OUTCOME_TTL_SECS`]), so without a bound one caller at the rate limit holds
/// gigabytes of the operator's disk. Past it the caller's oldest outcome goes first; its
/// key stays held, so a retry is answered "outcome not retained" instead of running and
/// paying again.
pub const MAX_OUTCOME_BYTES_PER_CALLER: usize = 16 << 20;

/// Replayable outcomes the journal keeps for one caller: 1024, more than a caller at
/// the default rate limit finishes in one replay window. Bounds the rows the per-caller
/// byte check reads.
pub(crate) const MAX_OUTCOMES_PER_CALLER: usize = 1024;

/// A caller's charges between two prunes of its journal rows: 64. Finding the cut reads
/// the caller's newest [`MAX_JOURNAL_ROWS_PER_CALLER`] index entries, the largest part
/// of a paid call's work when done at every charge; between two prunes a caller may
/// hold up to 63 rows past the bound.
pub const PRUNE_EVERY: u32 = 64;

/// Callers whose charges since their last prune are counted: 4096. Past it the counts
/// start over, and each caller is pruned at its next charge: sooner, never later.
const PRUNE_CLOCK_CALLERS: usize = 4096;

/// When each caller's journal is next pruned: at its first charge in this process,
/// then every [`PRUNE_EVERY`] charges.
#[derive(Debug, Default)]
pub(super) struct PruneClock(Mutex<HashMap<String, u32>>);

impl PruneClock {
    /// Counts a charge of `caller`'s unless its journal would be due a prune (then it
    /// counts nothing): `true` when it counted.
    pub(super) fn count_unless_due(&self, caller: &str) -> bool {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match counts.get_mut(caller) {
            Some(count) if *count + 1 < PRUNE_EVERY => {
                *count += 1;
                true
            }
            _ => false,
        }
    }

    /// Takes back a count of [`count_unless_due`](Self::count_unless_due) whose charge
    /// was declined, so the charge made in its place is counted once.
    pub(super) fn uncount(&self, caller: &str) {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(caller) {
            *count = count.saturating_sub(1);
        }
    }

    /// Counts a charge of `caller`'s; `true` when its journal is due a prune.
    pub(super) fn due(&self, caller: &str) -> bool {
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(caller) {
            *count += 1;
            if *count < PRUNE_EVERY {
                return false;
            }
            *count = 0;
            return true;
        }
        if counts.len() >= PRUNE_CLOCK_CALLERS {
            counts.clear();
        }
        counts.insert(caller.to_owned(), 0);
        true
    }
}

/// Callers whose outcome bytes are estimated: 4096. Past it the estimates start over,
/// and each caller's is taken exactly again at its next kept outcome.
const OUTCOME_ESTIMATE_CALLERS: usize = 4096;

/// Per caller, at least the bytes of the outcomes it keeps for replay, so that the
/// exact count, which reads every kept outcome (up to [`MAX_OUTCOMES_PER_CALLER`]), is
/// taken only when [`MAX_OUTCOME_BYTES_PER_CALLER`] could be passed. Each kept outcome
/// adds its bytes; what drops outcomes (the count bound, the replay window's end)
/// leaves the estimate above the truth, which only brings the exact count sooner. A
/// caller not estimated yet (this process has not kept an outcome of its) is counted
/// exactly.
#[derive(Debug, Default)]
pub(super) struct OutcomeBytes(Mutex<HashMap<String, u64>>);

impl OutcomeBytes {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops `caller`'s oldest replayable outcomes past [`MAX_OUTCOMES_PER_CALLER`] or
    /// [`MAX_OUTCOME_BYTES_PER_CALLER`] after the call just closed kept `kept` bytes (if
    /// it kept an outcome); their keys stay held. Returns how many went.
    pub(super) fn bound(
        &self,
        conn: &Connection,
        caller: &str,
        kept: Option<usize>,
    ) -> Result<usize, LedgerError> {
        let Some(kept) = kept else { return Ok(0) };
        // The count: an index-only read of the caller's newest kept outcomes.
        let mut dropped = conn
            .prepare_cached(
                "UPDATE calls SET outcome = NULL WHERE id IN ( \
                   SELECT id FROM calls \
                   WHERE caller = ?1 AND key_held = 1 AND outcome IS NOT NULL \
                   ORDER BY id DESC LIMIT -1 OFFSET ?2)",
            )?
            .execute(params![caller, sql_limit(MAX_OUTCOMES_PER_CALLER)])?;
        let over = self.lock().get_mut(caller).is_none_or(|bytes| {
            *bytes = bytes.saturating_add(kept as u64);
            *bytes > MAX_OUTCOME_BYTES_PER_CALLER as u64
        });
        if over {
            dropped += conn
                .prepare_cached(
                    "UPDATE calls SET outcome = NULL WHERE id IN ( \
                       SELECT id FROM ( \
                         SELECT id, \
                           SUM(length(CAST(outcome AS BLOB))) OVER newest AS bytes \
                         FROM calls \
                         WHERE caller = ?1 AND key_held = 1 AND outcome IS NOT NULL \
                         WINDOW newest AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) \
                       WHERE bytes > ?2)",
                )?
                .execute(params![caller, sql_limit(MAX_OUTCOME_BYTES_PER_CALLER)])?;
            let exact: i64 = conn
                .prepare_cached(
                    "SELECT COALESCE(SUM(length(CAST(outcome AS BLOB))), 0) FROM calls \
                     WHERE caller = ?1 AND key_held = 1 AND outcome IS NOT NULL",
                )?
                .query_row([caller], |r| r.get(0))?;
            let mut estimates = self.lock();
            if estimates.len() >= OUTCOME_ESTIMATE_CALLERS {
                estimates.clear();
            }
            estimates.insert(caller.to_owned(), u64::try_from(exact).unwrap_or(u64::MAX));
        }
        Ok(dropped)
    }

    /// `result`, the outcome of a transaction that bounded outcomes; when it failed, its
    /// changes did not happen, and an exact count taken in it may be below the truth:
    /// every estimate is forgotten.
    pub(super) fn unless_failed<T>(
        &self,
        result: Result<T, LedgerError>,
    ) -> Result<T, LedgerError> {
        if result.is_err() {
            self.lock().clear();
        }
        result
    }
}

/// Free pages the file may hold before `PRAGMA incremental_vacuum` gives them back:
/// 1024, 4 MiB at SQLite's default page size. Freed pages are reused by the next
/// outcome anyway; vacuuming only above this keeps one caller's churn at its outcome
/// bound from shrinking and regrowing the file on every call.
pub const VACUUM_FREE_PAGES: i64 = 1024;

/// The write-ahead log is cut back to this after a checkpoint (`journal_size_limit`):
/// 4 MiB. SQLite otherwise keeps the log at the largest size it ever reached.
pub(crate) const WAL_SIZE_LIMIT: i64 = 4 << 20;

/// Release keys whose replay window closed at or before `now`, dropping their outcomes
/// and argument hashes, and drop waiting calls whose time ran out. The row stays: it
/// records money.
pub(super) fn release_expired(conn: &Connection, now: UnixTime) -> Result<usize, LedgerError> {
    // Reservations whose call never came back go too: their credit is spendable again.
    super::waiting::expire(conn, now)?;
    Ok(conn
        .prepare_cached(
            "UPDATE calls SET key_held = 0, outcome = NULL, args_hash = NULL \
             WHERE key_held = 1 AND state != 'pending' AND replay_until <= ?1",
        )?
        .execute([now.secs()])?)
}

/// Prune `caller`'s finished calls past [`MAX_JOURNAL_ROWS_PER_CALLER`], oldest first,
/// adding them to the caller's `pruned` totals in the same transaction. Returns how
/// many rows went.
pub(super) fn prune_journal(conn: &Connection, caller: &str) -> Result<usize, LedgerError> {
    // `calls_prunable` holds exactly the rows the first three terms allow, so neither
    // statement reads the caller's rows that still hold their key or wait.
    macro_rules! prunable {
        () => {
            "caller = ?1 AND id <= ?2 AND key_held = 0 AND state != 'pending' \
             AND id NOT IN (SELECT call_id FROM audit WHERE call_id IS NOT NULL)"
        };
    }
    // The newest row past the bound, leaving room for the call being charged; rows at
    // or below it that may go, go.
    let cut: Option<i64> = conn
        .prepare_cached(
            "SELECT id FROM calls WHERE caller = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2",
        )?
        .query_row(
            params![caller, sql_limit(MAX_JOURNAL_ROWS_PER_CALLER - 1)],
            |r| r.get(0),
        )
        .optional()?;
    let Some(cut) = cut else { return Ok(0) };
    conn.prepare_cached(concat!(
        "INSERT INTO pruned (caller, completed, completed_atoms, refunded) \
         SELECT caller, \
           SUM(state = 'completed'), \
           SUM(CASE WHEN state = 'completed' THEN price_atoms ELSE 0 END), \
           SUM(state = 'refunded') \
         FROM calls WHERE ",
        prunable!(),
        " GROUP BY caller \
         ON CONFLICT (caller) DO UPDATE SET \
           completed = completed + excluded.completed, \
           completed_atoms = completed_atoms + excluded.completed_atoms, \
           refunded = refunded + excluded.refunded"
    ))?
    .execute(params![caller, cut])?;
    Ok(conn
        .prepare_cached(concat!("DELETE FROM calls WHERE ", prunable!()))?
        .execute(params![caller, cut])?)
}

/// The second of the last charge that released expired keys and reservations. Nothing
/// expires within the second a release ran in (a key or reservation is made to last
/// past the second it is made in), so a charge in the same second skips the release:
/// it would find nothing.
#[derive(Debug)]
pub(super) struct ReleaseClock(AtomicI64);

impl Default for ReleaseClock {
    fn default() -> Self {
        // No second: the first charge releases.
        Self(AtomicI64::new(i64::MIN))
    }
}

impl ReleaseClock {
    /// Whether a charge at `now` must release (no release committed at `now` yet).
    pub(super) fn due(&self, now: UnixTime) -> bool {
        self.0.load(Ordering::Relaxed) != now.secs()
    }

    /// A release at `now` committed.
    pub(super) fn done(&self, now: UnixTime) {
        self.0.store(now.secs(), Ordering::Relaxed);
    }
}

/// Give free pages back to the operating system once more than [`VACUUM_FREE_PAGES`]
/// have collected. Returns whether it vacuumed.
pub(super) fn reclaim(conn: &Connection) -> Result<bool, LedgerError> {
    let free: i64 = conn
        .prepare_cached("PRAGMA freelist_count")?
        .query_row([], |r| r.get(0))?;
    if free <= VACUUM_FREE_PAGES {
        return Ok(false);
    }
    // Each step frees one page: step it to the end. The pages go when the
    // transaction commits.
    let mut stmt = conn.prepare("PRAGMA incremental_vacuum")?;
    let mut rows = stmt.query([])?;
    while rows.next()?.is_some() {}
    Ok(true)
}

/// Make the file `auto_vacuum = INCREMENTAL`: free on a new file, one `VACUUM` for a
/// file made before (outside any transaction, by the process that owns the ledger).
pub(super) fn enable_incremental_vacuum(conn: &Connection) -> Result<(), rusqlite::Error> {
    const INCREMENTAL: i64 = 2;
    let mode: i64 = conn.query_row("PRAGMA auto_vacuum", [], |r| r.get(0))?;
    if mode == INCREMENTAL {
        return Ok(());
    }
    conn.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    let objects: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    if objects > 0 {
        conn.execute_batch("VACUUM")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_due_once_per_second_it_committed_in() {
        let clock = ReleaseClock::default();
        let t = UnixTime(1_767_225_600);
        assert!(clock.due(t), "the first charge releases");
        // Not committed (the charge failed): still due.
        assert!(clock.due(t));
        clock.done(t);
        assert!(!clock.due(t));
        assert!(clock.due(t.saturating_add(1)));
        // A clock set back releases too.
        assert!(clock.due(UnixTime(t.secs() - 1)));
    }

    #[test]
    fn a_caller_is_pruned_at_its_first_charge_then_every_prune_every() {
        let clock = PruneClock::default();
        assert!(clock.due("a"));
        for _ in 1..PRUNE_EVERY {
            assert!(!clock.due("a"));
        }
        assert!(clock.due("a"));
        assert!(clock.due("b"), "another caller is counted apart");
    }

    #[test]
    fn a_declined_charge_is_not_counted_twice() {
        let clock = PruneClock::default();
        assert!(
            !clock.count_unless_due("a"),
            "a first charge is due a prune"
        );
        assert!(clock.due("a"));
        // Every charge of a run counts once, each declined one taken back first and
        // counted again by the blocking charge made in its place.
        for _ in 2..=PRUNE_EVERY {
            assert!(clock.count_unless_due("a"));
            clock.uncount("a");
            assert!(!clock.due("a"));
        }
        assert!(!clock.count_unless_due("a"), "the next is due");
        assert!(clock.due("a"));
        clock.uncount("b");
        assert!(
            clock.due("b"),
            "taking back nothing counted leaves a caller unknown"
        );
    }
}
