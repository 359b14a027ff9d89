//! The money interface the serving harness calls: [`Billing`] and its values.
//!
//! One paid call goes through it like this:
//!
//! ```text
//! charge(request) -> Run(id)             handler runs -> complete(id, outcome)
//!                                        handler fails -> refund(id, reason, Some(outcome))
//!                                        harness gives up -> refund(id, reason, None)
//!                 -> Insufficient(s)     answer s.payment_required_json(tool)
//!                 -> Replay(outcome)     answer the stored outcome; nothing runs or pays
//!                 -> InProgress / OutcomeNotRetained / KeyConflict(_)   refuse
//! ```
//!
//! A keyed call asks [`Billing::held`] first: a key that already answers is answered
//! before the call spends a rate-limit token.
//!
//! The harness charges with [`Billing::charge_from`], keeping where the caller waits
//! ([`Origin`]); after a crash, the calls refunded at open are listed by
//! [`Billing::interrupted`] until the started harness has told their callers
//! ([`Billing::told`]).
//!
//! A tip goes through [`Billing::record_tip`] once per delivery; redeliveries are
//! recognised by the tip's sequence id.
//!
//! Credit goes to the call that paid for it: a keyed call refused
//! [`Charge::Insufficient`] waits, a tip from its caller is reserved for the caller's
//! waiting calls (one of the tip's price first, then oldest first), and only the call a
//! reservation was made for may spend it, when it is retried under its key
//! ([`Billing::reserved_matoms`]).

use std::fmt;

use brmcp_adapters::wire::{SessionId, UnixTime};
use brmcp_adapters::{BoxError, PeerId};
use rmcp::model::RequestId;

use super::call_key::{ArgsHash, CallKey};
use super::money::Shortfall;

/// Why a [`Billing`] store could not do what was asked: the call does not run (or its
/// end is not recorded), the tip is not acknowledged (its redelivery is tried again).
/// Each store says why in its own error; [`Ledger`](super::Ledger)'s converts into this.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct BillingError(BoxError);

impl BillingError {
    /// A store's own error.
    pub fn new(error: impl Into<BoxError>) -> Self {
        Self(error.into())
    }

    /// The store's own error, to downcast to its type.
    pub fn source_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

/// A store of balances, tips and the paid-call journal.
///
/// [`Ledger`](super::Ledger) (SQLite) is the default; an operator may plug in another.
///
/// The trait is synchronous. Every method is one short transaction, and rusqlite is
/// blocking, so an async trait would only move the blocking elsewhere. The harness
/// (tokio) runs these calls on `spawn_blocking`, so a slow store never stalls the
/// reactor, and a sync trait stays usable as `Arc<dyn Billing>` without boxed futures.
/// The `try_` methods are the exception: the harness calls them on its own task, and
/// a store answers them only when it can at once (nothing to wait for: no lock held
/// elsewhere, no sync, no upkeep), else declines with `None` and gets the blocking
/// call. A call made at once saves the two thread hand-offs of `spawn_blocking`, about
/// as long as a disk sync; the defaults always decline.
///
/// Contract, which [`Ledger`](super::Ledger) keeps and another store must keep too:
/// - a debit and its journal entry commit together, and so do a tip's credit and its
///   sequence id: no crash loses or duplicates money;
/// - per (caller, key) at most one [`Charge::Run`] while the key is remembered;
/// - credit reserved for a waiting call (see [`record_tip`](Billing::record_tip)) is
///   spent by that call's retry, or by another waiting call's retry refused again
///   after the reservation was made (a tip names no call), never by a call that does
///   not wait, and is released to the balance when the wait ends; a store that
///   reserves nothing keeps the rest of the contract;
/// - on start, every call still pending (the process died mid-call) is refunded once,
///   and (when the store keeps origins) listed by [`Billing::interrupted`] until
///   [`Billing::told`];
/// - `now` is the only clock.
pub trait Billing: Send + Sync {
    /// Charge for one call, or say why it must not run.
    ///
    /// On [`Charge::Run`] the price is debited and the call is journaled as pending;
    /// the harness must then [`complete`](Self::complete) or [`refund`](Self::refund) it.
    /// A keyed call may spend credit reserved for it and the caller's unreserved
    /// balance; a waiting call refused again since another's reservation was made may
    /// take that reservation over; no other call spends reserved credit. [`Charge::Insufficient`] of a
    /// keyed call records it as waiting for a tip (bounded per caller, for a while);
    /// every other outcome changes nothing a caller can see.
    ///
    /// # Errors
    ///
    /// A store failure; the call must not run.
    fn charge(&self, request: &CallRequest<'_>, now: UnixTime) -> Result<Charge, BillingError>;

    /// What a keyed call's key already answers, without charging or changing anything:
    /// `None` while the key is free (never used, released, or its replay window closed),
    /// else what [`charge`](Self::charge) would answer for it: [`Charge::Replay`],
    /// [`Charge::OutcomeNotRetained`], [`Charge::InProgress`] or [`Charge::KeyConflict`].
    ///
    /// The harness asks before rate limiting and pricing, so a duplicate of a finished
    /// call is answered without spending a rate-limit token or running the price
    /// function. [`charge`](Self::charge) checks the key again, atomically with the debit.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn held(
        &self,
        caller: &PeerId,
        tool: &str,
        keyed: Keyed<'_>,
        now: UnixTime,
    ) -> Result<Option<Charge>, BillingError>;

