//! The callers to tell when what the harness serves changes at run time (its
//! [`DynamicTools`](super::DynamicTools), its [`Catalog`](super::Catalog)): the session
//! of each caller that listed or initialized, one per caller (the latest), so bounded
//! by the callers the allow gate admits. A session that cannot be told (closed) is
//! forgotten. Each caller is told at most once per [`LIST_CHANGED_INTERVAL`] of each
//! kind of change: the changes within it are one notification.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use brmcp_adapters::PeerId;
use rmcp::service::RoleServer;
use rmcp::{Peer, ServiceError};
use tokio::sync::watch;

/// The least time between two notifications of one kind to a caller: each is a PM the
/// operator's client sends, and what changes often (several upstreams re-listing) is
/// told once per interval, the latest state.
pub(crate) const LIST_CHANGED_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// What changed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Changed {
    /// The tools.
    Tools,
    /// The catalog, which offers (resources, prompts).
    Catalog((bool, bool)),
}

impl Changed {
    async fn notify(self, peer: &Peer<RoleServer>) -> Result<(), ServiceError> {
        match self {
            Self::Tools => peer.notify_tool_list_changed().await,
            Self::Catalog((resources, prompts)) => {
                if resources {
                    peer.notify_resource_list_changed().await?;
                }
                if prompts {
                    peer.notify_prompt_list_changed().await?;
                }
                Ok(())
            }
        }
    }
}

/// A caller to tell.
#[derive(Default)]
struct Listener {
    /// Its latest session; `None` once that could not be told (parked or closed),
    /// so a parked session's service is not kept alive by this registry.
    peer: Option<Peer<RoleServer>>,
    /// The tools changed while it could not be told.
    missed_tools: bool,
    /// The catalog changed while it could not be told (what it offers).
    missed_catalog: Option<(bool, bool)>,
}

impl Listener {
    /// Marks `what` as missed.
    fn miss(&mut self, what: Changed) {
        match what {
            Changed::Tools => self.missed_tools = true,
            Changed::Catalog(offers) => self.missed_catalog = Some(offers),
        }
    }

    /// The changes it missed, forgotten here.
    fn take_missed(&mut self) -> Vec<Changed> {
        let tools = std::mem::take(&mut self.missed_tools).then_some(Changed::Tools);
        let catalog = self.missed_catalog.take().map(Changed::Catalog);
        tools.into_iter().chain(catalog).collect()
    }
}

/// The sessions to tell, by caller. A caller whose session could not be told (a
/// parked session has no service) keeps its entry without the session and is told
/// what it missed when it listens again: a revived session replays `initialized`,
/// and a new session initializes, so either listens.
#[derive(Default)]
pub(crate) struct Listeners(Mutex<HashMap<PeerId, Listener>>);

impl Listeners {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PeerId, Listener>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `peer`, `caller`'s latest session, to be told; tells it at once what the
    /// caller missed while it had no session to tell. Sessions of other callers that
    /// have ended (or were parked) are let go.
    pub(crate) fn listen(&self, caller: PeerId, peer: &Peer<RoleServer>) {
        let missed = {
            let mut listeners = self.lock();
            for listener in listeners.values_mut() {
                if listener
                    .peer
                    .as_ref()
                    .is_some_and(Peer::is_transport_closed)
                {
                    listener.peer = None;
                }
            }
            let listener = listeners.entry(caller).or_default();
            listener.peer = Some(peer.clone());
            listener.take_missed()
        };
        if !missed.is_empty() {
            let peer = peer.clone();
            tokio::spawn(async move {
                for what in missed {
                    if let Err(e) = what.notify(&peer).await {
                        tracing::debug!(%caller, error = %e, "missed list_changed not sent");
                    }
                }
            });
        }
    }

    /// Tells every listener of each change `changes` signals, as `what`, until the
    /// listeners are gone (the harness with them).
    pub(crate) fn notify_on(self: &Arc<Self>, changes: watch::Receiver<u64>, what: Changed) {
        tokio::spawn(notify_changes(changes, Arc::downgrade(self), what));
    }

    /// The sessions to tell of `what` now; the callers without one have missed it.
    fn to_tell(&self, what: Changed) -> Vec<(PeerId, Peer<RoleServer>)> {
        let mut listeners = self.lock();
        let mut out = Vec::new();
        for (caller, listener) in listeners.iter_mut() {
            match &listener.peer {
                Some(peer) if !peer.is_transport_closed() => out.push((*caller, peer.clone())),
                _ => {
                    listener.peer = None;
                    listener.miss(what);
                }
            }
        }
        out
    }

    /// `caller`'s session could not be told `what`: it is told when it listens again;
    /// an ended session is let go.
    fn missed(&self, caller: PeerId, what: Changed) {
        let mut listeners = self.lock();
        if let Some(listener) = listeners.get_mut(&caller) {
            if listener
                .peer
                .as_ref()
                .is_some_and(Peer::is_transport_closed)
            {
                listener.peer = None;
            }
            listener.miss(what);
        }
    }
}

async fn notify_changes(
    mut changes: watch::Receiver<u64>,
    listeners: Weak<Listeners>,
    what: Changed,
) {
    while changes.changed().await.is_ok() {
        let Some(listeners) = listeners.upgrade() else {
            return;
        };
        for (caller, peer) in listeners.to_tell(what) {
            if let Err(e) = what.notify(&peer).await {
                tracing::debug!(%caller, error = %e, "list_changed not sent");
                listeners.missed(caller, what);
            }
        }
        drop(listeners);
        // Changes meanwhile are marked on the watch: the next round tells them at once.
        tokio::time::sleep(LIST_CHANGED_INTERVAL).await;
    }
}
