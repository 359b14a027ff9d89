//! The verification pipeline: funding, crawl, the paid test, and the restart and sweep
//! work around them.
//!
//! Crash rules (one store transaction per step; the harness ledger holds the money):
//! - the fee is a keyed ledger debit under the registration's fund key, made before
//!   the state moves to `crawling`; a restart finds a standing debit by its key and does
//!   not charge again;
//! - the test's call key is persisted with the catalog before any payment, and reused
//!   on every attempt and after a restart, so the provider runs the test once;
//! - a test payment is recorded (`launched`) before the escrow debit and marked
//!   `paying` before the tip is sent: a restart refunds a debit whose tip was never
//!   sent, and counts one that may have been sent as spent (ambiguous, never refunded).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol::{PaymentRequired, PriceBounds};
use rmcp::model::JsonObject;

use super::client::{
    self, Answer, CREDIT_POLL_DELAY, CREDIT_POLL_TRIES, PAY_WAIT, PayError, UNCONFIRMED,
};
use super::money::{self, Debit, ESCROW_TOOL, FEE_TOOL};
use super::service::{Core, promote};
use super::store::{DirError, SpendState};
use super::types::{Outcome, State};
use crate::server::CallId;

/// The refund reason of a test payment that definitively failed.
const PAYMENT_FAILED: &str = "directory: test payment failed";
/// The refund reason of an escrow debit whose payment was never sent.
const NEVER_SENT: &str = "directory: test payment never sent";
/// Why a step cut by a shutdown stopped (never stored: the pipeline resumes).
const CLOSING: &str = "directory shutting down";
/// How much longer a payment on its way at a shutdown may take to confirm: 5 s, within
/// [`super::CLOSE_WAIT`]. A tip usually confirms in a few seconds; one that does is
/// recorded paid, which the resumed test does not repeat. Past it the payment is
/// ambiguous (counted as spent, never refunded).
pub(crate) const PAY_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What one paid call of the directory's may pay, and from where.
#[derive(Clone, Copy)]
pub(crate) struct Budget<'a> {
    /// The most it pays, in atoms.
    pub(crate) max_atoms: i64,
    /// The registration's fund key, whose escrow is debited from the provider's
    /// balance first; without it the directory's own wallet pays.
    pub(crate) escrow: Option<&'a str>,
    /// The provider's crawled catalog: the price must then be within the bound the
    /// tool is listed with.
    pub(crate) catalog: Option<&'a serde_json::Value>,
}

impl Budget<'_> {
    /// At most `max_atoms`, from the directory's own wallet, with no listed bound.
    pub(crate) const fn own(max_atoms: i64) -> Self {
        Self {
            max_atoms,
            escrow: None,
            catalog: None,
        }
    }
}

impl Core {
    /// The funding check: with the fee and the test budget covered, debit the fee and
    /// start the pipeline.
    pub(crate) async fn poke_funding(self: Arc<Self>, uid: PeerId) {
        match self.clone().fund(uid).await {
            Ok(true) => self.spawn_pipeline(uid),
            Ok(false) => {}
            Err(e) => tracing::warn!(provider = %uid, error = %e, "funding check failed"),
        }
    }

    async fn fund(self: Arc<Self>, uid: PeerId) -> Result<bool, DirError> {
        let key = uid.to_string();
        let _index = self.lock.lock().await;
        let stored = self.store.get(&key)?;
        let Some(reg) = &stored.entry.reg else {
            return Ok(false);
        };
        if reg.state != State::AwaitingFunding {
            return Ok(false);
        }
        let fund_key = stored.fund_key.clone();
        let harness = self.harness();
        let paid = money::standing(harness, uid, &fund_key).await?.is_some();
        if !paid {
            let balance = money::balance_atoms(harness, uid).await?;
            if balance < reg.fee_atoms + reg.budget_atoms {
                return Ok(false);
            }
            if reg.fee_atoms > 0 {
                let now = self.clock.now();
                if money::debit(harness, uid, FEE_TOOL, reg.fee_atoms, &fund_key, now).await?
                    == Debit::Short
                {
                    return Ok(false);
                }
            }
        }
        self.store.update(&key, |s| {
            if s.fund_key == fund_key
                && let Some(reg) = &mut s.entry.reg
                && reg.state == State::AwaitingFunding
            {
                reg.state = State::Crawling;
            }
            Ok(())
        })?;
        Ok(true)
    }

    /// `step`, unless the directory shuts down first (`None`): a pipeline waiting on
    /// a provider stops there and resumes at the next start.
    pub(crate) async fn unless_closing<T>(&self, step: impl Future<Output = T>) -> Option<T> {
        let mut shutdown = self.shutdown.subscribe();
        tokio::select! {
            out = step => Some(out),
            _ = shutdown.wait_for(|s| *s) => None,
        }
    }

