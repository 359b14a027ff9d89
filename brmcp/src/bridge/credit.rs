//! Credit goes to the call that paid for it: the bridge's rules for the one balance a
//! bot keeps for the bridge's identity, which all its agents share.
//!
//! A bot (the Go harness, and ours) charges a call from the caller's balance when it
//! suffices, whichever call put the credit there. The bridge therefore holds its own
//! calls back so that an agent's caps and approvals bound everything it gets:
//!
//! 1. **The agent may pay it, or it is not sent.** A call of a tool the bot lists with
//!    a price ([`ToolPrice::Fixed`], or at least one atom for [`ToolPrice::Dynamic`])
//!    is sent only if its agent could pay that price now: the per-call caps (the
//!    global one and the agent's), the agent's bots, and room under both daily caps
//!    ([`Policy::may_pay`]). Otherwise the bridge answers at once, naming the agent and
//!    the cap; nothing reaches the bot, so nothing is charged from credit.
//! 2. **One agent at a time per bot.** A priced call holds a [`Slot`] of its bot from
//!    its first send to its end (also while it is held for the agent's retry), and a
//!    call that comes to pay takes one if it had none. Another agent's call is not
//!    sent while a bot has priced calls of an agent under way, or holds credit an
//!    agent paid and has not collected ([`SpendLog::uncollected`]): it waits for them
//!    up to the configured `credit_wait`, then ends with an error saying whose
//!    calls or credit it waited for. The paying agent's own calls go on: its next
//!    call collects its credit first. Another agent's credit holds no call back whose
//!    agent's own credit covers the most it can cost (its fixed price, or a dynamic
//!    tool's listed most) beside that agent's calls under way there: the bot charges
//!    it from that credit. Without this, two agents each holding credit (say of calls
//!    the bot refunded) would wait on each other. Calls of one agent share the credit its
//!    payments put there (see 4). A call waiting for its approval holds its bot
//!    too: simpler than tracking the moments a call can take credit, at the cost
//!    that another agent's priced calls to that bot wait meanwhile.
//!
//!    A bot that reserves credit per call (it advertises
//!    [`RESERVES_CREDIT_META`](brmcp_adapters::protocol::RESERVES_CREDIT_META), as our
//!    harness does) credits each tip to the calls it refused for payment that wait for
//!    their retry, so a paying call's credit is not another call's to spend while that
//!    call is under way. There agents' calls run side by side: a call is held back only
//!    by credit another agent paid and has not collected whose paying call is no longer
//!    under way (it ended, say answered with an error the bot refunded, or it died with
//!    an earlier run: that credit is anyone's at the bot); a payment still being made
//!    counts as its call's while its agent has priced calls under way there. A bot that advertises the flag
//!    and does not honour it gains nothing: rule 1 still bounds every call, and a call
//!    answered from credit not its agent's is recorded against its agent's daily cap
//!    (rule 4), its payer's call paying again.
//!
//!    Such a bot reserves a tip for the oldest call it refused for payment that still
//!    waits, whichever agent paid it. So a call an earlier run sent and never paid for
//!    (resumed, or taken up by its agent's retry) is sent [alone](Admission::Alone): as
//!    at a bot that keeps one balance, once no other agent's calls or credit are
//!    there, and while it is under way no other agent's priced call is sent. Otherwise
//!    its resend could find another agent's fresh tip reserved for it, and be charged
//!    from it.
//! 3. **How long credit stays its agent's.** In approval mode, for
//!    [`APPROVED_CREDIT_HOLD_SECS`] after the payment: within it, a call is never
//!    charged from credit the user did not approve for its agent (the user approved
//!    that amount for that agent at that bot, so its next call there may use it).
//!    In autopay mode, for [`CREDIT_HOLD_SECS`] (the call key's replay window). Past
//!    its hold, credit holds no one back (a bot that never honoured it, or a call
//!    whose answer the bridge never saw, cannot stop other agents for good): another
//!    agent's call may be sent, and if it is answered from that credit the use is
//!    recorded against its own daily cap ([`CreditUse`](super::spend::CreditUse)),
//!    as a payment would be.
//!    Credit of an agent removed from the settings holds no one back: it can no
//!    longer collect it. Nor does a payment still pending past the tip wait
//!    (`tip_wait_secs`, the most the bridge waits for a tip's outcome): its tip may
//!    never have reached the bot (lost as the host went down), and a call that
//!    collected from it was charged from its agent's confirmed credit instead (rule 4),
//!    so it would hold other agents back for credit the bot does not hold. If its
//!    outcome confirms it later, it holds them back as any credit. A payment left
//!    pending because the outcome its payer saw settled an older one of the same
//!    amount (the spend log's rule) stands for that older payment's uncertainty, and
//!    its tip wait counts from that payment: a lost tip holds agents back for one tip
//!    wait, not for one more at each later payment its place passes to.
//!    Credit the bridge never paid (a tip sent by hand) is the user's own doing; a
//!    call answered from it is recorded the same way.
//! 4. **Who collects what.** A priced call answered (not an error, which the bot
//!    refunds) collects its price: a paid call from its own payment first (when its
//!    tip is confirmed; one still pending after the agent's confirmed credit), a call
//!    answered without paying from its agent's uncollected payments
//!    ([`SpendLog::collect`]). A paid call refused `payment_required` again waits for
//!    its credit while its payment is still uncollected (a tip on its way); once a
//!    call of the same agent collected it, it pays again, within the caps and
//!    approval as any payment, at most [`MAX_REPAYS`] times. A call that still is
//!    not answered ends with an error saying what was paid and that the credit stays
//!    with the bot as its agent's; never with the bot's raw `payment_required` body.
//!
//! A dynamically priced call answered without a quote was charged an amount the bridge
//! is not told: it collects the price the bot last quoted for that tool, if any (a
//! guess: too much makes a sibling pay again, leaving credit its agent's next call
//! collects; too little leaves a paying call waiting until it ends with the error
//! above), and is bounded by rule 2 to credit of its own agent (or none the bridge
//! paid).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use brmcp_adapters::PeerId;
use brmcp_adapters::protocol::ToolPrice;

