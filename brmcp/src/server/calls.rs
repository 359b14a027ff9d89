//! Keyed calls in flight in this process: the first call with a (caller, key) owns it,
//! and duplicates arriving while it runs wait for it and receive its exact answer,
//! refusals included (the Go harness handed them an empty success, §4.10.1).
//!
//! The table only spans the owner's run. Before it, and after it, the ledger holds the
//! key: [`Billing::held`](super::Billing::held) answers a duplicate of a finished call,
//! across restarts. The owner publishes its answer and leaves the table under one lock,
//! so a duplicate either waits and gets the answer, or arrives after and finds the
//! ledger's record.
//!
//! A duplicate is the same call (its caller's key): a caller that explicitly cancels
//! the waiting duplicate (`notifications/cancelled`, say a bridge resuming the call
//! after its restart, whose agent then cancelled it) cancels the original's run, as
//! cancelling the original would. Its session ending does not: a resumed request's
//! session may be reset while the paid original still runs for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use brmcp_adapters::PeerId;
use brmcp_adapters::wire::SessionId;
use rmcp::model::RequestId;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

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
    /// The owner's request's cancellation, which its run watches.
    cancel: CancellationToken,
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

    /// Claims (caller, key) for a call of `tool` with arguments hashing to `args`,
    /// whose run, if it owns the key, watches `cancel`.
    pub(crate) fn claim(
        self: &Arc<Self>,
        caller: PeerId,
        key: &CallKey,
        (tool, args): (&Arc<str>, ArgsHash),
        cancel: &CancellationToken,
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
                    owner: entry.cancel.clone(),
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
                cancel: cancel.clone(),
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
    owner: CancellationToken,
}

impl<T: Clone> Waiter<T> {
    /// The original's cancellation: what cancelling this duplicate cancels.
    pub(crate) const fn owner_cancel(&self) -> &CancellationToken {
        &self.owner
    }

    /// The original's answer, or `None` if it was abandoned without one.
    pub(crate) async fn answer(mut self) -> Option<T> {
        match self.answer.wait_for(Option::is_some).await {
            Ok(answer) => answer.clone(),
            Err(_) => None,
        }
    }
}

/// A request: its session and its id there.
pub(crate) type Origin = (SessionId, RequestId);

/// The duplicates waiting, by request, with their original's cancellation: what an
/// explicit cancellation of one cancels.
#[derive(Debug, Default)]
pub(crate) struct Waiting {
    map: Mutex<HashMap<Origin, CancellationToken>>,
}

impl Waiting {
    fn map(&self) -> MutexGuard<'_, HashMap<Origin, CancellationToken>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers request `origin`, a duplicate waiting for the run `owner` cancels,
    /// until the guard drops.
    pub(crate) fn register<'a>(
        &'a self,
        origin: &Origin,
        owner: &CancellationToken,
    ) -> Registered<'a> {
        self.map().insert(origin.clone(), owner.clone());
        Registered {
            waiting: self,
            origin: origin.clone(),
        }
    }

    /// The caller cancelled request `origin`: if it is a waiting duplicate, its
    /// original's run is cancelled. Whether it was one.
    pub(crate) fn cancel(&self, origin: &Origin) -> bool {
        let owner = self.map().remove(origin);
        owner.is_some_and(|owner| {
            owner.cancel();
            true
        })
    }
}

/// A waiting duplicate's registration, ended when dropped.
pub(crate) struct Registered<'a> {
    waiting: &'a Waiting,
    origin: Origin,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.waiting.map().remove(&self.origin);
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
        let Claim::Owner(owner) = table.claim(
            A,
            &key("key-0001"),
            (&tool, args(1)),
            &CancellationToken::new(),
        ) else {
            panic!("first call owns the key")
        };
        let Claim::Wait(w1) = table.claim(
            A,
            &key("key-0001"),
            (&tool, args(1)),
            &CancellationToken::new(),
        ) else {
            panic!("duplicate waits")
        };
        let Claim::Wait(w2) = table.claim(
            A,
            &key("key-0001"),
            (&tool, args(1)),
            &CancellationToken::new(),
        ) else {
            panic!("duplicate waits")
        };
        // Another caller's identical key is unrelated.
        assert!(matches!(
            table.claim(
                B,
                &key("key-0001"),
                (&tool, args(1)),
                &CancellationToken::new()
            ),
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
            table.claim(
                A,
                &key("key-0001"),
                (&tool, args(1)),
                &CancellationToken::new()
            ),
            Claim::Owner(_)
        ));
    }

    #[test]
    fn another_call_with_a_running_key_is_a_conflict() {
        let table = InFlight::<String>::new();
        let (t, u): (Arc<str>, Arc<str>) = ("t".into(), "u".into());
        let _owner = table.claim(
            A,
            &key("key-0002"),
            (&t, args(1)),
            &CancellationToken::new(),
        );
        assert!(matches!(
            table.claim(
                A,
                &key("key-0002"),
                (&u, args(1)),
                &CancellationToken::new()
            ),
            Claim::Conflict(KeyConflict::OtherTool)
        ));
        assert!(matches!(
            table.claim(
                A,
                &key("key-0002"),
                (&t, args(2)),
                &CancellationToken::new()
            ),
            Claim::Conflict(KeyConflict::OtherArguments)
        ));
    }

    #[test]
    fn cancelling_a_waiting_duplicate_cancels_its_original_and_nothing_else() {
        let table = InFlight::<String>::new();
        let waiting = Waiting::default();
        let tool: Arc<str> = "t".into();
        let (owner_ct, other_ct) = (CancellationToken::new(), CancellationToken::new());
        let _owner = table.claim(A, &key("key-0004"), (&tool, args(1)), &owner_ct);
        let _other = table.claim(A, &key("key-0005"), (&tool, args(1)), &other_ct);
        let Claim::Wait(waiter) = table.claim(
            A,
            &key("key-0004"),
            (&tool, args(1)),
            &CancellationToken::new(),
        ) else {
            panic!("duplicate waits")
        };
        let sid = SessionId::from_entropy([1; 8]);
        let origin: Origin = (sid, RequestId::Number(7));
        // Registered while waiting; once it stops waiting, its cancellation is nobody's.
        drop(waiting.register(&origin, waiter.owner_cancel()));
        assert!(!waiting.cancel(&origin));
        assert!(!owner_ct.is_cancelled());
        let registered = waiting.register(&origin, waiter.owner_cancel());
        // Another request's cancellation is not this duplicate's.
        assert!(!waiting.cancel(&(sid, RequestId::Number(8))));
        assert!(waiting.cancel(&origin));
        assert!(owner_ct.is_cancelled());
        assert!(!other_ct.is_cancelled());
        drop(registered);
    }

    #[tokio::test]
    async fn an_abandoned_owner_releases_the_key_and_its_waiters() {
        let table = InFlight::<String>::new();
        let tool: Arc<str> = "t".into();
        let owner = table.claim(
            A,
            &key("key-0003"),
            (&tool, args(1)),
            &CancellationToken::new(),
        );
        let Claim::Wait(waiter) = table.claim(
            A,
            &key("key-0003"),
            (&tool, args(1)),
            &CancellationToken::new(),
        ) else {
            panic!("duplicate waits")
        };
        drop(owner);
        assert_eq!(waiter.answer().await, None);
        assert_eq!(table.len(), 0);
    }
}
