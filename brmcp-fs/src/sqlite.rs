//! The one way brmcp opens an SQLite file of its own: prepared and sealed as
//! [`prepare_sqlite`] does, told apart by its stamp (`PRAGMA application_id` and
//! `PRAGMA user_version`), created or migrated in one transaction, and refused
//! unchanged when it is another program's or another schema's.

use std::path::Path;
use std::time::Duration;

use rusqlite::Connection;

use super::{prepare_sqlite, seal_sqlite};

/// What an SQLite file of ours says it is, read before anything is written to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteIdentity {
    /// `PRAGMA application_id`: which program's file it is (0: none said).
    pub application_id: i32,
    /// `PRAGMA user_version`: the schema version that program wrote.
    pub user_version: i32,
    /// No id, no version and no schema objects: a new, empty file to create.
    pub fresh: bool,
}

/// Opens the database at `path`, prepared as [`prepare_sqlite`] does, waiting up to
/// `busy` for another connection's lock, and reads its [`SqliteIdentity`]. That is the
/// first read of the file: one that is not a database fails here, unchanged.
///
/// # Errors
/// As [`prepare_sqlite`], and SQLite's errors opening and reading the file.
pub fn open_sqlite(
    path: &Path,
    busy: Duration,
) -> Result<(Connection, SqliteIdentity), rusqlite::Error> {
    prepare_sqlite(path)?;
    let conn = Connection::open(path)?;
    conn.busy_timeout(busy)?;
    let application_id: i32 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
    let user_version: i32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let objects: i64 = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))?;
    let fresh = application_id == 0 && user_version == 0 && objects == 0;
    let identity = SqliteIdentity {
        application_id,
        user_version,
        fresh,
    };
    Ok((conn, identity))
}

/// An SQLite file of ours told apart by its stamp: `PRAGMA application_id` and
/// `PRAGMA user_version`.
#[derive(Debug, Clone, Copy)]
pub struct SqliteKind {
    /// What the file holds, for errors ("directory store").
    pub what: &'static str,
    /// Its application id.
    pub application_id: i32,
    /// The schema version this code reads and writes.
    pub version: i32,
    /// The schema: made in a new file.
    pub schema: &'static str,
    /// A table of the files written before they were stamped: such a file (no id,
    /// no version, this table present) is ours, and is stamped at its first open.
    /// Empty: every file of this kind was stamped.
    pub unstamped_table: &'static str,
    /// The steps from older schema versions: the last one takes `version - 1` to
    /// `version`, the one before it `version - 2` to `version - 1`, and so on. A file
    /// older than the first step is refused.
    pub migrations: &'static [&'static str],
}

/// Who opens a stamped file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteAccess {
    /// The process that owns the file: creates it, stamps it and migrates it.
    Own,
    /// A process beside the owner (an operator's command): reads the current schema
    /// only, and never creates one (a file without it is the owner's, mid-creation).
    Attach,
}

/// Why a stamped open refused a file; nothing was written to it.
#[derive(Debug)]
pub enum StampError {
    /// SQLite's own error (not a database, permissions, a link refused).
    Sqlite(rusqlite::Error),
    /// Another program's file, or an unstamped file that is not an old one of ours.
    Foreign(SqliteIdentity),
    /// Ours, in a schema version this code neither reads nor migrates.
    Version(SqliteIdentity),
    /// [`SqliteAccess::Attach`] found no schema: the owner has not made it yet.
    Missing,
}

impl From<rusqlite::Error> for StampError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sqlite(e)
    }
}

/// What a stamped open will do to the file once its caller's own read-only checks pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    Use,
    Create,
    Stamp,
    Migrate(i32),
}

/// A stamped file checked and not yet written: the caller may read it (an integrity
/// check, say) before [`finish`](Self::finish) makes it WAL, full-sync and current.
#[derive(Debug)]
pub struct StampedOpen<'k> {
    /// The open connection.
    pub conn: Connection,
    /// What the file said it was.
    pub identity: SqliteIdentity,
    path: &'k Path,
    kind: &'k SqliteKind,
    plan: Plan,
}

