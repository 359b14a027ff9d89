//! Callers' balances, in milliatoms, read and written inside the caller's transaction.

use rusqlite::{Connection, OptionalExtension, params};

use super::{LedgerError, amount, amount_to_sql};

pub(super) fn balance(conn: &Connection, caller: &str) -> Result<u64, LedgerError> {
    Ok(conn
        .prepare_cached("SELECT matoms FROM balances WHERE caller = ?1")?
        .query_row([caller], |r| amount(r, 0))
        .optional()?
        .unwrap_or(0))
}

pub(super) fn set_balance(conn: &Connection, caller: &str, matoms: u64) -> Result<(), LedgerError> {
    conn.prepare_cached(
        "INSERT INTO balances (caller, matoms) VALUES (?1, ?2) \
         ON CONFLICT (caller) DO UPDATE SET matoms = excluded.matoms",
    )?
    .execute(params![caller, amount_to_sql(matoms)?])?;
    Ok(())
}

/// Add to a balance, in Rust rather than SQL: SQLite turns an overflowing integer sum
/// into a float instead of failing.
pub(super) fn add_balance(
    conn: &Connection,
    caller: &str,
    matoms: u64,
) -> Result<u64, LedgerError> {
    let new = balance(conn, caller)?
        .checked_add(matoms)
        .ok_or(LedgerError::AmountOutOfRange)?;
    set_balance(conn, caller, new)?;
    Ok(new)
}