use super::policy::{Policy, Refusal};
use super::settings::{Caller, DEFAULT_AGENT, Mode, Settings};
use super::spend::{SpendError, SpendLog};

/// How long, in autopay mode, uncollected credit stays its paying agent's alone: 30
/// minutes, the call key's replay window, within which its call may come back for it.
pub const CREDIT_HOLD_SECS: i64 = brmcp_adapters::protocol::OUTCOME_TTL_SECS as i64;

/// How long, in approval mode, uncollected credit stays its paying agent's alone: a
/// day, the daily cap's window: the user approved it for that agent, and another
/// agent is not charged from it while its agent may still come for it.
pub const APPROVED_CREDIT_HOLD_SECS: i64 = super::spend::DAY_SECS;

/// Default wait of a priced call for another agent's calls or credit at its bot: 30 s,
/// longer than one paid call takes (its tip, its reissue) on a live network.
pub const DEFAULT_CREDIT_WAIT: Duration = Duration::from_secs(30);

/// Payments of one call beyond its first, each made only after another call of its
/// agent collected the credit the previous one put there: 2. Enough for a burst of
/// the agent's own calls; a bot that keeps asking is not paid without end.
pub const MAX_REPAYS: u32 = 2;

/// Dynamic prices remembered (per bot and tool) before the memory starts over: 4096,
/// far more than the tools an agent calls; a bot cannot make it grow without end.
const MAX_QUOTES: usize = 4096;

/// How often a waiting call looks again at credit that may have expired.
const RECHECK: Duration = Duration::from_secs(1);

