//! Progress notifications that arrive before their request is routed.
//!
//! A forwarded request's progress can reach us before the code that relays it has
//! registered the request's token (the peer answers fast, or the tap runs first). Both
//! forwarders (the bridge's link to a bot, and `brmcp serve`'s link to an upstream)
//! keep such notifications here, bounded, and take them when the route is registered.

use std::collections::{HashMap, VecDeque};

use rmcp::model::{ProgressNotificationParam, ProgressToken};

/// Early notifications by progress token, at most `per_token` each and `tokens` tokens
/// at once; past that the oldest token's notifications go first, and a token's later
/// notifications are dropped.
#[derive(Debug)]
pub(crate) struct EarlyProgress {
    queues: HashMap<ProgressToken, VecDeque<ProgressNotificationParam>>,
    order: VecDeque<ProgressToken>,
    tokens: usize,
    per_token: usize,
}

impl EarlyProgress {
    pub(crate) fn new(tokens: usize, per_token: usize) -> Self {
        Self {
            queues: HashMap::new(),
            order: VecDeque::new(),
            tokens,
            per_token,
        }
    }

    /// Keeps `params` for its token, within the bounds.
    pub(crate) fn push(&mut self, params: ProgressNotificationParam) {
        let token = params.progress_token.clone();
        if !self.queues.contains_key(&token) {
            if self.order.len() >= self.tokens
                && let Some(oldest) = self.order.pop_front()
            {
                self.queues.remove(&oldest);
            }
            self.order.push_back(token.clone());
        }
        let queue = self.queues.entry(token).or_default();
        if queue.len() < self.per_token {
            queue.push_back(params);
        }
    }

    /// Takes what arrived early for `token`, oldest first.
    pub(crate) fn take(&mut self, token: &ProgressToken) -> VecDeque<ProgressNotificationParam> {
        self.order.retain(|t| t != token);
        self.queues.remove(token).unwrap_or_default()
    }

    /// The tokens kept, and the most notifications kept for one of them.
    #[cfg(any(fuzzing, test))]
    pub(crate) fn counts(&self) -> (usize, usize) {
        let most = self.queues.values().map(VecDeque::len).max().unwrap_or(0);
        (self.queues.len().max(self.order.len()), most)
    }

    /// Nothing kept.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.queues.is_empty() && self.order.is_empty()
    }

    /// Tokens kept, and the length of each token's queue.
    #[cfg(test)]
    pub(crate) fn lens(&self) -> HashMap<ProgressToken, usize> {
        self.queues
            .iter()
            .map(|(t, q)| (t.clone(), q.len()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::NumberOrString;

    use super::*;

    fn note(token: i64, progress: f64) -> ProgressNotificationParam {
        ProgressNotificationParam::new(ProgressToken(NumberOrString::Number(token)), progress)
    }

    #[test]
    fn bounded_oldest_token_first() {
        let mut early = EarlyProgress::new(3, 2);
        for token in 0..5 {
            for i in 0..4 {
                early.push(note(token, f64::from(i)));
            }
        }
        let lens = early.lens();
        assert_eq!(lens.len(), 3);
        assert!(lens.values().all(|&n| n == 2));
        assert!(!lens.contains_key(&ProgressToken(NumberOrString::Number(0))));
        let taken = early.take(&ProgressToken(NumberOrString::Number(4)));
        let values: Vec<f64> = taken.iter().map(|p| p.progress).collect();
        assert_eq!(values, vec![0.0, 1.0], "the first ones, in order");
        early.take(&ProgressToken(NumberOrString::Number(3)));
        early.take(&ProgressToken(NumberOrString::Number(2)));
        assert!(early.is_empty());
    }
}
