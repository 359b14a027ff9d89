//! The directory's durable state: one SQLite file in the data directory
//! ([`STORE_FILE`]). Each provider's entry is one row holding the Go entry model's JSON
//! (`live`, `reg`, `flag`), and every state change is one `BEGIN IMMEDIATE`
//! transaction: read, change, write, commit, or nothing when the change is refused.
//! Test payments have their own table, written before money moves (see
//! [`SpendState`]).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::types::Entry;

/// The store's file name inside the data directory.
pub const STORE_FILE: &str = "directory.sqlite";

/// How long a transaction waits for another connection's write.
const BUSY_WAIT: Duration = Duration::from_secs(5);

/// `PRAGMA application_id` of the store: "brdr" in ASCII.
pub const STORE_APPLICATION_ID: i32 = 0x6272_6472;

/// The schema this code reads and writes (`PRAGMA user_version`).
pub const STORE_SCHEMA_VERSION: i32 = 1;

/// The store as [`crate::secure_fs::open_stamped_sqlite`] opens it. Stores made before
/// the stamp have the same schema, so they are stamped as they are.
const KIND: crate::secure_fs::SqliteKind = crate::secure_fs::SqliteKind {
    what: "directory store",
    application_id: STORE_APPLICATION_ID,
    version: STORE_SCHEMA_VERSION,
    schema: SCHEMA,
    unstamped_table: "entries",
    migrations: &[],
};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS entries (
    uid TEXT PRIMARY KEY NOT NULL,
    entry TEXT NOT NULL,
    -- The key of the registration's fee debit in the harness ledger.
    fund_key TEXT NOT NULL DEFAULT ''
) STRICT, WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS spends (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts INTEGER NOT NULL,
    uid TEXT NOT NULL,
    tool TEXT NOT NULL,
    atoms INTEGER NOT NULL CHECK (atoms > 0),
    -- The key of the escrow debit in the harness ledger.
    debit_key TEXT NOT NULL UNIQUE,
    -- The ledger's journal id of that debit, once made.
    call_id INTEGER,
    state TEXT NOT NULL CHECK (state IN ('launched', 'paying', 'refunding', 'paid', 'ambiguous'))
) STRICT;
CREATE TABLE IF NOT EXISTS leads (uid TEXT PRIMARY KEY NOT NULL, lead TEXT NOT NULL) STRICT;
CREATE TABLE IF NOT EXISTS peers (uid TEXT PRIMARY KEY NOT NULL, peer TEXT NOT NULL) STRICT;
";

/// Why a directory operation failed: a refusal (its text is the tool error, verbatim)
/// or the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirError {
    /// The operation is refused; the text is the reference's.
    #[error("{0}")]
    Refused(String),
    /// SQLite failed.
    #[error("directory store {}: {source}", .path.display())]
    Store {
        /// The store's file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// A stored row does not decode.
    #[error("directory store: corrupt row for {uid}: {message}")]
    Corrupt {
        /// Whose row.
        uid: String,
        /// serde's message.
        message: String,
    },
    /// The harness ledger failed.
    #[error("{0}")]
    Ledger(String),
}

/// A refusal with this text.
pub(crate) fn refuse<T>(text: impl Into<String>) -> Result<T, DirError> {
    Err(DirError::Refused(text.into()))
}

/// One provider's row.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stored {
    /// The entry model.
    pub entry: Entry,
    /// The key of the current registration's fee debit ('' with no registration).
    pub fund_key: String,
}

/// Where a test payment is. Written before each step, so a restart knows what may
/// have happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpendState {
    /// Recorded; the escrow may have been debited, nothing was sent.
    Launched,
    /// Debited; the payment may be on its way.
    Paying,
    /// The payment failed definitively; the debit is being given back.
    Refunding,
    /// Paid.
    Paid,
    /// Launched and not known to have failed (a deadline, a shutdown or a crash).
    Ambiguous,
}

impl SpendState {
    const fn as_str(self) -> &'static str {
        match self {
            Self::Launched => "launched",
            Self::Paying => "paying",
            Self::Refunding => "refunding",
            Self::Paid => "paid",
            Self::Ambiguous => "ambiguous",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "launched" => Self::Launched,
            "paying" => Self::Paying,
            "refunding" => Self::Refunding,
            "paid" => Self::Paid,
            "ambiguous" => Self::Ambiguous,
            _ => return None,
        })
    }
}