    /// Record that a charged call finished, with its result (the JSON of the tool
    /// result, opaque here), kept for replay when the call is keyed.
    ///
    /// # Errors
    ///
    /// The call is unknown or no longer pending, or a store failure.
    fn complete(&self, call: CallId, outcome: &str, now: UnixTime) -> Result<(), BillingError>;

    /// Give a charged call's price back and close it with `reason`.
    ///
    /// With `outcome`, a keyed call keeps its key and replays that outcome, as
    /// [`complete`](Self::complete) would (a handler error is the call's answer: it must
    /// not run again). Without, the key is released and a retry runs afresh.
    ///
    /// # Errors
    ///
    /// The call is unknown or no longer pending, or a store failure.
    fn refund(
        &self,
        call: CallId,
        reason: &str,
        outcome: Option<&str>,
        now: UnixTime,
    ) -> Result<(), BillingError>;

    /// Record a received tip and credit it if `allowed` (the tipper is on the
    /// allowlist) and its sequence id was never seen. A credited tip is reserved, in
    /// the same transaction, for the caller's keyed calls refused
    /// [`Charge::Insufficient`] that still wait (one of the tip's price first, then
    /// oldest first), each whose price the unreserved balance covers.
    ///
    /// # Errors
    ///
    /// An amount out of range or a store failure; the tip is then not
    /// recorded, so do not acknowledge it: its redelivery is tried again.
    fn record_tip(
        &self,
        tip: &Tip,
        allowed: bool,
        now: UnixTime,
    ) -> Result<TipOutcome, BillingError>;

    /// A caller's balance in milliatoms (0 for a caller never seen), credit reserved
    /// for its waiting calls included.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn balance_matoms(&self, caller: &PeerId) -> Result<u64, BillingError>;

    /// Whether a tip is reserved for the caller's calls that wait for it, so no other
    /// call spends it ([`reserved_matoms`](Self::reserved_matoms)); the harness then
    /// advertises it to bridges (`brmcp/reservesCredit`). The default: no.
    fn reserves_credit(&self) -> bool {
        false
    }

    /// The part of a caller's balance reserved at `now` for its calls refused for
    /// payment that wait for their retry (see [`record_tip`](Self::record_tip)); no
    /// other call may spend it. The default: a store that reserves nothing.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn reserved_matoms(&self, caller: &PeerId, now: UnixTime) -> Result<u64, BillingError> {
        let _ = (caller, now);
        Ok(0)
    }