/// How a priced call takes its slot at its bot (rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// One agent at a time: the bot keeps one balance for the bridge.
    OneAgent,
    /// Beside other agents' calls: the bot reserves credit per call.
    SideBySide,
    /// Alone: as [`Admission::OneAgent`], and while the slot lives no other agent's
    /// call is admitted [`Admission::SideBySide`] either. For a call an earlier run
    /// sent and never paid for, which a bot that reserves credit may hold another
    /// agent's tip for.
    Alone,
}

impl Admission {
    /// The admission of a call at a bot that `reserves` credit per call (or not).
    pub(crate) const fn at(reserves: bool) -> Self {
        if reserves {
            Self::SideBySide
        } else {
            Self::OneAgent
        }
    }
}

/// The priced calls under way at one bot, per agent.
#[derive(Debug, Default)]
struct AtBot {
    calls: HashMap<String, usize>,
    /// Those of them admitted [`Admission::Alone`].
    alone: HashMap<String, usize>,
}

/// Counts `agent` in or out of `map`, dropping a zero.
fn count(map: &mut HashMap<String, usize>, agent: &str, add: bool) {
    if add {
        *map.entry(agent.to_owned()).or_default() += 1;
    } else if let Some(n) = map.get_mut(agent) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(agent);
        }
    }
}

/// The priced calls under way at each bot, per agent.
#[derive(Debug, Default)]
pub(crate) struct CreditBook {
    bots: Mutex<HashMap<PeerId, AtBot>>,
    changed: tokio::sync::Notify,
    /// Spend-log rows of payments whose calls are under way (held by their [`Slot`]).
    live_rows: Mutex<HashSet<i64>>,
    /// The price each bot last quoted for each tool.
    quotes: Mutex<HashMap<(PeerId, String), u64>>,
}

impl CreditBook {
    fn bots(&self) -> MutexGuard<'_, HashMap<PeerId, AtBot>> {
        self.bots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn live_rows(&self) -> MutexGuard<'_, HashSet<i64>> {
        self.live_rows
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn quotes(&self) -> MutexGuard<'_, HashMap<(PeerId, String), u64>> {
        self.quotes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers the price `bot` quoted for `tool`.
    pub(crate) fn quoted(&self, bot: &PeerId, tool: &str, price_atoms: u64) {
        let mut quotes = self.quotes();
        if quotes.len() >= MAX_QUOTES {
            quotes.clear();
        }
        quotes.insert((*bot, tool.to_owned()), price_atoms);
    }

    /// The price `bot` last quoted for `tool`.
    pub(crate) fn last_quote(&self, bot: &PeerId, tool: &str) -> Option<u64> {
        self.quotes().get(&(*bot, tool.to_owned())).copied()
    }
}

/// A priced call's place at its bot (rule 2): released when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    book: Arc<CreditBook>,
    bot: PeerId,
    agent: String,
    /// Admitted [`Admission::Alone`].
    alone: bool,
    /// The spend-log rows of the call's payments.
    rows: Vec<i64>,
}

impl Slot {
    /// The call paid: payment `row`'s credit is its call's while the slot lives.
    pub(crate) fn paid(&mut self, row: i64) {
        self.book.live_rows().insert(row);
        self.rows.push(row);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut live = self.book.live_rows();
        for row in &self.rows {
            live.remove(row);
        }
        drop(live);
        let mut bots = self.book.bots();
        if let Some(at) = bots.get_mut(&self.bot) {
            count(&mut at.calls, &self.agent, false);
            if self.alone {
                count(&mut at.alone, &self.agent, false);
            }
            if at.calls.is_empty() {
                bots.remove(&self.bot);
            }
        }
        drop(bots);
        self.book.changed.notify_waiters();
    }
}

/// What keeps an agent's priced call from its bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Blocker {
    /// Another agent's priced calls are under way there.
    Calls {
        /// That agent.
        agent: String,
    },
    /// The bot holds credit another agent paid and has not collected.
    Credit {
        /// That agent.
        agent: String,
        /// Its uncollected atoms there.
        atoms: u64,
        /// All of it paid by tips whose outcome is not known yet, which the bot may
        /// not hold at all.
        pending: bool,
    },
}

