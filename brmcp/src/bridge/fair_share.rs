//! Fair shares of a bot's rate limit between the bridge's agents.
//!
//! A bot limits calls per Bison Relay identity, and every agent of a bridge calls
//! under the bridge's one identity: left alone, one agent's flood spends the bot's
//! limit and the others' calls are refused there. So the bridge spaces each agent's
//! `tools/call`s to a bot with a token bucket per (bot, agent) whose size and rate are
//! a fair share of what the bridge takes of the bot's limit: that, divided between
//! the agents that called the bot within [`ACTIVE_WINDOW`] and one more, the share
//! kept for an agent that comes (never more ways than agents that may call the bot).
//! A bot only the default agent may call is not spaced: there is no one to keep a
//! share for, and the bot's own limit answers. One bucket per bot, the bridge's own
//! model of the bot's limit, bounds all agents together, so shares that shrink as
//! agents come cannot add up past the limit. A call over either is refused at the
//! bridge, naming the agent, with when to retry.
//!
//! The limit is the one the bot says in its `initialize` result
//! ([`protocol::CALLS_PER_MINUTE_META`], our harness); of a bot that does not say (a Go
//! bot) the bridge takes [`Config::bot_calls_per_minute`](super::Config), by default
//! [`BOT_CALLS_PER_MINUTE`], the harnesses' default. It uses [`USED_FRACTION`] of it.
//!
//! Sans-IO: [`Shares`] takes the time it is given; [`FairShares`] shares it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use brmcp_adapters::PeerId;
#[cfg(doc)]
use brmcp_adapters::protocol;

use rmcp::model::{CallToolResult, ContentBlock};

use super::settings::Caller;
use super::{Inner, lock};

/// The bot's calls per minute per caller when the bridge knows no better: 30, the
/// default of both harnesses (a bucket of 30 calls that refills in a minute).
pub const BOT_CALLS_PER_MINUTE: u32 = 30;

/// The fraction of the bot's limit the bridge lets its agents use: 9/10, leaving a
/// tenth for timing (calls reach the bot later than they pass here, some closer
/// together) and for a bucket the bot kept from before this bridge started.
pub(crate) const USED_FRACTION: f64 = 0.9;

/// How recently an agent must have called a bot to count among those sharing it: a
/// minute, the time the bot's bucket takes to refill.
pub(crate) const ACTIVE_WINDOW: Duration = Duration::from_secs(60);

/// How far past its share an agent's retry of a held call (one carrying a
/// `requestState`) is let through: 4 calls. Such a retry resumes a call the bridge
/// holds and spends nothing at the bot, so it is not refused for the calls before
/// it; a `requestState` that is not the bridge's reaches the bot as a call, so the
/// credit is bounded and paid back before the agent's next call.
pub(crate) const RETRY_CREDIT: f64 = 4.0;

/// Why a call was refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum OverShare {
    /// The agent used its share: `per_minute` calls a minute.
    Agent {
        /// The agent's share now.
        per_minute: f64,
        /// When its next call fits.
        retry_in: Duration,
    },
    /// The agents together used what the bridge takes of the bot's limit.
    Bridge {
        /// When the next call fits.
        retry_in: Duration,
    },
}

impl OverShare {
    /// When to retry.
    pub(crate) fn retry_in(self) -> Duration {
        match self {
            Self::Agent { retry_in, .. } | Self::Bridge { retry_in } => retry_in,
        }
    }

    /// The refusal's text, naming `agent` and the bot (`bot`, its label).
    pub(crate) fn message(self, agent: &str, bot: &str, limit_per_minute: f64) -> String {
        let secs = self.retry_in().as_secs_f64().ceil().max(1.0);
        match self {
            Self::Agent { per_minute, .. } => format!(
                "agent {agent:?} is over its share of bot {bot}'s rate limit ({per_minute:.1} of \
                 the {limit_per_minute:.0} calls a minute the bridge's agents share); the bridge \
                 refused the call; retry in {secs:.0} s"
            ),
            Self::Bridge { .. } => format!(
                "the bridge's agents together used bot {bot}'s rate limit ({limit_per_minute:.0} \
                 calls a minute); the bridge refused agent {agent:?}'s call; retry in {secs:.0} s"
            ),
        }
    }
}

