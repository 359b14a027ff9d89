//! The agent sessions of the HTTP endpoints, bounded per token and in total, idle ones
//! expired.
//!
//! rmcp keeps every session it made until it is closed: this registry decides which
//! may exist. A new session takes a reservation first (so concurrent initializes
//! cannot overshoot the bounds). At the token's bound (an agent's share of the
//! sessions) its own least recently used idle session is closed to make room; at the
//! total bound, the least recently used idle session of the token holding the most,
//! of the new session's own and those holding more than it will: so one agent's new
//! sessions never close those of an agent holding fewer. When no session may be
//! closed the new one is refused. A session is busy while a request of
//! it is open (an SSE stream included), and idle once none has been for
//! [`HttpLimits::session_idle`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::{Endpoint, HttpLimits};
use crate::bridge::lock;

/// Whose session it is: the SHA-256 of the bearer token presented (all zeros when
/// the token is waived).
pub(super) type TokenKey = [u8; 32];

struct Entry {
    bot: Endpoint,
    token: TokenKey,
    last_seen: Instant,
    busy: usize,
    /// What the session declared for the 2025-11-25 form of tasks, if it speaks it.
    tasks: Option<Arc<super::tasks25::TaskSession>>,
}

#[derive(Default)]
struct Registry {
    live: HashMap<String, Entry>,
    reserved: HashMap<TokenKey, usize>,
}

impl Registry {
    fn count(&self, token: Option<&TokenKey>) -> usize {
        let live = self
            .live
            .values()
            .filter(|e| token.is_none_or(|t| e.token == *t))
            .count();
        let reserved = match token {
            Some(t) => self.reserved.get(t).copied().unwrap_or(0),
            None => self.reserved.values().sum(),
        };
        live + reserved
    }

    /// Removes the least recently used idle session of `token`.
    fn evict_lru(&mut self, token: &TokenKey) -> Option<(Endpoint, String)> {
        let id = self
            .live
            .iter()
            .filter(|(_, e)| e.busy == 0 && e.token == *token)
            .min_by_key(|(_, e)| e.last_seen)
            .map(|(id, _)| id.clone())?;
        self.live.remove(&id).map(|e| (e.bot, id))
    }

    /// Removes an idle session to make room for one more of `token`: of the token
    /// holding the most among `token` itself and those holding more than `token`
    /// will, the least recently used.
    fn evict_for(&mut self, token: &TokenKey) -> Option<(Endpoint, String)> {
        let will_hold = self.count(Some(token)) + 1;
        let victim = self
            .live
            .values()
            .filter(|e| e.busy == 0)
            .map(|e| e.token)
            .filter(|t| t == token || self.count(Some(t)) >= will_hold)
            .max_by_key(|t| (self.count(Some(t)), *t != *token))?;
        self.evict_lru(&victim)
    }
}

/// The registry; cheap to share.
#[derive(Clone, Default)]
pub(super) struct Sessions(Arc<Mutex<Registry>>);

/// A session could not be made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Full {
    /// The token holds its share of the sessions, each busy.
    Token,
    /// The bridge holds its most sessions and none it may close for this token.
    Bridge,
}

/// A slot held for a session being made; released on drop.
pub(super) struct Reservation {
    sessions: Sessions,
    token: TokenKey,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut registry = lock(&self.sessions.0);
        if let Some(n) = registry.reserved.get_mut(&self.token) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                registry.reserved.remove(&self.token);
            }
        }
    }
}

/// Marks a session busy while held (an open request); on drop the session's idle
/// time starts again.
pub(super) struct Busy {
    sessions: Sessions,
    id: String,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut registry = lock(&self.sessions.0);
        if let Some(entry) = registry.live.get_mut(&self.id) {
            entry.busy = entry.busy.saturating_sub(1);
            entry.last_seen = Instant::now();
        }
    }
}