impl std::fmt::Display for Blocker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Calls { agent } => {
                write!(f, "agent {agent:?} has paid calls under way at this bot")
            }
            Self::Credit {
                agent,
                atoms,
                pending: false,
            } => write!(
                f,
                "the bot holds {atoms} atoms agent {agent:?} paid and has not collected yet \
                 (its next call to this bot collects them)"
            ),
            Self::Credit {
                agent,
                atoms,
                pending: true,
            } => write!(
                f,
                "agent {agent:?} paid this bot {atoms} atoms by a tip whose outcome is not \
                 known yet; until it is, or the tip wait has passed, that credit is the \
                 agent's"
            ),
        }
    }
}

/// Rule 2, without I/O: the first agent other than `agent` with priced calls under way
/// (`in_flight`) or uncollected credit (`credit`, per agent) at the bot. At a bot that
/// `reserves` credit per call, calls under way hold no one back (and `credit` is only
/// that of payments whose calls ended). Other agents' credit holds no call back whose
/// agent's own credit covers it, at `most` atoms (the most the call can cost), beside
/// its agent's calls under way there: the bot charges it from that credit, which it
/// collects first (rule 4); else two agents' credit could hold each other's calls back
/// until both holds end. Credit of an agent in `unconfirmed` is of payments whose
/// outcome is not known yet.
pub(crate) fn blocker(
    agent: &str,
    in_flight: Option<&HashMap<String, usize>>,
    (credit, unconfirmed): (&[(String, u64)], &[String]),
    reserves: bool,
    most: Option<u64>,
) -> Option<Blocker> {
    let own_calls = in_flight.and_then(|m| m.get(agent)).copied().unwrap_or(0);
    let own_credit = credit
        .iter()
        .find(|(a, _)| a == agent)
        .map_or(0, |(_, n)| *n);
    let covered = most.is_some_and(|most| {
        let calls = u64::try_from(own_calls)
            .unwrap_or(u64::MAX)
            .saturating_add(1);
        own_credit >= most.saturating_mul(calls)
    });
    if !reserves
        && let Some(other) = in_flight
            .into_iter()
            .flatten()
            .find(|(a, n)| a.as_str() != agent && **n > 0)
    {
        return Some(Blocker::Calls {
            agent: other.0.clone(),
        });
    }
    if covered {
        return None;
    }
    credit
        .iter()
        .find(|(a, n)| a != agent && *n > 0)
        .map(|(a, n)| Blocker::Credit {
            agent: a.clone(),
            atoms: *n,
            pending: unconfirmed.contains(a),
        })
}

/// Rule 2 at a bot that reserves credit: the first agent other than `agent` with a
/// call under way there admitted [`Admission::Alone`] (in `alone`, per agent), which
/// holds back every other agent's call.
pub(crate) fn alone_there(agent: &str, alone: Option<&HashMap<String, usize>>) -> Option<Blocker> {
    alone
        .into_iter()
        .flatten()
        .find(|(a, n)| a.as_str() != agent && **n > 0)
        .map(|(a, _)| Blocker::Calls { agent: a.clone() })
}

/// A call's first payment when the bot asks `shortfall` atoms of `price`: the shortfall
/// and the part of what the bot holds (the price less the shortfall) that other agents
/// paid and have not collected (`others`), which is not this call's to spend (rule 2);
/// never more than the price. Credit of no agent (a hand tip, or a bot's claim) is
/// counted on, as the shortfall says.
pub(crate) const fn first_payment(shortfall: u64, price: u64, others: u64) -> u64 {
    let held = price.saturating_sub(shortfall);
    let theirs = if held < others { held } else { others };
    shortfall.saturating_add(theirs)
}

/// Rule 3: the age past which uncollected credit no longer holds other agents back,
/// in `mode`.
pub(crate) const fn hold_secs(mode: Mode) -> i64 {
    match mode {
        Mode::Approval => APPROVED_CREDIT_HOLD_SECS,
        Mode::Autopay => CREDIT_HOLD_SECS,
    }
}

