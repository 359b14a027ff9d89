//! The owned listener's accept loop: at most [`HttpLimits::max_connections`]
//! connections at once (the next waits in the kernel's backlog, holding none of our
//! descriptors), and each must send a request's headers within
//! [`HttpLimits::header_read_timeout`] (idle keep-alive included), so a flood of
//! half-sent headers neither exhausts descriptors nor holds slots for long. The
//! bridge's endpoints and `serve`'s operator page both run on it.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::HttpLimits;

/// Pause after a failed accept (out of descriptors, say) before the next: the error
/// would otherwise repeat in a busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `listener` until `stop` is cancelled, each request answered by `answer`
/// (given the local address the connection reached and the peer's).
pub(crate) async fn run<A, F>(
    listener: TcpListener,
    answer: A,
    limits: HttpLimits,
    stop: CancellationToken,
) where
    A: Fn(Option<SocketAddr>, Option<SocketAddr>, Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut conns = JoinSet::new();
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot,
            () = stop.cancelled() => break,
        };
        let Ok(slot) = slot else { break };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = stop.cancelled() => break,
        };
        let local = stream.local_addr().ok();
        let answer = answer.clone();
        let stop = stop.clone();
        conns.spawn(async move {
            let _slot = slot;
            let addrs = (local, Some(peer));
            serve_connection(stream, addrs, answer, limits.header_read_timeout, stop).await;
        });
        while conns.try_join_next().is_some() {}
    }
    while conns.join_next().await.is_some() {}
}

async fn serve_connection<A, F>(
    stream: tokio::net::TcpStream,
    (local, peer): (Option<SocketAddr>, Option<SocketAddr>),
    answer: A,
    header_read_timeout: Duration,
    stop: CancellationToken,
) where
    A: Fn(Option<SocketAddr>, Option<SocketAddr>, Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
{
    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
        let answered = answer(local, peer, request.map(Body::new));
        async move { Ok::<_, Infallible>(answered.await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let ended = tokio::select! {
        ended = conn.as_mut() => ended,
        () = stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended");
    }
}