impl<'k> StampedOpen<'k> {
    /// Opens the file of `kind` at `path` as [`open_sqlite`] does and decides, from its
    /// stamp alone, whether `access` may use it.
    ///
    /// # Errors
    /// [`StampError`]; the file is unchanged.
    pub fn check(
        path: &'k Path,
        busy: Duration,
        kind: &'k SqliteKind,
        access: SqliteAccess,
    ) -> Result<Self, StampError> {
        let (conn, identity) = open_sqlite(path, busy)?;
        let owner = access == SqliteAccess::Own;
        let ours = identity.application_id == kind.application_id;
        let oldest = kind.version - i32::try_from(kind.migrations.len()).unwrap_or(i32::MAX);
        let plan = if identity.fresh {
            if !owner {
                return Err(StampError::Missing);
            }
            Plan::Create
        } else if ours && identity.user_version == kind.version {
            Plan::Use
        } else if ours {
            if !(owner && (oldest..kind.version).contains(&identity.user_version)) {
                return Err(StampError::Version(identity));
            }
            Plan::Migrate(identity.user_version)
        } else if owner
            && !kind.unstamped_table.is_empty()
            && identity.application_id == 0
            && identity.user_version == 0
            && {
                let tables: i64 = conn.query_row(
                    "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
                    [kind.unstamped_table],
                    |r| r.get(0),
                )?;
                tables == 1
            }
        {
            Plan::Stamp
        } else {
            return Err(StampError::Foreign(identity));
        };
        Ok(Self {
            conn,
            identity,
            path,
            kind,
            plan,
        })
    }

    /// WAL mode with full syncs, the sidecars sealed, then the schema and stamp on a
    /// new file, the stamp on an old unstamped one, or the migrations on an older
    /// version, each in one transaction.
    ///
    /// # Errors
    /// SQLite's.
    pub fn finish(self) -> Result<Connection, rusqlite::Error> {
        let Self {
            conn,
            path,
            kind,
            plan,
            ..
        } = self;
        let _: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        seal_sqlite(path)?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        let steps = match plan {
            Plan::Use => return Ok(conn),
            Plan::Create | Plan::Stamp => &[kind.schema][..],
            Plan::Migrate(from) => {
                let behind = usize::try_from(kind.version - from).unwrap_or(0);
                &kind.migrations[kind.migrations.len() - behind..]
            }
        };
        let tx = conn.unchecked_transaction()?;
        for step in steps {
            tx.execute_batch(step)?;
        }
        tx.pragma_update(None, "application_id", kind.application_id)?;
        tx.pragma_update(None, "user_version", kind.version)?;
        tx.commit()?;
        Ok(conn)
    }
}

/// Opens the SQLite file of `kind` at `path` as its owner: [`StampedOpen::check`] then
/// [`StampedOpen::finish`]. Anything but a new file, an old unstamped one of ours or
/// one of ours in this or a migratable version is refused before anything is written.
///
/// # Errors
/// As [`open_sqlite`]; a file that is not `kind`'s, as an SQLite "not a database"
/// error saying what it is (the caller names the file).
pub fn open_stamped_sqlite(
    path: &Path,
    busy: Duration,
    kind: &SqliteKind,
) -> Result<Connection, rusqlite::Error> {
    match StampedOpen::check(path, busy, kind, SqliteAccess::Own) {
        Ok(open) => open.finish(),
        Err(StampError::Sqlite(e)) => Err(e),
        Err(StampError::Foreign(found) | StampError::Version(found)) => {
            let found = if found.application_id == kind.application_id {
                format!("schema version {}", found.user_version)
            } else {
                format!("application id {:#010x}", found.application_id)
            };
            Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
                Some(format!(
                    "not a {} of this brmcp ({found}; it reads application id {:#010x}, \
                     schema version {}): left as it is",
                    kind.what, kind.application_id, kind.version
                )),
            ))
        }
        // Only an attach finds a file missing; said plainly all the same.
        Err(StampError::Missing) => Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
            Some(format!("no {} schema yet", kind.what)),
        )),
    }
}