/// The smallest amount a call of a tool listed at `price` can cost: what rule 1
/// checks; `None` for a tool the bot does not sell.
pub(crate) const fn least_price(price: Option<ToolPrice>) -> Option<u64> {
    match price {
        Some(ToolPrice::Fixed(n)) if n > 0 => Some(n),
        Some(ToolPrice::Dynamic) => Some(1),
        _ => None,
    }
}

/// Uncollected credit at `bot` per agent, within its hold (by `settings`' mode) at
/// `now`, less the payments in `live` (their calls are under way) and those still
/// being made by an agent in `busy` (its paying call holds a slot). An agent removed
/// from `settings` can collect nothing: its credit holds no one back. Nor does a
/// payment still pending past `settings`' tip wait, counted from when its outcome
/// became unknown (`Uncollected::since`): the bridge stopped waiting for its tip, which
/// may never have reached the bot (rule 3).
fn credit_at(
    spend: &SpendLog,
    settings: &Settings,
    bot: &PeerId,
    now: i64,
    (live, busy): (&HashSet<i64>, &[String]),
) -> Result<CreditThere, SpendError> {
    let hold = hold_secs(settings.mode);
    let tip_wait = i64::try_from(settings.tip_wait_secs).unwrap_or(i64::MAX);
    let mut per_agent: Vec<(String, u64)> = Vec::new();
    let mut confirmed: HashSet<String> = HashSet::new();
    for row in spend.uncollected(Some(bot))? {
        let expired = row.ts <= now.saturating_sub(hold);
        let removed = row.agent != DEFAULT_AGENT && settings.agent(&row.agent).is_none();
        let paying = row.pending && busy.contains(&row.agent);
        let lost_sight = row.pending && row.since <= now.saturating_sub(tip_wait);
        if expired || removed || paying || lost_sight || live.contains(&row.id) {
            continue;
        }
        if !row.pending {
            confirmed.insert(row.agent.clone());
        }
        match per_agent.iter_mut().find(|(a, _)| *a == row.agent) {
            Some((_, n)) => *n = n.saturating_add(row.atoms),
            None => per_agent.push((row.agent, row.atoms)),
        }
    }
    let unconfirmed = per_agent
        .iter()
        .filter(|(a, _)| !confirmed.contains(a))
        .map(|(a, _)| a.clone())
        .collect();
    Ok(CreditThere {
        per_agent,
        unconfirmed,
    })
}

/// The credit at a bot that holds other agents back ([`credit_at`]).
#[derive(Debug)]
struct CreditThere {
    /// Uncollected atoms per agent.
    per_agent: Vec<(String, u64)>,
    /// The agents all of whose credit counted is of payments still pending.
    unconfirmed: Vec<String>,
}

impl Policy {
    /// Rule 1: whether `caller` could pay `atoms` to `bot` now, by the caps and its
    /// bots (not the approval, which is asked when the bot asks for payment).
    pub(crate) fn may_pay(
        &self,
        settings: &Settings,
        caller: &Caller,
        bot: &PeerId,
        atoms: u64,
    ) -> Result<(), Refusal> {
        self.caps(settings, caller, bot, atoms)
            .and_then(|agent_cap| self.first_look(settings, caller, agent_cap, atoms))
            .map(|_| ())
    }

