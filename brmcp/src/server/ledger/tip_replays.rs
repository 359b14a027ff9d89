//! Tips redelivered after the client cleared their id: known for a bounded window,
//! so a replay is never credited twice (see [`TIP_REPLAY_WINDOW_SECS`]).

use brmcp_adapters::wire::UnixTime;
use rusqlite::{OptionalExtension, params};

use super::{LedgerError, seq_to_sql};

/// How long a tip stays known after the client cleared its id: a redelivery of it
/// (same sequence id, caller and amount) within this window is a duplicate, never a
/// second credit. A client that follows the protocol delivers nothing it cleared
/// again, but a stream reopened while an acknowledgement is in flight can replay an
/// item the acknowledgement then clears, and a client restarted after a crash can
/// lose an acknowledgement it confirmed. Both redeliver within seconds to minutes of
/// the original; an hour covers them, while a client whose ids start over (its logs
/// reset) would have to repeat the same id, caller and amount inside it to lose a tip.
pub const TIP_REPLAY_WINDOW_SECS: u64 = 3600;

/// The most recent tips the replay window looks through, cleared or not: bounds the
/// rows read per tip received (the table has no index over cleared ids) at a few
/// milliseconds, above the tips a bot at its rate limit receives in minutes.
pub const TIP_REPLAY_ROWS: u32 = 4096;

/// Whether the same tip (sequence id, caller, amount) is among the last
/// [`TIP_REPLAY_ROWS`] tips and was received within [`TIP_REPLAY_WINDOW_SECS`] of
/// `now`: a redelivery of a tip whose id the client cleared.
pub(super) fn replayed(
    tx: &rusqlite::Transaction<'_>,
    seq: u64,
    caller: &str,
    matoms: i64,
    now: UnixTime,
) -> Result<bool, LedgerError> {
    let window = i64::try_from(TIP_REPLAY_WINDOW_SECS).unwrap_or(i64::MAX);
    let since = now.secs().saturating_sub(window);
    let found = tx
        .query_row(
            "SELECT 1 FROM (SELECT seq, caller, matoms, received_at FROM tips \
             ORDER BY id DESC LIMIT ?1) \
             WHERE seq = ?2 AND caller = ?3 AND matoms = ?4 AND received_at >= ?5 LIMIT 1",
            params![TIP_REPLAY_ROWS, seq_to_sql(seq), caller, matoms, since],
            |_| Ok(()),
        )
        .optional()?;
    Ok(found.is_some())
}
