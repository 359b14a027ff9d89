//! The host's connection loop: connect, check the identity, open and keep each stream,
//! and hand every stream item to its handler before the item is acknowledged.

use super::*;

/// Keeps a connection up: connect, check the identity, open the streams, wait for the
/// end, back off.
pub(super) async fn supervise(
    inner: Arc<Inner>,
    runtimes: Vec<StreamEntry>,
    identity: Option<IdentityCheck>,
    mut first: Option<oneshot::Sender<Result<(), ClientRpcError>>>,
) {
    let config = &inner.config;
    let mut shutdown = inner.shutdown.subscribe();
    let mut delay = config.backoff_initial;
    let mut number = 0u64;
    // When the last connection was lost: the reconnect's log line says how long it
    // was down.
    let mut lost_at: Option<std::time::Instant> = None;
    loop {
        if *shutdown.borrow_and_update() {
            break;
        }
        number += 1;
        let attempt = tokio::select! {
            attempt = open(config, identity.as_ref(), number) => attempt,
            _ = shutdown.changed() => break,
        };
        match attempt {
            Ok(conn) => {
                delay = config.backoff_initial;
                {
                    let mut status = lock(&inner.status);
                    status.connects += 1;
                    status.last_error = None;
                }
                for (runtime, tx) in &runtimes {
                    tokio::spawn(keep_stream(
                        inner.clone(),
                        conn.clone(),
                        runtime.clone(),
                        tx.clone(),
                    ));
                }
                inner.current.send_replace(Some(conn.clone()));
                match lost_at.take() {
                    Some(lost) => tracing::info!(
                        url = %config.url,
                        conn = conn.number(),
                        down_ms = lost.elapsed().as_millis(),
                        "clientrpc reconnected"
                    ),
                    None => {
                        tracing::info!(url = %config.url, conn = conn.number(), "clientrpc connected");
                    }
                }
                if let Some(first) = first.take() {
                    let _ = first.send(Ok(()));
                }
                let closing = tokio::select! {
                    // `close` also closes the connection itself, which may be seen first.
                    () = conn.closed() => *shutdown.borrow(),
                    _ = shutdown.changed() => {
                        conn.close("host closed");
                        true
                    }
                };
                inner.current.send_if_modified(|current| {
                    let same = current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &conn));
                    if same {
                        *current = None;
                    }
                    same
                });
                let why = conn.close_reason().unwrap_or_default();
                if closing {
                    tracing::info!(url = %config.url, "clientrpc connection closed");
                } else {
                    tracing::warn!(url = %config.url, %why, "clientrpc connection lost");
                    lost_at = Some(std::time::Instant::now());
                }
                lock(&inner.status).last_error = Some(format!("connection lost: {why}"));
            }
            Err(e) => {
                tracing::warn!(url = %config.url, error = %e, ?delay, "clientrpc connect failed");
                lock(&inner.status).last_error = Some(e.to_string());
                if let Some(first) = first.take() {
                    // Not started after all: the streams' queues close with
                    // `runtimes`, which ends their consumers; `connect` may be retried.
                    drop(runtimes);
                    inner.started.store(false, Relaxed);
                    let _ = first.send(Err(e));
                    return;
                }
            }
        }
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = shutdown.changed() => break,
        }
        delay = delay.saturating_mul(2).min(config.backoff_max);
    }
    if let Some(conn) = inner.current.send_replace(None) {
        conn.close("host closed");
    }
}

/// One connection, its client's identity checked.
async fn open(
    config: &ClientRpcConfig,
    identity: Option<&IdentityCheck>,
    number: u64,
) -> Result<Arc<Conn>, ClientRpcError> {
    let ws = conn::connect(config).await?;
    let conn = Conn::spawn(ws, number, config);
    if let Some(check) = identity {
        let checked = check_identity(&conn, check.clone()).await;
        if let Err(e) = checked {
            conn.close("identity refused");
            return Err(e);
        }
    }
    Ok(conn)
}

async fn check_identity(conn: &Conn, check: IdentityCheck) -> Result<(), ClientRpcError> {
    let value = match conn
        .call(
            method::USER_PUBLIC_IDENTITY,
            &proto::protojson(&PublicIdentityReq {}),
        )
        .await
    {
        Ok(value) => value,
        Err(CallError::Failed(e)) => return Err(e),
        Err(CallError::NotSent) => return Err(ClientRpcError::ConnectionLost),
    };
    let me: PublicIdentity = proto::from_json(&value, Unknown::Ignore)
        .map_err(|e| ClientRpcError::Protocol(format!("UserPublicIdentity result: {e}")))?;
    let Some(peer) = me.peer_id() else {
        return Err(ClientRpcError::Protocol(
            "UserPublicIdentity result: no 32-byte identity".into(),
        ));
    };
    tokio::task::spawn_blocking(move || check(peer))
        .await
        .map_err(|e| ClientRpcError::Identity(e.to_string()))?
        .map_err(|e| ClientRpcError::Identity(e.to_string()))
}