    /// Rule 2: a slot at `bot` for `agent`'s priced call, which costs at `most` atoms
    /// (`None`: not known), once no other agent's calls or credit are there (admitted
    /// [`Admission::SideBySide`], only credit whose paying call ended, and no call
    /// admitted alone; none while the agent's own credit covers the call), waiting up
    /// to `wait`; the refusal says what it waited for.
    pub(crate) async fn admit(
        &self,
        settings: &Settings,
        bot: &PeerId,
        agent: &str,
        (wait, admission): (Duration, Admission),
        most: Option<u64>,
    ) -> Result<Slot, Refusal> {
        let deadline = tokio::time::Instant::now() + wait;
        let reserves = admission == Admission::SideBySide;
        let alone = admission == Admission::Alone;
        loop {
            let changed = self.credit.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            let (live, busy) = if reserves {
                let busy = self.credit.bots().get(bot).map_or_else(Vec::new, |at| {
                    at.calls
                        .iter()
                        .filter(|(_, n)| **n > 0)
                        .map(|(a, _)| a.clone())
                        .collect()
                });
                (self.credit.live_rows().clone(), busy)
            } else {
                (HashSet::new(), Vec::new())
            };
            let now = self.clock.now().0;
            let CreditThere {
                per_agent: credit,
                unconfirmed,
            } = credit_at(&self.spend, settings, bot, now, (&live, &busy))
                .map_err(|e| e.to_string())?;
            let blocked = {
                let mut bots = self.credit.bots();
                let at = bots.get(bot);
                let held = reserves
                    .then(|| alone_there(agent, at.map(|at| &at.alone)))
                    .flatten();
                match held.or_else(|| {
                    let credit = (credit.as_slice(), unconfirmed.as_slice());
                    blocker(agent, at.map(|at| &at.calls), credit, reserves, most)
                }) {
                    Some(blocker) => blocker,
                    None => {
                        let at = bots.entry(*bot).or_default();
                        count(&mut at.calls, agent, true);
                        if alone {
                            count(&mut at.alone, agent, true);
                        }
                        return Ok(Slot {
                            book: self.credit.clone(),
                            bot: *bot,
                            agent: agent.to_owned(),
                            alone,
                            rows: Vec::new(),
                        });
                    }
                }
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                tracing::info!(%bot, agent, %blocked, "priced call held back");
                return Err(format!(
                    "agent {agent:?} waited {}s for this bot: {blocked}; try again later",
                    wait.as_secs()
                ));
            }
            let pause = RECHECK.min(deadline - now);
            let _ = tokio::time::timeout(pause, changed).await;
        }
    }

    /// Rule 4: `agent`'s call of `tool` at `bot` was answered and charged `atoms`
    /// from the credit there, its own payment `own` first. Logged, never failing the
    /// call: the answer is the agent's whatever the log says.
    pub(crate) fn collect(
        &self,
        bot: &PeerId,
        agent: &str,
        tool: &str,
        own: Option<i64>,
        atoms: u64,
    ) {
        match self
            .spend
            .collect(self.clock.now(), bot, agent, tool, own, atoms)
        {
            Ok(collected) => {
                for (whose, atoms) in &collected.others {
                    let whose = whose.as_deref().unwrap_or("(not paid by this bridge)");
                    tracing::info!(%bot, tool, agent, atoms, credit_of = whose, "call answered from credit not its agent's");
                }
            }
            Err(e) => {
                tracing::warn!(%bot, tool, agent, error = %e, "credit not recorded as collected")
            }
        }
    }

    /// The credit agents other than `agent` paid at `bot` and have not collected: what
    /// a payment of `agent`'s call must not count on, whatever shortfall the bot asks;
    /// none when the spend log cannot be read.
    pub(crate) fn others_credit(&self, bot: &PeerId, agent: &str) -> u64 {
        match self.spend.uncollected(Some(bot)) {
            Ok(rows) => rows
                .iter()
                .filter(|r| r.agent != agent)
                .fold(0u64, |n, r| n.saturating_add(r.atoms)),
            Err(e) => {
                tracing::warn!(%bot, error = %e, "spend log not read");
                0
            }
        }
    }

    /// Rule 4: whether payment `row`'s credit was collected by another call of its
    /// agent (so its own call, refused again, pays again).
    pub(crate) fn credit_taken(&self, row: i64) -> bool {
        match self.spend.left_of(row) {
            Ok(left) => left == 0,
            Err(e) => {
                tracing::warn!(row, error = %e, "spend log not read");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests;