impl Sessions {
    /// Holds a slot for a new session of `token`, closing idle sessions to make room:
    /// the slot and the sessions to close (bot, session id).
    pub(super) fn admit(
        &self,
        token: TokenKey,
        limits: &HttpLimits,
    ) -> Result<(Reservation, Vec<(Endpoint, String)>), Full> {
        let mut registry = lock(&self.0);
        let mut evicted = Vec::new();
        while registry.count(Some(&token)) >= limits.max_sessions_per_token {
            evicted.push(registry.evict_lru(&token).ok_or(Full::Token)?);
        }
        while registry.count(None) >= limits.max_sessions {
            evicted.push(registry.evict_for(&token).ok_or(Full::Bridge)?);
        }
        *registry.reserved.entry(token).or_insert(0) += 1;
        drop(registry);
        Ok((
            Reservation {
                sessions: self.clone(),
                token,
            },
            evicted,
        ))
    }

    /// Records the session a reservation was for, busy with its first request.
    pub(super) fn register(&self, reservation: Reservation, bot: Endpoint, id: &str) -> Busy {
        lock(&self.0).live.insert(
            id.to_owned(),
            Entry {
                bot,
                token: reservation.token,
                last_seen: Instant::now(),
                busy: 1,
                tasks: None,
            },
        );
        drop(reservation);
        Busy {
            sessions: self.clone(),
            id: id.to_owned(),
        }
    }

    /// Marks a known session of `bot` busy; `None` for a session this registry does
    /// not hold (rmcp answers for it).
    pub(super) fn touch(&self, bot: &Endpoint, id: &str) -> Option<Busy> {
        let mut registry = lock(&self.0);
        let entry = registry.live.get_mut(id).filter(|e| e.bot == *bot)?;
        entry.busy += 1;
        entry.last_seen = Instant::now();
        Some(Busy {
            sessions: self.clone(),
            id: id.to_owned(),
        })
    }

    /// Records that the session `id` speaks the 2025-11-25 form of tasks.
    pub(super) fn set_tasks(&self, id: &str, tasks: super::tasks25::TaskSession) {
        if let Some(entry) = lock(&self.0).live.get_mut(id) {
            entry.tasks = Some(Arc::new(tasks));
        }
    }

    /// What the session `id` of `bot` declared for the 2025-11-25 form of tasks;
    /// `None` for a session that does not speak it (or that this registry does not
    /// hold).
    pub(super) fn tasks(
        &self,
        bot: &Endpoint,
        id: &str,
    ) -> Option<Arc<super::tasks25::TaskSession>> {
        lock(&self.0)
            .live
            .get(id)
            .filter(|e| e.bot == *bot)
            .and_then(|e| e.tasks.clone())
    }

    /// Forgets a session that was closed.
    pub(super) fn forget(&self, id: &str) {
        lock(&self.0).live.remove(id);
    }

    /// Forgets every session of `bot`, or of every bot.
    pub(super) fn forget_bot(&self, bot: Option<&Endpoint>) {
        lock(&self.0)
            .live
            .retain(|_, e| bot.is_some_and(|b| e.bot != *b));
    }

