//! Values as the ledger's columns hold them: amounts (never above [`MAX_MATOMS`]),
//! tip sequence ids bit for bit, bounds as SQLite integers, and caller uids.

use brmcp_adapters::{BoxError, PeerId};
use rusqlite::Row;
use rusqlite::types::Type;

use super::{LedgerError, MAX_MATOMS};

/// An amount as a SQLite integer; anything above [`MAX_MATOMS`] is refused.
pub(super) fn amount_to_sql(amount: u64) -> Result<i64, LedgerError> {
    if amount > MAX_MATOMS {
        return Err(LedgerError::AmountOutOfRange);
    }
    i64::try_from(amount).map_err(|_| LedgerError::AmountOutOfRange)
}

/// A tip sequence id bit for bit as a SQLite integer (see `ledger_schema.sql`).
pub(super) const fn seq_to_sql(seq: u64) -> i64 {
    i64::from_ne_bytes(seq.to_ne_bytes())
}

pub(super) fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// A non-negative integer column as `u64` (the schema's CHECKs keep amounts >= 0).
pub(super) fn amount(row: &Row<'_>, idx: usize) -> rusqlite::Result<u64> {
    let value: i64 = row.get(idx)?;
    u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(idx, value))
}

pub(super) fn peer(row: &Row<'_>, idx: usize) -> rusqlite::Result<PeerId> {
    row.get_ref(idx)?
        .as_str()?
        .parse()
        .map_err(|e| bad_column(idx, Box::new(e)))
}

pub(super) fn bad_column(idx: usize, e: BoxError) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(idx, Type::Text, e)
}