/// Keeps one stream open on `conn`: a stream the server ends or refuses is reopened
/// after a backoff (the server replays what it has not cleared); the connection and the
/// other streams are untouched. Ends with the connection.
async fn keep_stream(
    inner: Arc<Inner>,
    conn: Arc<Conn>,
    runtime: Arc<StreamRuntime>,
    tx: StreamSink,
) {
    let kind = runtime.kind;
    let config = &inner.config;
    let mut delay = config.backoff_initial;
    loop {
        // From 0, always: the server replays only what it has not cleared, and after
        // its ids were reset a later start would skip every new item.
        let opened = match kind {
            StreamKind::Pm => {
                conn.open_stream(
                    kind.method(),
                    &proto::protojson(&PmStreamRequest::default()),
                    tx.clone(),
                )
                .await
            }
            StreamKind::TipReceived => {
                conn.open_stream(
                    kind.method(),
                    &proto::protojson(&TipStreamRequest::default()),
                    tx.clone(),
                )
                .await
            }
            StreamKind::TipProgress => {
                conn.open_stream(
                    kind.method(),
                    &proto::protojson(&TipProgressRequest::default()),
                    tx.clone(),
                )
                .await
            }
            StreamKind::Kx => {
                conn.open_stream(
                    kind.method(),
                    &proto::protojson(&KxStreamRequest::default()),
                    tx.clone(),
                )
                .await
            }
            StreamKind::Posts => {
                conn.open_stream(
                    kind.method(),
                    &proto::protojson(&PostsStreamRequest::default()),
                    tx.clone(),
                )
                .await
            }
        };
        let Ok(ended) = opened else {
            return;
        };
        let opened = Instant::now();
        // Dropped unanswered when the connection closes.
        let Ok(why) = ended.await else { return };
        if opened.elapsed() >= config.backoff_max {
            delay = config.backoff_initial;
        }
        tracing::warn!(stream = kind.name(), %why, ?delay, "clientrpc stream ended; reopening it");
        lock(&inner.status).last_stream_error = Some(format!("{}: {why}", kind.method()));
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = conn.closed() => return,
        }
        delay = delay.saturating_mul(2).min(config.backoff_max);
    }
}

/// Who records a stream's items.
pub(super) enum Handler {
    Pm(Arc<dyn DynPm>),
    Tip(Arc<dyn DynTip>),
    Kx(Arc<dyn DynKx>),
    Post(Arc<dyn DynPost>),
    /// TipProgress: waiting tips take their events; the rest go to the handler.
    Progress(Option<Arc<dyn DynResult>>),
}

impl Handler {
    async fn cleared(&self, up_to: u64) -> Result<(), BoxError> {
        match self {
            Self::Pm(h) => h.cleared(up_to).await,
            Self::Tip(h) => h.cleared(up_to).await,
            Self::Kx(_) | Self::Post(_) | Self::Progress(_) => Ok(()),
        }
    }
}

/// One decoded stream item.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Item {
    Pm(ReceivedPm),
    Tip(ReceivedTip),
    Progress(TipProgressEvent),
    Kx(KxCompleted),
    Post(ReceivedPost),
}

impl Item {
    /// Decodes one item, ignoring fields a newer server adds; an item whose user id is
    /// not 32 bytes is refused.
    pub(crate) fn decode(kind: StreamKind, params: &Value) -> Result<Self, serde_json::Error> {
        Ok(match kind {
            StreamKind::Pm => Self::Pm(ReceivedPm::deserialize(params)?),
            StreamKind::TipReceived => Self::Tip(ReceivedTip::deserialize(params)?),
            StreamKind::TipProgress => Self::Progress(TipProgressEvent::deserialize(params)?),
            StreamKind::Kx => Self::Kx(KxCompleted::deserialize(params)?),
            StreamKind::Posts => Self::Post(ReceivedPost::deserialize(params)?),
        })
    }

    pub(crate) const fn sequence_id(&self) -> u64 {
        match self {
            Self::Pm(pm) => pm.sequence_id,
            Self::Tip(tip) => tip.sequence_id,
            Self::Progress(event) => event.sequence_id,
            Self::Kx(kx) => kx.sequence_id,
            Self::Post(post) => post.sequence_id,
        }
    }
}