/// One test payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spend {
    /// Row id.
    pub id: i64,
    /// When launched.
    pub ts: i64,
    /// The provider paid.
    pub uid: String,
    /// The tool paid for.
    pub tool: String,
    /// The amount.
    pub atoms: i64,
    /// The escrow debit's ledger key.
    pub debit_key: String,
    /// The escrow debit's ledger journal id.
    pub call_id: Option<i64>,
    /// Where it is.
    pub state: SpendState,
}

/// The SQLite store.
#[derive(Debug)]
pub struct Store {
    conn: Mutex<Connection>,
    path: PathBuf,
}

impl Store {
    /// Opens (creating) `<dir>/`[`STORE_FILE`] through the secure open path: the
    /// file 0600, a link refused, another program's file or schema refused unchanged.
    ///
    /// # Errors
    /// [`DirError::Store`].
    pub fn open(dir: &Path) -> Result<Self, DirError> {
        let path = dir.join(STORE_FILE);
        let conn =
            crate::secure_fs::open_stamped_sqlite(&path, BUSY_WAIT, &KIND).map_err(|source| {
                DirError::Store {
                    path: path.clone(),
                    source,
                }
            })?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
        })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn sql(&self, source: rusqlite::Error) -> DirError {
        DirError::Store {
            path: self.path.clone(),
            source,
        }
    }

    /// `uid`'s row (empty when there is none).
    ///
    /// # Errors
    /// [`DirError::Store`], [`DirError::Corrupt`].
    pub fn get(&self, uid: &str) -> Result<Stored, DirError> {
        let conn = self.conn();
        read(&conn, uid).map_err(|e| self.lift(e))
    }

    /// Every row, by uid.
    ///
    /// # Errors
    /// [`DirError::Store`], [`DirError::Corrupt`].
    pub fn all(&self) -> Result<Vec<(String, Stored)>, DirError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT uid, entry, fund_key FROM entries ORDER BY uid")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get(2)?))
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (uid, json, fund_key) = row.map_err(|e| self.sql(e))?;
            let entry = decode(&uid, &json)?;
            out.push((uid, Stored { entry, fund_key }));
        }
        Ok(out)
    }

    /// Changes `uid`'s row in one transaction: `change` sees the current row and
    /// either edits it (an emptied row is deleted) or refuses, which writes nothing.
    ///
    /// # Errors
    /// `change`'s error, [`DirError::Store`], [`DirError::Corrupt`].
    pub fn update<T>(
        &self,
        uid: &str,
        change: impl FnOnce(&mut Stored) -> Result<T, DirError>,
    ) -> Result<T, DirError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sql(e))?;
        let mut stored = read(&tx, uid).map_err(|e| self.lift(e))?;
        let out = change(&mut stored)?;
        write(&tx, uid, &stored).map_err(|e| self.sql(e))?;
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(out)
    }

    /// Records a test payment about to be launched, and returns its row id.
    ///
    /// # Errors
    /// [`DirError::Store`].
    pub fn launch_spend(
        &self,
        ts: i64,
        uid: &str,
        tool: &str,
        atoms: i64,
        debit_key: &str,
    ) -> Result<i64, DirError> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO spends (ts, uid, tool, atoms, debit_key, state) VALUES (?1, ?2, ?3, ?4, ?5, 'launched')",
            params![ts, uid, tool, atoms, debit_key],
        )
        .map_err(|e| self.sql(e))?;
        Ok(conn.last_insert_rowid())
    }

    /// Moves a test payment on; with `paid_into`, in the same transaction adds its
    /// amount to that provider's `reg.paidAtoms` (if the registration is still the one
    /// with that fund key).
    ///
    /// # Errors
    /// [`DirError::Store`], [`DirError::Corrupt`].
    pub fn set_spend(
        &self,
        id: i64,
        state: SpendState,
        call_id: Option<i64>,
        paid_into: Option<(&str, &str)>,
    ) -> Result<(), DirError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sql(e))?;
        tx.execute(
            "UPDATE spends SET state = ?2, call_id = COALESCE(?3, call_id) WHERE id = ?1",
            params![id, state.as_str(), call_id],
        )
        .map_err(|e| self.sql(e))?;
        if let Some((uid, fund_key)) = paid_into {
            let atoms: i64 = tx
                .query_row("SELECT atoms FROM spends WHERE id = ?1", [id], |r| r.get(0))
                .map_err(|e| self.sql(e))?;
            let mut stored = read(&tx, uid).map_err(|e| self.lift(e))?;
            if stored.fund_key == fund_key
                && let Some(reg) = &mut stored.entry.reg
            {
                reg.paid_atoms += atoms;
                write(&tx, uid, &stored).map_err(|e| self.sql(e))?;
            }
        }
        tx.commit().map_err(|e| self.sql(e))
    }

    /// Forgets a test payment that definitively failed and was given back.
    ///
    /// # Errors
    /// [`DirError::Store`].
    pub fn delete_spend(&self, id: i64) -> Result<(), DirError> {
        self.conn()
            .execute("DELETE FROM spends WHERE id = ?1", [id])
            .map(drop)
            .map_err(|e| self.sql(e))
    }

    /// Every test payment, oldest first.
    ///
    /// # Errors
    /// [`DirError::Store`].
    pub fn spends(&self) -> Result<Vec<Spend>, DirError> {
        let conn = self.conn();
        let mut stmt = conn
            .prepare("SELECT id, ts, uid, tool, atoms, debit_key, call_id, state FROM spends ORDER BY id")
            .map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| {
                let state: String = r.get(7)?;
                Ok(Spend {
                    id: r.get(0)?,
                    ts: r.get(1)?,
                    uid: r.get(2)?,
                    tool: r.get(3)?,
                    atoms: r.get(4)?,
                    debit_key: r.get(5)?,
                    call_id: r.get(6)?,
                    state: SpendState::parse(&state).unwrap_or(SpendState::Ambiguous),
                })
            })
            .map_err(|e| self.sql(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.sql(e))
    }

    /// Rows in a federation table (`leads` or `peers`).
    ///
    /// # Errors
    /// [`DirError::Store`].
    pub fn count(&self, table: Table) -> Result<i64, DirError> {
        let sql = match table {
            Table::Leads => "SELECT COUNT(*) FROM leads",
            Table::Peers => "SELECT COUNT(*) FROM peers",
        };
        self.conn()
            .query_row(sql, [], |r| r.get(0))
            .map_err(|e| self.sql(e))
    }

    /// One row of a federation table.
    ///
    /// # Errors
    /// [`DirError::Store`], [`DirError::Corrupt`].
    pub fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        table: Table,
        uid: &str,
    ) -> Result<Option<T>, DirError> {
        let sql = format!(
            "SELECT {} FROM {} WHERE uid = ?1",
            table.column(),
            table.name()
        );
        let json: Option<String> = self
            .conn()
            .query_row(&sql, [uid], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))?;
        json.map(|j| {
            serde_json::from_str(&j).map_err(|e| DirError::Corrupt {
                uid: uid.to_owned(),
                message: e.to_string(),
            })
        })
        .transpose()
    }

    /// Every row of a federation table, by uid.
    ///
    /// # Errors
    /// [`DirError::Store`], [`DirError::Corrupt`].
    pub fn list_json<T: serde::de::DeserializeOwned>(
        &self,
        table: Table,
    ) -> Result<Vec<(String, T)>, DirError> {
        let sql = format!(
            "SELECT uid, {} FROM {} ORDER BY uid",
            table.column(),
            table.name()
        );
        let conn = self.conn();
        let mut stmt = conn.prepare(&sql).map_err(|e| self.sql(e))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for row in rows {
            let (uid, json) = row.map_err(|e| self.sql(e))?;
            let value = serde_json::from_str(&json).map_err(|e| DirError::Corrupt {
                uid: uid.clone(),
                message: e.to_string(),
            })?;
            out.push((uid, value));
        }
        Ok(out)
    }

    /// Changes one row of a federation table in one transaction: `change` sees the
    /// current row (none when absent) and edits it; nothing is written for an absent
    /// row. A read-then-write outside one transaction could undo a concurrent change
    /// (a lead converted while its invite was answered).
    ///
    /// # Errors
    /// [`DirError::Store`], [`DirError::Corrupt`].
    pub fn update_json<T: serde::Serialize + serde::de::DeserializeOwned>(
        &self,
        table: Table,
        uid: &str,
        change: impl FnOnce(&mut T),
    ) -> Result<Option<T>, DirError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.sql(e))?;
        let select = format!(
            "SELECT {} FROM {} WHERE uid = ?1",
            table.column(),
            table.name()
        );
        let json: Option<String> = tx
            .query_row(&select, [uid], |r| r.get(0))
            .optional()
            .map_err(|e| self.sql(e))?;
        let Some(json) = json else {
            return Ok(None);
        };
        let mut value: T = serde_json::from_str(&json).map_err(|e| DirError::Corrupt {
            uid: uid.to_owned(),
            message: e.to_string(),
        })?;
        change(&mut value);
        let json = serde_json::to_string(&value).expect("a row serializes");
        tx.execute(
            &format!(
                "UPDATE {} SET {} = ?2 WHERE uid = ?1",
                table.name(),
                table.column()
            ),
            params![uid, json],
        )
        .map_err(|e| self.sql(e))?;
        tx.commit().map_err(|e| self.sql(e))?;
        Ok(Some(value))
    }

    /// Writes (or, with `None`, deletes) one row of a federation table.
    ///
    /// # Errors
    /// [`DirError::Store`].
    pub fn put_json<T: serde::Serialize>(
        &self,
        table: Table,
        uid: &str,
        value: Option<&T>,
    ) -> Result<(), DirError> {
        let conn = self.conn();
        let done = match value {
            None => conn.execute(
                &format!("DELETE FROM {} WHERE uid = ?1", table.name()),
                [uid],
            ),
            Some(value) => {
                let json = serde_json::to_string(value).expect("a row serializes");
                conn.execute(
                    &format!(
                        "INSERT INTO {0} (uid, {1}) VALUES (?1, ?2) ON CONFLICT (uid) DO UPDATE SET {1} = ?2",
                        table.name(),
                        table.column()
                    ),
                    params![uid, json],
                )
            }
        };
        done.map(drop).map_err(|e| self.sql(e))
    }

    fn lift(&self, e: ReadError) -> DirError {
        match e {
            ReadError::Sql(source) => self.sql(source),
            ReadError::Corrupt(e) => e,
        }
    }
}

