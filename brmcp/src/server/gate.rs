//! Who may use the tools: the allow gate, shared by the router (checked for every
//! part, before any state exists for the peer) and the harness (checked for every
//! tip). Its list can be replaced while serving: clones share it, so a caller removed
//! is refused from its next PM on, and the sessions of callers kept are untouched.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use brmcp_adapters::{Authorizer, PeerId};

/// Who may use the tools: a default-deny allowlist of uids or a predicate. Installed
/// as the router's allow gate (so a peer it refuses allocates nothing) and consulted
/// for every tip (a refused tipper's tip is recorded, not credited).
#[derive(Clone)]
pub struct AllowGate(Arc<RwLock<Gate>>);

enum Gate {
    List(HashSet<PeerId>),
    Predicate(Box<dyn Fn(&PeerId) -> bool + Send + Sync>),
}

/// What [`AllowGate::replace_list`] changed, each side sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GateChange {
    /// Callers allowed now that were not before.
    pub added: Vec<PeerId>,
    /// Callers allowed before that are refused now.
    pub removed: Vec<PeerId>,
}

impl GateChange {
    /// `true` when the list is as it was.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty()
    }
}

impl AllowGate {
    /// Exactly these uids. [`PeerId`] parses hex in either case, so matching is
    /// case-insensitive. An empty list refuses everyone.
    pub fn list(uids: impl IntoIterator<Item = PeerId>) -> Self {
        Self(Arc::new(RwLock::new(Gate::List(
            uids.into_iter().collect(),
        ))))
    }

    /// Whoever `allow` says (it replaces the list entirely).
    pub fn predicate(allow: impl Fn(&PeerId) -> bool + Send + Sync + 'static) -> Self {
        Self(Arc::new(RwLock::new(Gate::Predicate(Box::new(allow)))))
    }

    /// Whether `peer` may call tools and be credited for tips.
    pub fn allows(&self, peer: &PeerId) -> bool {
        match &*self.read() {
            Gate::List(uids) => uids.contains(peer),
            Gate::Predicate(allow) => allow(peer),
        }
    }

    /// `true` for an empty allowlist: nobody can call anything.
    pub fn refuses_everyone(&self) -> bool {
        matches!(&*self.read(), Gate::List(uids) if uids.is_empty())
    }

    /// Allows exactly `uids` from now on, for every clone of this gate (the router's
    /// included): the next part from a removed caller is refused. A predicate gate
    /// becomes a list; its change then lists no removals (a predicate names nobody).
    pub fn replace_list(&self, uids: impl IntoIterator<Item = PeerId>) -> GateChange {
        let new: HashSet<PeerId> = uids.into_iter().collect();
        let mut gate = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let old = match &*gate {
            Gate::List(old) => old.clone(),
            Gate::Predicate(_) => HashSet::new(),
        };
        let sorted = |set: BTreeSet<PeerId>| set.into_iter().collect();
        let change = GateChange {
            added: sorted(new.difference(&old).copied().collect()),
            removed: sorted(old.difference(&new).copied().collect()),
        };
        *gate = Gate::List(new);
        change
    }

    /// The allowed uids, sorted; `None` for a predicate gate.
    pub fn uids(&self) -> Option<Vec<PeerId>> {
        match &*self.read() {
            Gate::List(uids) => {
                let sorted: BTreeSet<PeerId> = uids.iter().copied().collect();
                Some(sorted.into_iter().collect())
            }
            Gate::Predicate(_) => None,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Gate> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Authorizer for AllowGate {
    fn allow(&self, peer: &PeerId) -> bool {
        self.allows(peer)
    }
}

impl fmt::Debug for AllowGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &*self.read() {
            Gate::List(uids) => f.debug_tuple("AllowGate::List").field(&uids.len()).finish(),
            Gate::Predicate(_) => f.write_str("AllowGate::Predicate(..)"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: PeerId = PeerId::from_bytes([1; 32]);
    const B: PeerId = PeerId::from_bytes([2; 32]);
    const C: PeerId = PeerId::from_bytes([3; 32]);

    #[test]
    fn an_empty_list_refuses_everyone_a_predicate_does_not_claim_to() {
        assert!(AllowGate::list([]).refuses_everyone());
        assert!(!AllowGate::list([]).allows(&A));
        assert!(AllowGate::list([A]).allows(&A));
        assert!(!AllowGate::predicate(|_| false).refuses_everyone());
        assert!(AllowGate::predicate(|_| true).allows(&A));
    }

    #[test]
    fn a_replaced_list_applies_to_every_clone_and_says_what_changed() {
        let gate = AllowGate::list([A, B]);
        let routers_copy = gate.clone();
        let change = gate.replace_list([B, C]);
        assert_eq!(change.added, [C]);
        assert_eq!(change.removed, [A]);
        assert!(!routers_copy.allows(&A));
        assert!(routers_copy.allows(&B) && routers_copy.allows(&C));
        assert!(gate.replace_list([C, B]).is_empty());
        assert_eq!(gate.uids().unwrap(), [B, C]);
    }
}