    /// A keyed call was refused before its charge for a reason other than payment (its
    /// price not known, say an upstream down; the bot stopping): credit a tip reserved
    /// for it goes back to the caller's unreserved balance, where the caller's next call
    /// finds it under whatever key (a bridge's retry may bring a new one), rather than
    /// waiting for this key's retry for the reservation's life. The default: a store
    /// that reserves nothing.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn release_reserved(&self, caller: &PeerId, key: &str) -> Result<(), BillingError> {
        let _ = (caller, key);
        Ok(())
    }

    /// [`charge`](Self::charge), keeping with the charge where its caller waits for the
    /// answer, so that after a crash the next harness can tell the caller the call was
    /// interrupted (see [`interrupted`](Self::interrupted)). The default keeps nothing.
    ///
    /// # Errors
    ///
    /// As [`charge`](Self::charge).
    fn charge_from(
        &self,
        request: &CallRequest<'_>,
        origin: Option<Origin<'_>>,
        now: UnixTime,
    ) -> Result<Charge, BillingError> {
        let _ = origin;
        self.charge(request, now)
    }

    /// The calls a dead process left pending, refunded on start, whose callers are still
    /// to be told, refunded within the last [`NOTICE_WINDOW_SECS`] (an older caller's
    /// request has expired; its notice is dropped). The default: none.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn interrupted(&self, now: UnixTime) -> Result<Vec<Interrupted>, BillingError> {
        let _ = now;
        Ok(Vec::new())
    }

    /// Give a charged call's price back because the harness stops it (a graceful
    /// stop), and keep its caller to be told like a call refunded at open: listed by
    /// [`interrupted`](Self::interrupted) until [`told`](Self::told). The refund and
    /// the mark commit together. The key is released, so the caller's retry runs
    /// afresh. The default refunds with reason [`INTERRUPTED`](super::INTERRUPTED) and
    /// keeps no mark (a store that keeps no origins tells nobody later).
    ///
    /// # Errors
    ///
    /// As [`refund`](Self::refund).
    fn interrupt(&self, call: CallId, now: UnixTime) -> Result<(), BillingError> {
        self.refund(call, super::ledger::INTERRUPTED, None, now)
    }

    /// A call of `tool` that came as the harness stopped was refused, nothing charged
    /// and credit reserved for it kept for its retry: keep its caller (waiting at
    /// `origin`) to be told like an interrupted call's, listed by
    /// [`interrupted`](Self::interrupted) until [`told`](Self::told), so a refusal the
    /// closing session never carried still reaches it from the next start. Durable on
    /// return. The mark's id, or `None` if none is kept (the default: a store that
    /// keeps no origins tells nobody later).
    ///
    /// # Errors
    ///
    /// A store failure.
    fn refuse_stopping(
        &self,
        caller: &PeerId,
        tool: &str,
        origin: Origin<'_>,
        now: UnixTime,
    ) -> Result<Option<CallId>, BillingError> {
        let _ = (caller, tool, origin, now);
        Ok(None)
    }

    /// The caller of an [`interrupted`](Self::interrupted) call was told (or will not
    /// be): it is not listed again.
    ///
    /// # Errors
    ///
    /// A store failure.
    fn told(&self, call: CallId) -> Result<(), BillingError> {
        let _ = call;
        Ok(())
    }

    /// [`held`](Self::held) answered at once, or `None` if the store would have to
    /// wait for it (see the trait's docs). The default declines.
    fn try_held(
        &self,
        caller: &PeerId,
        tool: &str,
        keyed: Keyed<'_>,
        now: UnixTime,
    ) -> Option<Result<Option<Charge>, BillingError>> {
        let _ = (caller, tool, keyed, now);
        None
    }

    /// [`charge_from`](Self::charge_from) done at once, or `None` if the store would
    /// have to wait for it (see the trait's docs). A charge is never synced by itself,
    /// so doing it at once loses nothing. The default declines.
    fn try_charge_from(
        &self,
        request: &CallRequest<'_>,
        origin: Option<Origin<'_>>,
        now: UnixTime,
    ) -> Option<Result<Charge, BillingError>> {
        let _ = (request, origin, now);
        None
    }

    /// [`complete`](Self::complete)'s commit done at once, or `None` if the store
    /// would have to wait for it (see the trait's docs). The completion survives the
    /// process being killed on `Some(Ok(_))`, and a power cut once
    /// [`synced`](Self::synced) returns for the [`Commit`]: the harness waits for that,
    /// on the blocking pool, before it answers. The default declines.
    fn try_complete(
        &self,
        call: CallId,
        outcome: &str,
        now: UnixTime,
    ) -> Option<Result<Commit, BillingError>> {
        let _ = (call, outcome, now);
        None
    }

    /// Returns once `commit` (from [`try_complete`](Self::try_complete)) survives a
    /// power cut; may block. The default returns at once: a store that never commits
    /// at once has nothing to sync.
    ///
    /// # Errors
    ///
    /// The sync failed: the commit may not survive a power cut.
    fn synced(&self, commit: Commit) -> Result<(), BillingError> {
        let _ = commit;
        Ok(())
    }
}