    /// Removes the sessions idle for `limits.session_idle`, returning them to close.
    pub(super) fn expire(&self, limits: &HttpLimits) -> Vec<(Endpoint, String)> {
        let mut registry = lock(&self.0);
        let now = Instant::now();
        let idle: Vec<String> = registry
            .live
            .iter()
            .filter(|(_, e)| e.busy == 0 && now.duration_since(e.last_seen) >= limits.session_idle)
            .map(|(id, _)| id.clone())
            .collect();
        idle.into_iter()
            .filter_map(|id| registry.live.remove(&id).map(|e| (e.bot, id)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits(per_token: usize, total: usize) -> HttpLimits {
        HttpLimits {
            max_sessions_per_token: per_token,
            max_sessions: total,
            session_idle: Duration::from_secs(60),
            ..HttpLimits::default()
        }
    }

    fn bot() -> Endpoint {
        Endpoint::Bot(brmcp_adapters::PeerId::from_bytes([1; 32]))
    }

    #[test]
    fn bounds_evict_lru_idle_and_refuse_when_all_busy() {
        let s = Sessions::default();
        let l = limits(2, 3);
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let (r, e) = s.admit(a, &l).unwrap();
        assert!(e.is_empty());
        let busy_a1 = s.register(r, bot(), "a1");
        let (r, _) = s.admit(a, &l).unwrap();
        drop(s.register(r, bot(), "a2"));
        // Per token: a1 is busy, so a2 makes room.
        let (r, e) = s.admit(a, &l).unwrap();
        assert_eq!(e, vec![(bot(), "a2".to_owned())]);
        let busy_a3 = s.register(r, bot(), "a3");
        // Per token, all busy: refused.
        assert!(s.admit(a, &l).is_err());
        // Total: b's first session fits (3), the second must evict; all of a's are busy.
        let (r, _) = s.admit(b, &l).unwrap();
        drop(s.register(r, bot(), "b1"));
        let (r, e) = s.admit(b, &l).unwrap();
        assert_eq!(e, vec![(bot(), "b1".to_owned())]);
        let busy_b2 = s.register(r, bot(), "b2");
        assert!(s.admit(b, &l).is_err());
        drop((busy_a1, busy_a3, busy_b2));
        // Reservations count until dropped.
        let (r1, _) = s.admit(b, &l).unwrap();
        assert_eq!(lock(&s.0).count(None), 3);
        drop(r1);
        assert_eq!(lock(&s.0).count(None), 2);
    }

    #[test]
    fn one_token_s_sessions_never_close_those_of_a_token_holding_fewer() {
        let s = Sessions::default();
        let l = limits(6, 8);
        let (flood, quiet, third) = ([1u8; 32], [2u8; 32], [3u8; 32]);
        let mut held = Vec::new();
        for id in ["q1", "q2"] {
            let (r, _) = s.admit(quiet, &l).unwrap();
            drop(s.register(r, bot(), id));
        }
        // The flood fills its share and the rest; its new sessions close its own.
        for n in 0..40 {
            let (r, evicted) = s.admit(flood, &l).unwrap();
            assert!(
                evicted.iter().all(|(_, id)| id.starts_with('f')),
                "{evicted:?}"
            );
            drop(s.register(r, bot(), &format!("f{n}")));
        }
        assert!(s.touch(&bot(), "q1").is_some() && s.touch(&bot(), "q2").is_some());
        // Another agent holding fewer takes room from the flood, not from quiet.
        let (r, evicted) = s.admit(third, &l).unwrap();
        assert!(
            evicted.iter().all(|(_, id)| id.starts_with('f')),
            "{evicted:?}"
        );
        held.push(s.register(r, bot(), "t1"));
        // Every session of the flood busy: its next is refused.
        let flood_ids: Vec<String> = lock(&s.0)
            .live
            .iter()
            .filter(|(_, e)| e.token == flood)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &flood_ids {
            held.push(s.touch(&bot(), id).unwrap());
        }
        assert!(s.admit(flood, &l).is_err());
        // quiet, holding two, may still replace its own.
        let (r, evicted) = s.admit(quiet, &l).unwrap();
        assert_eq!(evicted.len(), 1);
        assert!(evicted[0].1.starts_with('q'), "{evicted:?}");
        drop(r);
    }

    #[test]
    fn idle_sessions_expire_busy_ones_do_not() {
        let s = Sessions::default();
        let mut l = limits(8, 8);
        l.session_idle = Duration::ZERO;
        let (r, _) = s.admit([1; 32], &l).unwrap();
        let busy = s.register(r, bot(), "x");
        let (r, _) = s.admit([1; 32], &l).unwrap();
        drop(s.register(r, bot(), "y"));
        assert_eq!(s.expire(&l), vec![(bot(), "y".to_owned())]);
        drop(busy);
        assert_eq!(s.expire(&l), vec![(bot(), "x".to_owned())]);
        assert!(s.touch(&bot(), "x").is_none());
    }
}