    /// Runs `uid`'s pipeline in the background unless it already runs.
    pub(crate) fn spawn_pipeline(self: Arc<Self>, uid: PeerId) {
        let key = uid.to_string();
        if self.shutting_down() || !self.claim(&key) {
            return;
        }
        tokio::spawn(async move {
            if let Err(e) = self.pipeline(uid).await {
                tracing::warn!(provider = %uid, error = %e, "pipeline stopped");
            }
            self.release(&key);
        });
    }

    async fn pipeline(&self, uid: PeerId) -> Result<(), DirError> {
        let key = uid.to_string();
        loop {
            if self.shutting_down() {
                return Ok(());
            }
            let stored = self.store.get(&key)?;
            let Some(reg) = stored.entry.reg else {
                return Ok(());
            };
            let fund_key = stored.fund_key;
            match reg.state {
                State::Crawling => {
                    let crawled = match self.harness().router() {
                        Some(router) => {
                            let crawl = client::crawl(router, uid, &self.policy.name);
                            let Some(crawled) = self.unless_closing(crawl).await else {
                                return Ok(());
                            };
                            crawled
                        }
                        None => Err("no router; not started".to_owned()),
                    };
                    if crawled.is_err() && self.shutting_down() {
                        return Ok(());
                    }
                    let call_key = money::new_key()?;
                    self.store.update(&key, |s| {
                        if s.fund_key != fund_key {
                            return Ok(());
                        }
                        let Some(reg) = &mut s.entry.reg else {
                            return Ok(());
                        };
                        if reg.state != State::Crawling {
                            return Ok(());
                        }
                        match &crawled {
                            Ok(catalog) => {
                                reg.catalog = Some(catalog.clone());
                                if reg.call_key.is_empty() {
                                    reg.call_key.clone_from(&call_key);
                                }
                                reg.state = State::Testing;
                            }
                            Err(e) => {
                                reg.state = State::PendingReview;
                                reg.test_outcome = Some(Outcome::Failed);
                                reg.test_err = format!("crawl: {e}");
                            }
                        }
                        Ok(())
                    })?;
                }
                State::Testing => {
                    let remaining = (reg.budget_atoms - reg.paid_atoms).max(0);
                    let budget = Budget {
                        max_atoms: remaining,
                        escrow: Some(&fund_key),
                        catalog: reg.catalog.as_ref(),
                    };
                    let tested = self
                        .paid_call(
                            uid,
                            &reg.test.tool,
                            reg.test.args.as_ref(),
                            &reg.call_key,
                            budget,
                        )
                        .await;
                    let (outcome, err, latency) = match &tested {
                        Ok(answer) if answer.result.is_error != Some(true) => {
                            (Outcome::Ok, String::new(), answer.latency_ms)
                        }
                        Ok(answer) => (
                            Outcome::Failed,
                            client::result_text_capped(&answer.result),
                            answer.latency_ms,
                        ),
                        Err(_) if self.shutting_down() => return Ok(()),
                        Err(e) => (Outcome::Failed, e.clone(), 0),
                    };
                    let (now, days) = (self.now(), self.policy.expiry_days);
                    let _index = self.lock.lock().await;
                    self.store.update(&key, |s| {
                        if s.fund_key != fund_key {
                            return Ok(());
                        }
                        let Some(reg) = &mut s.entry.reg else {
                            return Ok(());
                        };
                        if reg.state != State::Testing {
                            return Ok(());
                        }
                        reg.test_outcome = Some(outcome);
                        reg.test_err = err;
                        reg.test_latency_ms = latency;
                        if outcome == Outcome::Ok && reg.renewal {
                            promote(s, now, days)
                        } else {
                            reg.state = State::PendingReview;
                            Ok(())
                        }
                    })?;
                    return Ok(());
                }
                State::AwaitingFunding | State::PendingReview | State::None => return Ok(()),
                State::Listed | State::Rejected => return Ok(()),
            }
        }
    }

