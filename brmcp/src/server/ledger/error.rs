//! [`LedgerError`]: why a ledger operation failed, each variant naming what it can.

use std::path::PathBuf;

use brmcp_adapters::BoxError;

#[cfg(doc)]
use super::{Billing, Charge, Ledger};
use super::{CallId, CallState, LOCK_FILE_NAME, SCHEMA_VERSION};

/// Why a ledger operation failed.
///
/// A caller short of money is not an error: see [`Charge::Insufficient`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LedgerError {
    /// The data directory does not exist and cannot be created.
    #[error("ledger: cannot create data directory {}: {source}", .path.display())]
    CreateDir {
        /// The data directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Something other than a file (a directory, say) is where the database should be.
    #[error("ledger: database path {} is not a regular file", .path.display())]
    NotAFile {
        /// The database path.
        path: PathBuf,
    },
    /// The data directory's lock file cannot be opened or locked (permissions, I/O).
    #[error("ledger: cannot lock {}: {source}", .path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// [`Ledger::attach`] found no ledger to attach to.
    #[error("ledger: no database at {}", .path.display())]
    Missing {
        /// The database path.
        path: PathBuf,
    },
    /// SQLite cannot open or read the file (permissions, I/O).
    #[error("ledger: cannot open database at {}: {source}", .path.display())]
    Open {
        /// The database path.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file is not a SQLite database, or is another application's. Left untouched.
    #[error("ledger: database at {} is not a brmcp ledger: {source}", .path.display())]
    NotALedger {
        /// The database path.
        path: PathBuf,
        /// What gave it away.
        #[source]
        source: BoxError,
    },
    /// `PRAGMA quick_check` found damage. Left untouched.
    #[error("ledger: database at {} failed its integrity check: {detail}", .path.display())]
    Corrupt {
        /// The database path.
        path: PathBuf,
        /// The first complaints of the check.
        detail: String,
    },
    /// A brmcp ledger of a schema version this code does not know (a newer brmcp's).
    #[error(
        "ledger: database at {} has schema version {found}, this brmcp reads {SCHEMA_VERSION}",
        .path.display()
    )]
    UnsupportedSchema {
        /// The database path.
        path: PathBuf,
        /// Its `user_version`.
        found: i32,
    },
    /// Another process holds the data directory's lock ([`LOCK_FILE_NAME`]): it
    /// serves calls from this ledger.
    #[error(
        "ledger: database at {} is in use by another process (it holds {LOCK_FILE_NAME})",
        .path.display()
    )]
    InUse {
        /// The database path.
        path: PathBuf,
    },
    /// A ledger opened with [`Ledger::attach`] was asked to charge, complete or refund
    /// a call, or to record a tip: only the process serving calls does that.
    #[error("ledger: attached beside the serving process, which alone moves calls and tips")]
    NotOwner,
    /// No journal entry has this id.
    #[error("ledger: no call {0} in the journal")]
    UnknownCall(CallId),
    /// The call was already completed or refunded.
    #[error("ledger: call {call} is {state}, not pending")]
    NotPending {
        /// The call.
        call: CallId,
        /// Its state.
        state: CallState,
    },
    /// An operator refund of a call that is not completed (pending calls belong to the
    /// harness; refunded ones were paid back already).
    #[error("ledger: call {call} is {state}, only a completed call can be refunded")]
    NotRefundable {
        /// The call.
        call: CallId,
        /// Its state.
        state: CallState,
    },
    /// An operator refund of a call that cost nothing: there is nothing to give back,
    /// and a refund row would suggest money moved.
    #[error("ledger: call {0} was free, there is nothing to refund")]
    FreeCall(CallId),
    /// An amount, or a balance after it, above [`MAX_MATOMS`](super::MAX_MATOMS).
    #[error("ledger: amount out of range")]
    AmountOutOfRange,
    /// SQLite failed after open.
    #[error("ledger: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// Syncing committed transactions to disk failed: they may not survive a power
    /// cut, so their callers act on none of them.
    #[error("ledger: cannot sync {}: {source}", .path.display())]
    Sync {
        /// The database file.
        path: PathBuf,
        /// What the sync said.
        #[source]
        source: std::io::Error,
    },

    /// Another [`Billing`] store failed.
    #[error("ledger: store: {0}")]
    Store(#[source] BoxError),
}
