//! One agent's share of the call journal: how many rows and bytes it may keep, and
//! which of its rows go first when it needs more (see the journal's module docs).

use rusqlite::{Connection, OptionalExtension, params};

/// Rows one agent may have: 1,000, far above the calls an agent makes in the replay
/// window through the HTTP session bounds, small enough to scan.
pub(crate) const MAX_CALLS_PER_AGENT: i64 = 1_000;

/// Bytes of arguments and outcomes one agent may have kept: 64 MiB.
pub(crate) const MAX_BYTES_PER_AGENT: i64 = 64 << 20;

/// One agent's bounds: [`MAX_CALLS_PER_AGENT`] and [`MAX_BYTES_PER_AGENT`] (smaller
/// in tests).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    pub calls: i64,
    pub bytes: i64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            calls: MAX_CALLS_PER_AGENT,
            bytes: MAX_BYTES_PER_AGENT,
        }
    }
}

/// Evicts `agent`'s rows, least needed first (delivered or cancelled, then outcomes of
/// unpaid calls, then outcomes of paid calls; never a call in flight), until `rows` more
/// rows and `bytes` more bytes fit its bounds; `false` if only calls in flight are left
/// and they do not.
pub(super) fn make_room(
    db: &Connection,
    bounds: Bounds,
    agent: &str,
    rows: i64,
    bytes: i64,
) -> rusqlite::Result<bool> {
    loop {
        let (count, used): (i64, i64) = db.query_row(
            "SELECT count(*), COALESCE(sum(length(CAST(params AS BLOB)) \
             + COALESCE(length(CAST(outcome AS BLOB)), 0)), 0) FROM calls WHERE agent = ?1",
            params![agent],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        if count.saturating_add(rows) <= bounds.calls && used.saturating_add(bytes) <= bounds.bytes
        {
            return Ok(true);
        }
        let victim: Option<i64> = db
            .query_row(
                "SELECT id FROM calls WHERE agent = ?1 \
                 AND state IN ('delivered', 'cancelled', 'answered') \
                 ORDER BY CASE WHEN state IN ('delivered', 'cancelled') THEN 0 \
                 WHEN paid_atoms = 0 AND paying_atoms = 0 THEN 1 ELSE 2 END, id LIMIT 1",
                params![agent],
                |r| r.get(0),
            )
            .optional()?;
        match victim {
            Some(id) => {
                db.execute("DELETE FROM calls WHERE id = ?1", params![id])?;
            }
            None => return Ok(false),
        }
    }
}
