//! Keyed calls in flight in this process: the first call with a (caller, key) owns it,
//! and duplicates arriving while it runs wait for it and receive its exact answer,
//! refusals included (the Go harness handed them an empty success, §4.10.1).
//!
//! The table only spans the owner's run. Before it, and after it, the ledger holds the
//! key: [`Billing::held`](super::Billing::held) answers a duplicate of a finished call,
//! across restarts. The owner publishes its answer and leaves the table under one lock,
//! so a duplicate either waits and gets the answer, or arrives after and finds the
//! ledger's record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use brmcp_adapters::PeerId;
use tokio::sync::watch;

use super::billing::KeyConflict;
use super::call_key::{ArgsHash, CallKey};

type Key = (PeerId, CallKey);

/// The calls in flight, by (caller, key). `T` is the answer duplicates receive.
#[derive(Debug)]
pub(crate) struct InFlight<T> {
    map: Mutex<HashMap<Key, Entry<T>>>,
}

#[derive(Debug)]
struct Entry<T> {
    tool: Arc<str>,
    args: ArgsHash,
    answer: watch::Sender<Option<T>>,
}

/// What a call with a key may do.
pub(crate) enum Claim<T: Clone> {
    /// No call with this key is running here: run it, then [`Owner::finish`].
    Owner(Owner<T>),
    /// The same call is running: wait for its answer.
    Wait(Waiter<T>),
    /// A different call with this key is running: refuse.
    Conflict(KeyConflict),
}

impl<T: Clone> InFlight<T> {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            map: Mutex::new(HashMap::new()),
        })
    }

    fn map(&self) -> MutexGuard<'_, HashMap<Key, Entry<T>>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Claims (caller, key) for a call of `tool` with arguments hashing to `args`.
    pub(crate) fn claim(
        self: &Arc<Self>,
        caller: PeerId,
        key: &CallKey,
        tool: &Arc<str>,
        args: ArgsHash,
    ) -> Claim<T> {
        let mut map = self.map();
        let map_key = (caller, key.clone());
        if let Some(entry) = map.get(&map_key) {
            return if entry.tool != *tool {
                Claim::Conflict(KeyConflict::OtherTool)
            } else if entry.args != args {
                Claim::Conflict(KeyConflict::OtherArguments)
            } else {
                Claim::Wait(Waiter {
                    answer: entry.answer.subscribe(),
                })
            };
        }
        let (answer, _) = watch::channel(None);
        map.insert(
            map_key.clone(),
            Entry {
                tool: tool.clone(),
                args,
                answer,
            },
        );
        Claim::Owner(Owner {
            table: self.clone(),
            key: Some(map_key),
        })
    }

    /// Keys in flight.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }
}

/// The running call of a (caller, key). Dropped without [`finish`](Self::finish) (its
/// task panicked), it leaves the table and its waiters learn the call was abandoned.
#[derive(Debug)]
pub(crate) struct Owner<T: Clone> {
    table: Arc<InFlight<T>>,
    key: Option<Key>,
}

impl<T: Clone> Owner<T> {
    /// Hands `answer` to every waiting duplicate and releases the key here.
    pub(crate) fn finish(mut self, answer: T) {
        if let Some(key) = self.key.take() {
            let mut map = self.table.map();
            if let Some(entry) = map.remove(&key) {
                entry.answer.send_replace(Some(answer));
            }
        }
    }
}

impl<T: Clone> Drop for Owner<T> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.table.map().remove(&key);
        }
    }
}

/// A duplicate waiting for its original.
#[derive(Debug)]
pub(crate) struct Waiter<T> {
    answer: watch::Receiver<Option<T>>,
}

impl<T: Clone> Waiter<T> {
    /// The original's answer, or `None` if it was abandoned without one.
    pub(crate) async fn answer(mut self) -> Option<T> {
        match self.answer.wait_for(Option::is_some).await {
            Ok(answer) => answer.clone(),
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: PeerId = PeerId::from_bytes([1; 32]);
    const B: PeerId = PeerId::from_bytes([2; 32]);

    fn key(s: &str) -> CallKey {
        CallKey::new(s).unwrap()
    }

    fn args(n: u64) -> ArgsHash {
        ArgsHash::of_value(&serde_json::json!({ "n": n }))
    }

    #[tokio::test]
    async fn duplicates_wait_and_get_the_owners_answer() {
        let table = InFlight::<String>::new();
        let tool: Arc<str> = "t".into();
        let Claim::Owner(owner) = table.claim(A, &key("key-0001"), &tool, args(1)) else {
            panic!("first call owns the key")
        };
        let Claim::Wait(w1) = table.claim(A, &key("key-0001"), &tool, args(1)) else {
            panic!("duplicate waits")
        };
        let Claim::Wait(w2) = table.claim(A, &key("key-0001"), &tool, args(1)) else {
            panic!("duplicate waits")
        };
        // Another caller's identical key is unrelated.
        assert!(matches!(
            table.claim(B, &key("key-0001"), &tool, args(1)),
            Claim::Owner(_)
        ));
        owner.finish("refused: payment_required".to_owned());
        assert_eq!(
            w1.answer().await.as_deref(),
            Some("refused: payment_required")
        );
        assert_eq!(
            w2.answer().await.as_deref(),
            Some("refused: payment_required")
        );
        assert_eq!(table.len(), 0);
        // Once finished, the key is free here (the ledger answers from now on).
        assert!(matches!(
            table.claim(A, &key("key-0001"), &tool, args(1)),
            Claim::Owner(_)
        ));
    }

    #[test]
    fn another_call_with_a_running_key_is_a_conflict() {
        let table = InFlight::<String>::new();
        let (t, u): (Arc<str>, Arc<str>) = ("t".into(), "u".into());
        let _owner = table.claim(A, &key("key-0002"), &t, args(1));
        assert!(matches!(
            table.claim(A, &key("key-0002"), &u, args(1)),
            Claim::Conflict(KeyConflict::OtherTool)
        ));
        assert!(matches!(
            table.claim(A, &key("key-0002"), &t, args(2)),
            Claim::Conflict(KeyConflict::OtherArguments)
        ));
    }

    #[tokio::test]
    async fn an_abandoned_owner_releases_the_key_and_its_waiters() {
        let table = InFlight::<String>::new();
        let tool: Arc<str> = "t".into();
        let owner = table.claim(A, &key("key-0003"), &tool, args(1));
        let Claim::Wait(waiter) = table.claim(A, &key("key-0003"), &tool, args(1)) else {
            panic!("duplicate waits")
        };
        drop(owner);
        assert_eq!(waiter.answer().await, None);
        assert_eq!(table.len(), 0);
    }
}
