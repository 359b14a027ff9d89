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

/// The sessions to tell.
#[derive(Default)]
pub(crate) struct Listeners(Mutex<HashMap<PeerId, Peer<RoleServer>>>);

impl Listeners {
    /// Keeps `peer`, `caller`'s latest session, to be told.
    pub(crate) fn listen(&self, caller: PeerId, peer: &Peer<RoleServer>) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(caller, peer.clone());
    }

    /// Tells every listener of each change `changes` signals, as `what`, until the
    /// listeners are gone (the harness with them).
    pub(crate) fn notify_on(self: &Arc<Self>, changes: watch::Receiver<u64>, what: Changed) {
        tokio::spawn(notify_changes(changes, Arc::downgrade(self), what));
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
        let peers: Vec<(PeerId, Peer<RoleServer>)> = listeners
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(caller, peer)| (*caller, peer.clone()))
            .collect();
        for (caller, peer) in peers {
            if let Err(e) = what.notify(&peer).await {
                tracing::debug!(%caller, error = %e, "list_changed not sent");
                listeners
                    .0
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&caller);
            }
        }
        // Changes meanwhile are marked on the watch: the next round tells them at once.
        tokio::time::sleep(LIST_CHANGED_INTERVAL).await;
    }
}