/// A token bucket: `tokens` at time `at`.
#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn full(capacity: f64, now: Instant) -> Self {
        Self {
            tokens: capacity,
            at: now,
        }
    }

    /// Brought to `now`: refilled at `capacity` a minute, up to `capacity` (a share
    /// that shrank takes its tokens down at once).
    fn refill(&mut self, capacity: f64, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * capacity / 60.0).min(capacity);
        self.at = self.at.max(now);
    }

    /// How long until the bucket holds `need` tokens, refilling at `capacity` a minute.
    fn wait_for(&self, need: f64, capacity: f64) -> Duration {
        if capacity <= 0.0 {
            return ACTIVE_WINDOW;
        }
        Duration::from_secs_f64(((need - self.tokens) * 60.0 / capacity).max(0.0))
    }
}

struct AgentShare {
    bucket: Bucket,
    /// Its last call (let through or not).
    last: Instant,
}

struct BotShares {
    bridge: Bucket,
    agents: HashMap<String, AgentShare>,
}

/// The shares of every bot: the core, given the time.
pub(crate) struct Shares {
    /// What the agents may use of a bot's limit together, calls a minute.
    per_minute: f64,
    bots: HashMap<PeerId, BotShares>,
}

impl Shares {
    /// Shares of `bot_calls_per_minute`, of which [`USED_FRACTION`] is used.
    pub(crate) fn new(bot_calls_per_minute: u32) -> Self {
        Self {
            per_minute: f64::from(bot_calls_per_minute) * USED_FRACTION,
            bots: HashMap::new(),
        }
    }

    /// Calls a minute the agents share of a bot that says it allows `bot_limit` (see
    /// [`protocol::CALLS_PER_MINUTE_META`]), or of one that does not say.
    pub(crate) fn limit(&self, bot_limit: Option<u32>) -> f64 {
        bot_limit.map_or(self.per_minute, |l| f64::from(l) * USED_FRACTION)
    }

    /// Takes a call of `agent` to `bot` at `now`, or says why not. `callers`: how many
    /// agents may call the bot (at least 1); `bot_limit`: the calls a minute the bot
    /// says it allows, if it says; `retry`: the call carries a `requestState` (see
    /// [`RETRY_CREDIT`]).
    pub(crate) fn admit(
        &mut self,
        bot: &PeerId,
        agent: &str,
        callers: usize,
        bot_limit: Option<u32>,
        retry: bool,
        now: Instant,
    ) -> Result<(), OverShare> {
        let limit = self.limit(bot_limit);
        let shares = self.bots.entry(*bot).or_insert_with(|| BotShares {
            bridge: Bucket::full(limit, now),
            agents: HashMap::new(),
        });
        shares.bridge.refill(limit, now);
        let others = shares
            .agents
            .iter()
            .filter(|(name, a)| {
                name.as_str() != agent && now.saturating_duration_since(a.last) < ACTIVE_WINDOW
            })
            .count();
        // The active agents, this one, and one more to come, as far as there are.
        let ways = (others + 2).min(callers).max(1);
        let share = limit / ways as f64;
        // Agents idle for the window whose buckets refilled hold nothing to keep.
        shares.agents.retain(|name, a| {
            name == agent || now.saturating_duration_since(a.last) < ACTIVE_WINDOW || {
                a.bucket.refill(share, now);
                a.bucket.tokens < share
            }
        });
        let own = shares
            .agents
            .entry(agent.to_owned())
            .or_insert_with(|| AgentShare {
                bucket: Bucket::full(share, now),
                last: now,
            });
        own.bucket.refill(share, now);
        own.last = now;
        let floor = if retry { -RETRY_CREDIT } else { 0.0 };
        if own.bucket.tokens - 1.0 < floor {
            return Err(OverShare::Agent {
                per_minute: share,
                retry_in: own.bucket.wait_for(floor + 1.0, share),
            });
        }
        if shares.bridge.tokens - 1.0 < floor {
            return Err(OverShare::Bridge {
                retry_in: shares.bridge.wait_for(floor + 1.0, limit),
            });
        }
        own.bucket.tokens -= 1.0;
        shares.bridge.tokens -= 1.0;
        Ok(())
    }
}

