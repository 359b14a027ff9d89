//! The owned listener's life: bound when the bridge starts with its endpoints
//! enabled, rebound or stopped as the settings change (a remote address only while a
//! token guards it), its idle sessions swept, and its address published for the data
//! directory's other commands.

use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::http::request::Parts;
use tokio_util::sync::CancellationToken;

use super::gate::{credentialed, gate};
use super::listener;
use crate::bridge::presence::Ownership;
use crate::bridge::{BridgeError, Inner, Settings, lock};

/// How long a stopping listener waits for open requests before it drops them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

struct Listener {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
pub(super) struct Listening {
    /// `start` was called: the listener follows the settings.
    owned: bool,
    listener: Option<Listener>,
}

/// Marks the listener as owned and starts it if the settings enable it.
pub(crate) async fn start(inner: &Arc<Inner>) -> Result<(), BridgeError> {
    let mut state = inner.http.state.lock().await;
    state.owned = true;
    if inner.settings().enabled && state.listener.is_none() {
        state.listener = Some(bind(inner).await?);
    }
    Ok(())
}

/// Stops the listener, severing its streams.
pub(crate) async fn stop(inner: &Arc<Inner>) {
    let mut state = inner.http.state.lock().await;
    state.owned = false;
    let listener = state.listener.take();
    drop(state);
    inner.http.sever_all().await;
    if let Some(listener) = listener {
        shutdown(inner, listener).await;
    }
}

/// Brings the listener in line with changed settings.
pub(crate) async fn reconcile(
    inner: &Arc<Inner>,
    old: &Settings,
    new: &Settings,
) -> Result<(), BridgeError> {
    // A removed agent (or a changed token) loses its streams; adding one severs none.
    let agent_gone = old
        .agents
        .iter()
        .any(|a| !new.agents.iter().any(|b| b.token_sha256 == a.token_sha256));
    let token_changed = old.token != new.token || old.enabled != new.enabled || agent_gone;
    if token_changed {
        inner.http.sever_all().await;
    }
    let mut state = inner.http.state.lock().await;
    if !state.owned {
        return Ok(());
    }
    // Every request is checked against the settings of its moment, so a new token needs
    // no new listener: the one running keeps the connections it has queued. Only a
    // remote address left without a token must stop.
    if (!new.enabled || !may_listen(&inner.config, new))
        && let Some(listener) = state.listener.take()
    {
        shutdown(inner, listener).await;
    }
    if new.enabled && state.listener.is_none() {
        state.listener = Some(bind(inner).await?);
    }
    Ok(())
}

/// Whether the configured address may be listened on under `settings`: a loopback one
/// always, a remote one only when allowed and guarded by a token.
fn may_listen(config: &crate::bridge::Config, settings: &Settings) -> bool {
    config.listen.ip().is_loopback() || (config.allow_remote && !settings.token.is_empty())
}

async fn bind(inner: &Arc<Inner>) -> Result<Listener, BridgeError> {
    let config = &inner.config;
    let addr = config.listen;
    if !may_listen(config, &inner.settings()) {
        return Err(BridgeError::RemoteRefused(addr));
    }
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Err(e)
            if e.kind() == std::io::ErrorKind::AddrInUse
                && config.listen_fallback
                && addr.ip().is_loopback() =>
        {
            let ephemeral = SocketAddr::new(addr.ip(), 0);
            tracing::info!(%addr, "listen address taken; binding an ephemeral port");
            tokio::net::TcpListener::bind(ephemeral).await
        }
        bound => bound,
    }
    .map_err(|source| BridgeError::Bind { addr, source })?;
    let bound = listener
        .local_addr()
        .map_err(|source| BridgeError::Bind { addr, source })?;
    let stop = CancellationToken::new();
    let answering = inner.clone();
    let classifying = Arc::downgrade(inner);
    let task = tokio::spawn(listener::run(
        listener,
        move |local, peer, request| gate(answering.clone(), local, peer, request),
        move |parts: &Parts| {
            classifying
                .upgrade()
                .is_some_and(|inner| credentialed(&inner, parts))
        },
        config.http_limits,
        stop.clone(),
    ));
    tokio::spawn(sweep(Arc::downgrade(inner), stop.clone()));
    *lock(&inner.http.addr) = Some(bound);
    if let Some(owner) = lock(&inner.http.owner).as_ref() {
        publish(owner, bound);
    }
    tracing::info!(addr = %bound, "bridge listening");
    Ok(Listener {
        addr: bound,
        stop,
        task,
    })
}

/// Closes idle sessions while the listener runs, even when no new session comes.
async fn sweep(inner: Weak<Inner>, stop: CancellationToken) {
    loop {
        let Some(every) = inner
            .upgrade()
            .map(|i| (i.config.http_limits.session_idle / 4).max(Duration::from_millis(50)))
        else {
            return;
        };
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        let Some(inner) = inner.upgrade() else { return };
        let gone = inner.http.sessions.expire(&inner.config.http_limits);
        inner.http.close_sessions(gone).await;
    }
}

async fn shutdown(inner: &Arc<Inner>, listener: Listener) {
    let Listener {
        addr,
        stop,
        mut task,
    } = listener;
    stop.cancel();
    if tokio::time::timeout(SHUTDOWN_GRACE, &mut task)
        .await
        .is_err()
    {
        task.abort();
    }
    if let Some(owner) = lock(&inner.http.owner).as_ref() {
        owner.withdraw(addr);
    }
    let mut current = lock(&inner.http.addr);
    if *current == Some(addr) {
        *current = None;
    }
}

/// Records `addr` for the data directory's other commands; a failure only costs
/// them finding this bridge, so it is logged, not fatal.
pub(super) fn publish(owner: &Ownership, addr: SocketAddr) {
    if let Err(e) = owner.publish(addr) {
        tracing::warn!(error = %e, "bridge endpoint not recorded");
    }
}