/// Consumes one stream's items, from every connection, in arrival order: record each
/// (the handler), then acknowledge as far as [`AckWindow`] allows.
pub(super) async fn consume(
    inner: Arc<Inner>,
    runtime: Arc<StreamRuntime>,
    mut rx: StreamQueue,
    handler: Handler,
) {
    let kind = runtime.kind;
    let settle = inner.config.ack_settle;
    let mut shutdown = inner.shutdown.subscribe();
    let mut queue: VecDeque<(Item, Instant)> = VecDeque::new();
    let mut open = true;
    // After a failed acknowledgement: not before then.
    let mut ack_after: Option<Instant> = None;
    let mut ack_delay = inner.config.backoff_initial;
    let take = |queue: &mut VecDeque<(Item, Instant)>, rx: &StreamQueue, (params, at): Delivery| {
        match Item::decode(kind, &params) {
            Ok(item) => {
                lock(&runtime.window).received(item.sequence_id());
                queue.push_back((item, at));
            }
            // Not recorded, so never waited for: a later acknowledgement clears it.
            Err(e) => {
                rx.done();
                inner.stream_moved.send_modify(|n| *n += 1);
                tracing::warn!(stream = kind.name(), error = %e, "undecodable stream item");
            }
        }
    };
    loop {
        // Everything delivered so far is known to the window before it acknowledges.
        loop {
            match rx.rx.try_recv() {
                Ok(delivery) => take(&mut queue, &rx, delivery),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            }
        }
        let now = Instant::now();
        let (ack, due) = lock(&runtime.window).ackable(now, settle);
        if let Some(id) = ack
            && ack_after.is_none_or(|t| t <= now)
        {
            match inner
                .request::<_, AckResponse>(kind.ack_method(), &AckRequest { sequence_id: id })
                .await
            {
                Ok(AckResponse {}) => {
                    lock(&runtime.window).acked(id);
                    inner.stream_moved.send_modify(|n| *n += 1);
                    ack_after = None;
                    ack_delay = inner.config.backoff_initial;
                    if let Err(e) = handler.cleared(id).await {
                        tracing::warn!(stream = kind.name(), id, error = %e, "clearing not recorded");
                    }
                }
                Err(ClientRpcError::Closed) => return,
                Err(e) => {
                    tracing::warn!(stream = kind.name(), id, error = %e, ?ack_delay, "ack failed");
                    ack_after = Some(Instant::now() + ack_delay);
                    ack_delay = ack_delay.saturating_mul(2).min(inner.config.backoff_max);
                }
            }
            continue;
        }
        if let Some((item, at)) = queue.pop_front() {
            let id = item.sequence_id();
            if !record(&inner, &handler, item, kind, &mut shutdown).await {
                return;
            }
            lock(&runtime.window).recorded(id, at);
            rx.done();
            inner.stream_moved.send_modify(|n| *n += 1);
            continue;
        }
        if !open {
            return;
        }
        let wake = match (due, ack.and(ack_after)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            delivery = rx.rx.recv() => match delivery {
                Some(delivery) => take(&mut queue, &rx, delivery),
                None => open = false,
            },
            () = sleep_until_opt(wake) => {}
            () = until_true(&mut shutdown) => return,
        }
    }
}

/// Runs the handler until it succeeds; `false` when the host shut down first.
async fn record(
    inner: &Inner,
    handler: &Handler,
    item: Item,
    kind: StreamKind,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    let id = item.sequence_id();
    // Every terminal outcome goes to the results handler, the one a waiting tip took
    // too: it is acknowledged only once recorded, so a crash before the payer records
    // it cannot lose it.
    let results = match (handler, &item) {
        (Handler::Progress(results), Item::Progress(event)) => {
            inner.on_tip_progress(event);
            match results {
                Some(results) if event.is_terminal() => Some(results),
                _ => return true,
            }
        }
        _ => None,
    };
    let mut delay = inner.config.backoff_initial;
    loop {
        let result = match (handler, &item, results) {
            (Handler::Pm(h), Item::Pm(pm), _) => h.call(pm.clone()).await,
            (Handler::Tip(h), Item::Tip(tip), _) => h.call(tip.clone()).await,
            (Handler::Kx(h), Item::Kx(kx), _) => h.call(kx.clone()).await,
            (Handler::Post(h), Item::Post(post), _) => h.call(post.clone()).await,
            (_, Item::Progress(event), Some(results)) => results.call(event.clone()).await,
            _ => Ok(()),
        };
        let Err(e) = result else { return true };
        tracing::warn!(stream = kind.name(), id, error = %e, ?delay, "handler failed; retrying");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = until_true(shutdown) => return false,
        }
        delay = delay.saturating_mul(2).min(inner.config.backoff_max);
    }
}