/// [`Shares`] behind a lock, on the bridge's clock.
pub(crate) struct FairShares(Mutex<Shares>);

impl FairShares {
    /// Shares of bots that each allow `bot_calls_per_minute`.
    pub(crate) fn new(bot_calls_per_minute: u32) -> Self {
        Self(Mutex::new(Shares::new(bot_calls_per_minute)))
    }

    /// Takes a call of `agent` to `bot` now, or the refusal's text naming the agent
    /// and `label` (the bot's name): see [`Shares::admit`].
    pub(crate) fn admit(
        &self,
        bot: &PeerId,
        label: &str,
        agent: &str,
        callers: usize,
        bot_limit: Option<u32>,
        retry: bool,
    ) -> Result<(), String> {
        let mut shares = lock(&self.0);
        let limit = shares.limit(bot_limit);
        shares
            .admit(bot, agent, callers, bot_limit, retry, Instant::now())
            .map_err(|over| over.message(agent, label, limit))
    }
}

/// Takes `caller`'s `tools/call` of `bot` on `inner`'s shares, or the tool error that
/// refuses it; `bot_limit`: the calls a minute the bot says it allows each caller, if
/// it says; `retry`: the call carries a `requestState`.
pub(crate) fn admit(
    inner: &Inner,
    caller: &Caller,
    bot: &PeerId,
    bot_limit: Option<u32>,
    retry: bool,
) -> Result<(), CallToolResult> {
    let (callers, label) = {
        let settings = lock(&inner.settings);
        let uid = bot.to_string();
        let agents = settings
            .agents
            .iter()
            .filter(|a| a.allows_bot(&uid))
            .count();
        // The default agent's token may call every bot.
        (agents + 1, settings.bot_label(bot))
    };
    if callers <= 1 {
        // No other agent to keep a share for: the bot's own limit answers.
        return Ok(());
    }
    inner
        .http
        .fair_shares
        .admit(bot, &label, caller.name(), callers, bot_limit, retry)
        .map_err(|text| CallToolResult::error(vec![ContentBlock::text(text)]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bot(n: u8) -> PeerId {
        PeerId::from_bytes([n; 32])
    }

    /// Calls of `agent` let through at `now`, out of `tries`.
    fn through(s: &mut Shares, agent: &str, callers: usize, tries: usize, now: Instant) -> usize {
        (0..tries)
            .filter(|_| s.admit(&bot(1), agent, callers, None, false, now).is_ok())
            .count()
    }

    #[test]
    fn a_lone_agent_gets_the_whole_limit() {
        let mut s = Shares::new(30);
        let t = Instant::now();
        assert_eq!(through(&mut s, "default", 1, 100, t), 27);
        let refused = s.admit(&bot(1), "default", 1, None, false, t).unwrap_err();
        let OverShare::Agent { retry_in, .. } = refused else {
            panic!("{refused:?}");
        };
        // A minute refills 27: one call in 60/27 s.
        assert!(retry_in > Duration::from_secs(2) && retry_in < Duration::from_secs(3));
        let then = t + retry_in + Duration::from_millis(1);
        assert_eq!(through(&mut s, "default", 1, 100, then), 1);
    }

    #[test]
    fn a_flood_leaves_the_others_their_share_and_never_passes_the_limit() {
        let mut s = Shares::new(30);
        let t = Instant::now();
        // The bot's own bucket for the bridge's identity: every call let through
        // must find a token there.
        let mut at_bot = Bucket::full(30.0, t);
        let mut reach_bot = |now: Instant| {
            at_bot.refill(30.0, now);
            assert!(at_bot.tokens >= 1.0, "the bot would refuse at {now:?}");
            at_bot.tokens -= 1.0;
        };
        // Three agents may call; the flood comes first and gets half, keeping a
        // share for the next.
        let flood = through(&mut s, "flood", 3, 100, t);
        assert_eq!(flood, 13);
        let quiet = through(&mut s, "quiet", 3, 100, t);
        assert_eq!(quiet, 9, "the second agent has its share at once");
        // The third is held to what is left of the bridge's use of the limit.
        let third = through(&mut s, "third", 3, 100, t);
        assert_eq!(third, 5);
        for _ in 0..flood + quiet + third {
            reach_bot(t);
        }
        // Over ten minutes the flood calls without pause and the quiet agent once a
        // minute: every quiet call passes, and the bot never refuses one.
        let mut quiet_refused = 0;
        for ms in (100..600_000).step_by(100) {
            let now = t + Duration::from_millis(ms);
            if s.admit(&bot(1), "flood", 3, None, false, now).is_ok() {
                reach_bot(now);
            }
            if ms % 60_000 == 0 {
                match s.admit(&bot(1), "quiet", 3, None, false, now) {
                    Ok(()) => reach_bot(now),
                    Err(_) => quiet_refused += 1,
                }
            }
        }
        assert_eq!(quiet_refused, 0);
    }

    #[test]
    fn the_bridge_bucket_bounds_shares_that_shrink() {
        let mut s = Shares::new(30);
        let t = Instant::now();
        // Alone of two possible callers, a: half the limit (13.5).
        assert_eq!(through(&mut s, "a", 10, 100, t), 13);
        // b comes: shares of a third; then c, d, e, each a smaller one: together
        // they cannot take more than the 27 the bridge uses.
        let mut total = 13;
        for agent in ["b", "c", "d", "e", "f"] {
            total += through(&mut s, agent, 10, 100, t);
        }
        assert!(total <= 27, "{total}");
        let err = (0..10)
            .find_map(|i| s.admit(&bot(1), &format!("x{i}"), 10, None, false, t).err())
            .unwrap();
        assert!(
            matches!(err, OverShare::Bridge { .. } | OverShare::Agent { .. }),
            "{err:?}"
        );
    }

    #[test]
    fn retries_of_held_calls_pass_on_bounded_credit() {
        let mut s = Shares::new(30);
        let t = Instant::now();
        assert_eq!(through(&mut s, "a", 1, 100, t), 27);
        let retries = (0..100)
            .filter(|_| s.admit(&bot(1), "a", 1, None, true, t).is_ok())
            .count();
        assert_eq!(retries, 4);
        // The credit is paid back before the next call.
        let refused = s.admit(&bot(1), "a", 1, None, false, t).unwrap_err();
        assert!(refused.retry_in() > Duration::from_secs(10), "{refused:?}");
    }

    #[test]
    fn bots_are_apart_and_the_refusal_names_the_agent() {
        let mut s = Shares::new(30);
        let t = Instant::now();
        assert_eq!(through(&mut s, "a", 1, 100, t), 27);
        assert!(s.admit(&bot(2), "a", 1, None, false, t).is_ok());
        let refused = s.admit(&bot(1), "a", 1, None, false, t).unwrap_err();
        let text = refused.message("a", "alice", s.limit(None));
        assert!(text.contains("agent \"a\""), "{text}");
        assert!(text.contains("bot alice"), "{text}");
        assert!(text.contains("retry in 3 s"), "{text}");
    }

    #[test]
    fn idle_agents_are_forgotten() {
        let mut s = Shares::new(30);
        let t = Instant::now();
        for i in 0..100 {
            s.admit(&bot(1), &format!("a{i}"), 200, None, false, t).ok();
        }
        let later = t + ACTIVE_WINDOW * 3;
        s.admit(&bot(1), "b", 200, None, false, later).unwrap();
        assert_eq!(s.bots[&bot(1)].agents.len(), 1);
    }

    #[test]
    fn a_bot_that_says_its_limit_is_shared_by_it() {
        let t = Instant::now();
        let mut s = Shares::new(30);
        // 27 a minute between this agent and one to come: a burst of 13.
        let unsaid = (0..100)
            .filter(|_| s.admit(&bot(1), "a", 3, None, false, t).is_ok())
            .count();
        // A bot that allows 6,000 a minute: 5,400, 2,700 each.
        let said = (0..3_000)
            .filter(|_| s.admit(&bot(2), "a", 3, Some(6_000), false, t).is_ok())
            .count();
        assert_eq!(unsaid, 13);
        assert_eq!(said, 2_700);
        // A bot that allows 1 a minute: less than one call each, refused at once.
        assert!(s.admit(&bot(3), "a", 3, Some(1), false, t).is_err());
    }
}
