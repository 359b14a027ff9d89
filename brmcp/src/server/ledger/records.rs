//! What the ledger's reads return: balances, journal entries, the audit trail, tips.

use std::fmt;

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;
use rusqlite::Row;

#[cfg(doc)]
use super::MAX_JOURNAL_ROWS_PER_CALLER;
use super::{CallId, Ledger, Tip, bad_column};

/// Where a journal entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallState {
    /// Charged; the handler is running (or its process died).
    Pending,
    /// The handler finished; the charge stands.
    Completed,
    /// The price was given back.
    Refunded,
}

impl CallState {
    /// The state as stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Refunded => "refunded",
        }
    }

    pub(super) fn from_sql(row: &Row<'_>, idx: usize) -> rusqlite::Result<Self> {
        match row.get_ref(idx)?.as_str()? {
            "pending" => Ok(Self::Pending),
            "completed" => Ok(Self::Completed),
            "refunded" => Ok(Self::Refunded),
            other => Err(bad_column(
                idx,
                format!("unknown call state {other:?}").into(),
            )),
        }
    }
}

impl fmt::Display for CallState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One caller's balance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balance {
    /// The caller.
    pub caller: PeerId,
    /// The balance in milliatoms, reserved credit included.
    pub matoms: u64,
    /// The part of it reserved for calls waiting for their retry (only they may spend
    /// it).
    pub reserved_matoms: u64,
}

/// One paid call in the journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    /// The entry's id.
    pub id: CallId,
    /// Who called and paid.
    pub caller: PeerId,
    /// The tool called.
    pub tool: String,
    /// The price charged, in atoms.
    pub price_atoms: u64,
    /// Where the call is.
    pub state: CallState,
    /// When it was charged.
    pub started_at: UnixTime,
    /// When it was completed or refunded.
    pub finished_at: Option<UnixTime>,
    /// Why it was refunded.
    pub reason: Option<String>,
    /// The caller's call key, if the call was keyed.
    pub call_key: Option<String>,
    /// Whether the key still blocks a second run (pending, or replayable).
    pub key_held: bool,
    /// Whether an outcome is kept for replay.
    pub outcome_kept: bool,
}

/// The calls of one caller pruned from the journal (see
/// [`MAX_JOURNAL_ROWS_PER_CALLER`]): what they moved stays counted here.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PrunedCalls {
    /// Completed calls pruned.
    pub completed: u64,
    /// The prices they kept, in atoms.
    pub completed_atoms: u64,
    /// Refunded calls pruned (they moved no money).
    pub refunded: u64,
}

/// What an operator did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AuditAction {
    /// [`Ledger::manual_credit`].
    Credit,
    /// [`Ledger::manual_refund`].
    Refund,
}

impl AuditAction {
    /// The action as stored and shown.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Credit => "credit",
            Self::Refund => "refund",
        }
    }
}

impl fmt::Display for AuditAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One operator action on money.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEntry {
    /// The row's id; later actions have larger ids.
    pub id: i64,
    /// When it happened.
    pub at: UnixTime,
    /// Whose balance changed.
    pub caller: PeerId,
    /// What was done.
    pub action: AuditAction,
    /// How much was credited, in milliatoms.
    pub matoms: u64,
    /// The call a refund paid back.
    pub call: Option<CallId>,
    /// The operator's reason.
    pub reason: String,
}

/// A received tip as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TipRecord {
    /// The tip as received.
    pub tip: Tip,
    /// Whether it was credited (the tipper was allowed).
    pub credited: bool,
    /// When it was first received.
    pub received_at: UnixTime,
}

/// What [`Ledger::open`] returns: the ledger and what start-up recovery did.
#[derive(Debug)]
pub struct Opened {
    /// The open ledger.
    pub ledger: Ledger,
    /// How many calls left pending by a dead process were refunded.
    pub refunded: usize,
}