    /// One logical paid call: every attempt carries `call_key`; at most one payment,
    /// of the quoted shortfall, within the `budget`.
    pub(crate) async fn paid_call(
        &self,
        uid: PeerId,
        tool: &str,
        args: Option<&JsonObject>,
        call_key: &str,
        budget: Budget<'_>,
    ) -> Result<Answer, String> {
        let Budget {
            max_atoms,
            escrow,
            catalog,
        } = budget;
        let bounds = match catalog {
            Some(catalog) => client::listed_bounds(catalog, tool)?,
            None => PriceBounds::NONE,
        };
        let router = self
            .harness()
            .router()
            .ok_or_else(|| "no router; not started".to_owned())?;
        let name = &self.policy.name;
        let dial = || async {
            self.unless_closing(client::dial(router, uid, name))
                .await
                .unwrap_or_else(|| Err(CLOSING.to_owned()))
        };
        let mut session = dial().await?;
        let mut first = true;
        let mut paid = false;
        let mut polls = 0;
        let answer = loop {
            let start = Instant::now();
            // Cut at a shutdown: the provider keeps the call's outcome under its key, and
            // the resumed test asks again with the same key.
            let called = self
                .unless_closing(client::call_once(&session, tool, args, call_key))
                .await
                .unwrap_or_else(|| Err(CLOSING.to_owned()));
            let result = match called {
                Ok(result) => result,
                Err(e) if first && !self.shutting_down() => {
                    first = false;
                    let _ = session.cancel().await;
                    session = dial().await?;
                    tracing::debug!(provider = %uid, error = %e, "test call retried");
                    continue;
                }
                Err(e) => break Err(e),
            };
            first = false;
            let latency_ms = client::elapsed_ms(start);
            let quote = match PaymentRequired::from_result(&result) {
                Ok(None) => break Ok(Answer { result, latency_ms }),
                Ok(Some(quote)) => quote,
                Err(e) => break Err(e.to_string()),
            };
            if paid {
                if polls >= CREDIT_POLL_TRIES {
                    break Err(
                        "payment made but the call still refuses; credit did not land".into(),
                    );
                }
                if polls > 0
                    && self
                        .unless_closing(tokio::time::sleep(CREDIT_POLL_DELAY))
                        .await
                        .is_none()
                {
                    break Err(CLOSING.to_owned());
                }
                polls += 1;
                continue;
            }
            if let Err(e) = client::quote_within(&quote, &bounds) {
                break Err(e);
            }
            let amount = match client::quote_amount(&quote, max_atoms) {
                Ok(amount) => amount,
                Err(e) => break Err(e),
            };
            if let Err(e) = self.pay(uid, tool, amount, escrow).await {
                break Err(e);
            }
            paid = true;
        };
        let _ = session.cancel().await;
        answer
    }

    /// One payment, recorded before money moves: with `escrow`, out of the provider's
    /// balance (see the module's crash rules), else from the directory's wallet.
    async fn pay(
        &self,
        uid: PeerId,
        tool: &str,
        atoms: i64,
        escrow: Option<&str>,
    ) -> Result<(), String> {
        // None starts once the directory stops: the resumed test pays, if it must.
        if self.shutting_down() {
            return Err(CLOSING.to_owned());
        }
        let harness = self.harness();
        let key = uid.to_string();
        let debit_key = money::new_key().map_err(|e| e.to_string())?;
        let store_err = |e: DirError| format!("escrow debit: {e}");
        let spend = self
            .store
            .launch_spend(self.now(), &key, tool, atoms, &debit_key)
            .map_err(store_err)?;
        let call = match escrow {
            None => None,
            Some(_) => {
                let now = self.clock.now();
                match money::debit(harness, uid, ESCROW_TOOL, atoms, &debit_key, now).await {
                    Ok(Debit::Done(call)) => Some(call),
                    Ok(Debit::Short) => {
                        self.store.delete_spend(spend).map_err(store_err)?;
                        return Err("escrow debit: insufficient balance".to_owned());
                    }
                    Err(e) => return Err(format!("escrow debit: {e}")),
                }
            }
        };
        self.store
            .set_spend(spend, SpendState::Paying, call.map(CallId::get), None)
            .map_err(store_err)?;
        let amount = u64::try_from(atoms).unwrap_or(0);
        let mut shutdown = self.shutdown.subscribe();
        let payment = tokio::time::timeout(PAY_WAIT, self.payer.pay(uid, amount));
        tokio::pin!(payment);
        let outcome = tokio::select! {
            r = &mut payment => r.unwrap_or(Err(PayError::Unconfirmed)),
            // A payment on its way at a shutdown gets a little longer to confirm: one
            // confirmed is paid, not ambiguous, and the resumed test does not pay again.
            () = async { drop(shutdown.wait_for(|s| *s).await) } => {
                tokio::time::timeout(PAY_GRACE, &mut payment)
                    .await
                    .unwrap_or(Ok(Err(PayError::Unconfirmed)))
                    .unwrap_or(Err(PayError::Unconfirmed))
            }
        };
        let paid_into = escrow.map(|fund_key| (key.as_str(), fund_key));
        match outcome {
            Ok(()) => {
                self.store
                    .set_spend(spend, SpendState::Paid, None, paid_into)
                    .map_err(store_err)?;
                Ok(())
            }
            Err(PayError::Failed(e)) => {
                self.store
                    .set_spend(spend, SpendState::Refunding, None, None)
                    .map_err(store_err)?;
                if let Some(call) = call {
                    money::refund(harness, call, PAYMENT_FAILED, self.clock.now())
                        .await
                        .map_err(store_err)?;
                }
                self.store.delete_spend(spend).map_err(store_err)?;
                Err(format!("payment: {e}"))
            }
            Err(PayError::Unconfirmed) => {
                self.store
                    .set_spend(spend, SpendState::Ambiguous, None, paid_into)
                    .map_err(store_err)?;
                Err(format!("payment: {UNCONFIRMED}"))
            }
        }
    }