/// A commit made at once ([`Billing::try_complete`]), to wait on with
/// [`Billing::synced`]: its place in the store's commit order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Commit(u64);

impl Commit {
    /// The commit numbered `n` (stores number their commits).
    pub const fn new(n: u64) -> Self {
        Self(n)
    }

    /// Its number.
    pub const fn get(self) -> u64 {
        self.0
    }
}

/// How long after its refund an interrupted call's caller is still told, in seconds: 10
/// minutes, the routers' default request timeout and part lifetime. A caller waits no
/// longer for an answer, so a later notice would reach nobody.
pub const NOTICE_WINDOW_SECS: u64 = 600;

/// Longest JSON-RPC request id (as JSON) kept with a charge, in bytes: the SDKs use
/// numbers or short strings; a longer id is not kept, and its caller is not told of an
/// interruption (its request times out instead).
pub const MAX_REQUEST_ID_BYTES: usize = 256;

/// Where a call's caller waits for its answer: its session and its request's id.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The caller's session.
    pub sid: SessionId,
    /// The JSON-RPC id of the `tools/call` request.
    pub request_id: &'a RequestId,
}

/// A paid call a dead process was running, refunded when the store was opened, whose
/// caller has not been told yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    /// The journal entry.
    pub call: CallId,
    /// Who called (and got the refund).
    pub caller: PeerId,
    /// The tool called.
    pub tool: String,
    /// The caller's session.
    pub sid: SessionId,
    /// The JSON-RPC id of the caller's request.
    pub request_id: RequestId,
    /// When it was refunded.
    pub refunded_at: UnixTime,
}

/// One `tools/call` about to run.
#[derive(Debug, Clone, Copy)]
pub struct CallRequest<'a> {
    /// Who calls (and pays).
    pub caller: PeerId,
    /// The tool's name.
    pub tool: &'a str,
    /// This call's price in atoms; 0 for a free tool.
    pub price_atoms: u64,
    /// The call key and arguments, for a keyed call.
    pub keyed: Option<Keyed<'a>>,
}

/// The key of a keyed call and what it is bound to besides the tool.
#[derive(Debug, Clone, Copy)]
pub struct Keyed<'a> {
    /// The caller's key.
    pub key: &'a CallKey,
    /// The hash of the call's arguments.
    pub args: ArgsHash,
}

/// The id of one journal entry: one charged call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CallId(i64);

impl CallId {
    /// The id `id` (stores choose their ids; the ledger's are positive).
    pub const fn new(id: i64) -> Self {
        Self(id)
    }

    /// The id's value.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// What [`Billing::charge`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Charge {
    /// Charged and journaled as pending: run the handler, then complete or refund `0`.
    Run(CallId),
    /// The balance (less credit reserved for other calls) does not cover the price;
    /// the key is not consumed, and a keyed call waits for its caller's tip.
    Insufficient(Shortfall),
    /// The key's call already finished: answer with this outcome, run and charge nothing.
    Replay(String),
    /// The key's call finished, but its outcome was over
    /// [`MAX_OUTCOME_BYTES`](super::MAX_OUTCOME_BYTES) and not kept; refuse, do not run.
    OutcomeNotRetained,
    /// The key's call is still running (or its process died and the ledger was not
    /// yet reopened); refuse or wait, do not run.
    InProgress,
    /// The key was used for a different call; refuse with a clear error.
    KeyConflict(KeyConflict),
}

/// How a reused call key differs from its first call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum KeyConflict {
    /// The key was first used to call another tool.
    #[error("call key already used for another tool")]
    OtherTool,
    /// The key was first used with other arguments.
    #[error("call key already used with other arguments")]
    OtherArguments,
}

/// A Bison Relay tip as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tip {
    /// The tip's sequence id; a redelivery carries the same one.
    pub seq: u64,
    /// Who tipped.
    pub caller: PeerId,
    /// The amount in milliatoms.
    pub matoms: u64,
}

/// What [`Billing::record_tip`] did, so a hook can be told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TipOutcome {
    /// New tip from an allowed caller: recorded and credited.
    Credited,
    /// New tip from a caller not allowed: recorded, not credited.
    NotCredited,
    /// The sequence id was seen before: nothing changed (acknowledge it again).
    Duplicate,
}
