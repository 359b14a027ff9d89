//! The ledger's calls made at once, on the harness's own task, when nothing in them
//! would wait: the connection is free, no other connection holds the write lock (a
//! busy database fails at once here instead of waiting for it), and no upkeep is due
//! (expired keys to release, a journal to prune, a checkpoint to run). Otherwise each
//! declines with `None`, and the harness makes the blocking call on the blocking pool.
//!
//! They run the same transactions as the blocking calls. What may take long never
//! runs here: a completion's sync, the one wait a paid call makes, is
//! [`Ledger::synced`], on the blocking pool; checkpoints run on paths that may block
//! ([`checkpoint`](super::checkpoint)). A paid call made this way saves two thread
//! hand-offs at each step, about as long as the disk's sync.

use std::ops::{Deref, DerefMut};
use std::sync::MutexGuard;
use std::time::Duration;

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, ErrorCode};

#[cfg(doc)]
use super::Billing;
use super::charge::{Charging, Upkeep};
use super::group_sync::GroupSync;
use super::open::BUSY_WAIT;
use super::{CallId, CallRequest, Charge, Keyed, Ledger, LedgerError, Origin, Ticket, key_answer};
use crate::server::Commit;

/// The connection, held without waiting, failing rather than waiting on another
/// connection's lock until it is let go.
struct AtOnce<'a>(MutexGuard<'a, Connection>);

impl Deref for AtOnce<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.0
    }
}

impl DerefMut for AtOnce<'_> {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.0
    }
}

impl Drop for AtOnce<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.busy_timeout(BUSY_WAIT) {
            tracing::error!(error = %e, "ledger busy wait not restored");
        }
    }
}

/// The error says the database was busy (another connection's write): nothing was
/// done, and the blocking call will wait for it.
fn busy(e: &LedgerError) -> bool {
    matches!(e, LedgerError::Sqlite(rusqlite::Error::SqliteFailure(f, _))
        if matches!(f.code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// A call made at once: `None` (declined) if the database was busy.
fn unless_busy<T>(done: Result<T, LedgerError>) -> Option<Result<T, LedgerError>> {
    match done {
        Err(e) if busy(&e) => None,
        done => Some(done),
    }
}

impl Ledger {
    /// The connection if it is free now and this ledger serves calls (so it syncs
    /// its commits in groups), with no checkpoint due; and its group sync.
    fn at_once(&self) -> Option<(AtOnce<'_>, &GroupSync)> {
        if self.owner().is_err() || self.checkpoints.due() {
            return None;
        }
        let sync = self.sync.as_ref()?;
        let conn = self.try_conn()?;
        conn.busy_timeout(Duration::ZERO).ok()?;
        Some((AtOnce(conn), sync))
    }

    /// [`Billing::try_held`]: [`held`](Self::held) at once.
    pub fn try_held(
        &self,
        caller: &PeerId,
        tool: &str,
        keyed: Keyed<'_>,
        now: UnixTime,
    ) -> Option<Result<Option<Charge>, LedgerError>> {
        let (conn, _) = self.at_once()?;
        unless_busy(key_answer(&conn, &caller.to_string(), tool, keyed, now))
    }

    /// [`Billing::try_charge_from`]: [`charge_from`](Self::charge_from) at once,
    /// unless the expired keys are due a release or the caller's journal a prune.
    pub fn try_charge_from(
        &self,
        request: &CallRequest<'_>,
        origin: Option<Origin<'_>>,
        now: UnixTime,
    ) -> Option<Result<Charge, LedgerError>> {
        if self.releases.due(now) {
            return None;
        }
        let charging = match Charging::of(request, origin) {
            Ok(charging) => charging,
            Err(e) => return Some(Err(e)),
        };
        let (mut conn, _) = self.at_once()?;
        if !self.prunes.count_unless_due(&charging.caller) {
            return None;
        }
        let upkeep = Upkeep {
            release: false,
            prune: false,
        };
        let charged = unless_busy(self.charge_tx(&mut conn, &charging, upkeep, now));
        if charged.is_none() {
            // Declined: the blocking charge that follows counts the call itself.
            self.prunes.uncount(&charging.caller);
        }
        charged
    }

    /// [`Billing::try_complete`]: [`complete`](Self::complete)'s commit at once; it
    /// survives a power cut once [`synced`](Self::synced) returns.
    pub fn try_complete(
        &self,
        call: CallId,
        outcome: &str,
        now: UnixTime,
    ) -> Option<Result<Commit, LedgerError>> {
        let (mut conn, sync) = self.at_once()?;
        let committed = self
            .complete_in(&mut conn, call, outcome, now)
            .map(|()| sync.ticket());
        drop(conn);
        let ticket = unless_busy(self.outcomes.unless_failed(committed))?;
        Some(ticket.map(|t| Commit::new(t.get())))
    }

    /// [`Billing::synced`]: returns once `commit` survives a power cut.
    ///
    /// # Errors
    /// [`LedgerError::Sync`]: the sync failed.
    pub fn synced(&self, commit: Commit) -> Result<(), LedgerError> {
        self.durable(Some(Ticket::new(commit.get())))
    }
}
