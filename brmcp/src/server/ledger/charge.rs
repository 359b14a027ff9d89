//! Charging a call: a held call key answers for itself (in progress, replayed, or in
//! conflict); else the caller's spendable balance (less every reservation but the
//! call's own) pays the price, or the call waits for credit as refused.

use brmcp_adapters::wire::UnixTime;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::retention::{prune_journal, reclaim, release_expired};
use super::{
    CallId, CallRequest, CallState, Charge, KeyConflict, Keyed, Ledger, LedgerError, Origin,
    amount_to_sql, atoms_to_matoms, balance, notices, set_balance, waiting,
};
#[cfg(doc)]
use crate::server::billing::Billing;
use crate::server::money::Shortfall;

/// One charge as its transaction reads it: the request, where it came from, and its
/// caller and price in the ledger's units, made once by both ways of charging.
pub(super) struct Charging<'a> {
    request: &'a CallRequest<'a>,
    origin: Option<Origin<'a>>,
    /// The caller as the ledger keys it.
    pub(super) caller: String,
    price_matoms: u64,
}

impl<'a> Charging<'a> {
    /// The charge of `request`, from `origin`.
    ///
    /// # Errors
    /// [`LedgerError::AmountOutOfRange`]: the price does not fit the ledger's units.
    pub(super) fn of(
        request: &'a CallRequest<'a>,
        origin: Option<Origin<'a>>,
    ) -> Result<Self, LedgerError> {
        Ok(Self {
            request,
            origin,
            caller: request.caller.to_string(),
            price_matoms: atoms_to_matoms(request.price_atoms)
                .ok_or(LedgerError::AmountOutOfRange)?,
        })
    }
}

/// The upkeep a charge's transaction does first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Upkeep {
    /// Release the expired keys and reservations.
    pub(super) release: bool,
    /// Prune the caller's journal.
    pub(super) prune: bool,
}

impl Ledger {
    /// [`Billing::charge`], keeping `origin` with a charge.
    pub(super) fn charge_with(
        &self,
        request: &CallRequest<'_>,
        origin: Option<Origin<'_>>,
        now: UnixTime,
    ) -> Result<Charge, LedgerError> {
        self.owner()?;
        let charging = Charging::of(request, origin)?;
        let mut conn = self.conn();
        let upkeep = Upkeep {
            release: self.releases.due(now),
            prune: self.prunes.due(&charging.caller),
        };
        let charged = self.charge_tx(&mut conn, &charging, upkeep, now);
        if upkeep.release && charged.is_ok() {
            self.releases.done(now);
        }
        self.checkpoint(&conn);
        charged
    }

    /// One charge's transaction on `conn`, committed, after its `upkeep`.
    pub(super) fn charge_tx(
        &self,
        conn: &mut Connection,
        charging: &Charging<'_>,
        upkeep: Upkeep,
        now: UnixTime,
    ) -> Result<Charge, LedgerError> {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if upkeep.release {
            release_expired(&tx, now)?;
        }
        if upkeep.prune {
            prune_journal(&tx, &charging.caller)?;
        }
        if upkeep.release || upkeep.prune {
            reclaim(&tx)?;
        }
        let charge = self.charge_in(&tx, charging, now)?;
        self.checkpoints.commit(tx)?;
        Ok(charge)
    }

    /// The charge of `charge_with` in `tx`, after the expired keys and reservations went.
    fn charge_in(
        &self,
        tx: &Connection,
        charging: &Charging<'_>,
        now: UnixTime,
    ) -> Result<Charge, LedgerError> {
        let Charging {
            request,
            origin,
            ref caller,
            price_matoms,
        } = *charging;
        let caller = caller.as_str();
        if let Some(keyed) = request.keyed
            && let Some(answer) = key_answer(tx, caller, request.tool, keyed, now)?
        {
            // Committed too: keeps the expired keys released before.
            return Ok(answer);
        }

        // What this call may spend: the balance less every reservation, plus the one
        // a tip made for this very call.
        let waiting_call = match request.keyed {
            Some(keyed) => waiting::find(tx, caller, request.tool, keyed)?.filter(|w| w.same_call),
            None => None,
        };
        let reserved_here = waiting_call.as_ref().map_or(0, |w| w.reserved_matoms);
        let mut available = waiting::spendable(tx, caller)?.saturating_add(reserved_here);
        if available < price_matoms
            && let (Some(keyed), Some(w)) = (request.keyed, &waiting_call)
            && let Some(freed) = waiting::take_over(
                tx,
                caller,
                keyed.key.as_str(),
                price_matoms - available,
                w.refused_seq,
            )?
        {
            available = available.saturating_add(freed);
        }
        if available < price_matoms {
            if let Some(keyed) = request.keyed {
                waiting::wait(tx, caller, request.tool, keyed, request.price_atoms, now)?;
            }
            return Ok(Charge::Insufficient(Shortfall::new(
                request.price_atoms,
                available,
            )));
        }
        if let Some(keyed) = request.keyed {
            // Its reservation is spent with this debit (any rest is unreserved).
            waiting::remove(tx, caller, keyed.key.as_str())?;
        }
        if price_matoms > 0 {
            let left = balance(tx, caller)?
                .checked_sub(price_matoms)
                .ok_or(LedgerError::AmountOutOfRange)?;
            set_balance(tx, caller, left)?;
        }
        let (session, request_id) = notices::origin_to_sql(origin);
        tx.prepare_cached(
            "INSERT INTO calls \
             (caller, tool, price_atoms, state, started_at, call_key, args_hash, key_held, \
              session, request_id) \
             VALUES (?1, ?2, ?3, 'pending', ?4, ?5, ?6, ?7, ?8, ?9)",
        )?
        .execute(params![
            caller,
            request.tool,
            amount_to_sql(request.price_atoms)?,
            now.secs(),
            request.keyed.map(|k| k.key.as_str()),
            request.keyed.map(|k| *k.args.as_bytes()),
            request.keyed.is_some(),
            session,
            request_id,
        ])?;
        Ok(Charge::Run(CallId::new(tx.last_insert_rowid())))
    }
}

/// What a held key answers for a call of `tool` with `keyed`'s arguments, or `None`
/// if the key is free. A finished call whose replay window has closed at `now` no longer
/// holds its key, whether or not [`release_expired`] has run.
pub(super) fn key_answer(
    conn: &Connection,
    caller: &str,
    tool: &str,
    keyed: Keyed<'_>,
    now: UnixTime,
) -> Result<Option<Charge>, LedgerError> {
    let held = conn
        .prepare_cached(
            "SELECT tool, args_hash, state, outcome FROM calls \
             WHERE caller = ?1 AND call_key = ?2 AND key_held = 1 \
             AND (state = 'pending' OR replay_until > ?3)",
        )?
        .query_row(params![caller, keyed.key.as_str(), now.secs()], |row| {
            Ok((
                row.get::<_, String>(0)?,
                row.get::<_, Vec<u8>>(1)?,
                CallState::from_sql(row, 2)?,
                row.get::<_, Option<String>>(3)?,
            ))
        })
        .optional()?;
    Ok(held.map(|(held_tool, args, state, outcome)| {
        if held_tool != tool {
            Charge::KeyConflict(KeyConflict::OtherTool)
        } else if args != keyed.args.as_bytes() {
            Charge::KeyConflict(KeyConflict::OtherArguments)
        } else if state == CallState::Pending {
            Charge::InProgress
        } else {
            outcome.map_or(Charge::OutcomeNotRetained, Charge::Replay)
        }
    }))
}