/// The federation tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// Leads from peer snapshots.
    Leads,
    /// Curated peer directories.
    Peers,
}

impl Table {
    const fn name(self) -> &'static str {
        match self {
            Self::Leads => "leads",
            Self::Peers => "peers",
        }
    }

    const fn column(self) -> &'static str {
        match self {
            Self::Leads => "lead",
            Self::Peers => "peer",
        }
    }
}

enum ReadError {
    Sql(rusqlite::Error),
    Corrupt(DirError),
}

fn read(conn: &Connection, uid: &str) -> Result<Stored, ReadError> {
    let row: Option<(String, String)> = conn
        .query_row(
            "SELECT entry, fund_key FROM entries WHERE uid = ?1",
            [uid],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()
        .map_err(ReadError::Sql)?;
    match row {
        None => Ok(Stored::default()),
        Some((json, fund_key)) => Ok(Stored {
            entry: decode(uid, &json).map_err(ReadError::Corrupt)?,
            fund_key,
        }),
    }
}

fn decode(uid: &str, json: &str) -> Result<Entry, DirError> {
    serde_json::from_str(json).map_err(|e| DirError::Corrupt {
        uid: uid.to_owned(),
        message: e.to_string(),
    })
}

fn write(conn: &Connection, uid: &str, stored: &Stored) -> rusqlite::Result<()> {
    if stored.entry.is_empty() {
        conn.execute("DELETE FROM entries WHERE uid = ?1", [uid])?;
        return Ok(());
    }
    let json = serde_json::to_string(&stored.entry).expect("an entry serializes");
    conn.execute(
        "INSERT INTO entries (uid, entry, fund_key) VALUES (?1, ?2, ?3)
         ON CONFLICT (uid) DO UPDATE SET entry = ?2, fund_key = ?3",
        params![uid, json, stored.fund_key],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_change_writes_nothing_and_an_empty_entry_is_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        store
            .update("a", |s| {
                s.entry.flag = "x".into();
                Ok(())
            })
            .unwrap();
        let e = store
            .update("a", |s| {
                s.entry.flag = "changed".into();
                refuse::<()>("no")
            })
            .unwrap_err();
        assert_eq!(e.to_string(), "no");
        drop(store);
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.get("a").unwrap().entry.flag, "x");
        store
            .update("a", |s| {
                s.entry.flag.clear();
                Ok(())
            })
            .unwrap();
        assert!(store.all().unwrap().is_empty());
    }
}