    /// After a restart: settles the test payments a dead process left unresolved,
    /// then resumes every registration (funding checks, crawls, tests).
    pub(crate) async fn resume(self: Arc<Self>) -> Result<(), DirError> {
        let harness = self.harness();
        for spend in self.store.spends()? {
            let uid: PeerId = match spend.uid.parse() {
                Ok(uid) => uid,
                Err(_) => continue,
            };
            match spend.state {
                SpendState::Launched | SpendState::Refunding => {
                    let call = match spend.call_id {
                        Some(id) => Some(CallId::new(id)),
                        None => money::standing(harness, uid, &spend.debit_key).await?,
                    };
                    if let Some(call) = call {
                        money::refund(harness, call, NEVER_SENT, self.clock.now()).await?;
                    }
                    self.store.delete_spend(spend.id)?;
                }
                SpendState::Paying => {
                    let stored = self.store.get(&spend.uid)?;
                    // Only an escrowed payment (it has a debit) counts against a test.
                    let testing = spend.call_id.is_some()
                        && stored
                            .entry
                            .reg
                            .as_ref()
                            .is_some_and(|r| r.state == State::Testing);
                    let into = testing.then_some((spend.uid.as_str(), stored.fund_key.as_str()));
                    self.store
                        .set_spend(spend.id, SpendState::Ambiguous, None, into)?;
                }
                SpendState::Paid | SpendState::Ambiguous => {}
            }
        }
        for (key, stored) in self.store.all()? {
            let (Some(reg), Ok(uid)) = (&stored.entry.reg, key.parse::<PeerId>()) else {
                continue;
            };
            match reg.state {
                State::AwaitingFunding => self.clone().poke_funding(uid).await,
                State::Crawling | State::Testing => self.clone().spawn_pipeline(uid),
                _ => {}
            }
        }
        Ok(())
    }

    /// One maintenance pass: expiry, free recrawls of stale catalogs, funding checks.
    pub(crate) async fn sweep(self: Arc<Self>) -> Result<(), DirError> {
        let recrawl_after = self.policy.recrawl_hours * 3600;
        for (key, stored) in self.store.all()? {
            if self.shutting_down() {
                break;
            }
            let Ok(uid) = key.parse::<PeerId>() else {
                continue;
            };
            let now = self.now();
            if let Some(live) = &stored.entry.live {
                if live.expires_at <= now {
                    let _index = self.lock.lock().await;
                    self.store.update(&key, |s| {
                        if s.entry.live.as_ref().is_some_and(|l| l.expires_at <= now) {
                            if s.entry.reg.is_none() {
                                *s = Default::default();
                            } else {
                                s.entry.live = None;
                            }
                        }
                        Ok(())
                    })?;
                } else if now - live.catalog_checked_at >= recrawl_after
                    && let Err(e) = self.recrawl(uid).await
                {
                    tracing::info!(provider = %uid, error = %e, "free recrawl failed");
                }
            }
            if stored
                .entry
                .reg
                .as_ref()
                .is_some_and(|r| r.state == State::AwaitingFunding)
            {
                self.clone().poke_funding(uid).await;
            }
        }
        Ok(())
    }

    /// Reads a live provider's catalog again, for free; the listing keeps its stamps
    /// but `catalogCheckedAt`.
    pub(crate) async fn recrawl(&self, uid: PeerId) -> Result<(), String> {
        let router = self
            .harness()
            .router()
            .ok_or_else(|| "no router; not started".to_owned())?;
        let catalog = client::crawl(router, uid, &self.policy.name).await?;
        let now = self.now();
        self.store
            .update(&uid.to_string(), |s| {
                if let Some(live) = &mut s.entry.live {
                    live.catalog = catalog;
                    live.catalog_checked_at = now;
                }
                Ok(())
            })
            .map_err(|e| e.to_string())
    }
}
