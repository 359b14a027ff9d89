//! The owned listener's accept loop, which the bridge's endpoints and `serve`'s
//! operator page both run on.
//!
//! Whether a connection is worth its slot is known only once a request on it carries
//! a credential (an agent's token, the approval secret, a page's session: the site's
//! `credentialed` says), and a connection is counted when it is accepted, before any
//! byte is read. So connections are of two kinds: *proven* ones, which carried a
//! credential, and *unproven* ones, which have not yet. At most
//! [`HttpLimits::max_connections`] are open at once and at most
//! [`HttpLimits::max_unproven_connections`] unproven; a new connection that finds
//! either bound reached drops the oldest unproven connection once that one has had
//! [`HttpLimits::unproven_grace`] to send its request, and waits in the kernel's
//! backlog until then (or, when every slot holds a proven connection, until one
//! ends). So however many connections a local process opens, holds and reopens
//! without a credential, an agent, `bridge stdio`, `approvals` and a logged-in page
//! get a slot within about one grace, have time to prove themselves, and keep it.
//!
//! Each connection must send a request's headers within
//! [`HttpLimits::header_read_timeout`] (idle keep-alive included), and each request's
//! whole body within [`HttpLimits::body_read_timeout`] of its headers, one deadline
//! however the body trickles (answered 408, and the connection closed): so a whole
//! request arrives within the sum of the two, on every route, whoever reads its body.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Notify;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::HttpLimits;
use crate::bridge::lock;

/// Pause after a failed accept (out of descriptors, say) before the next: the error
/// would otherwise repeat in a busy loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `listener` until `stop` is cancelled, each request answered by `answer`
/// (given the local address the connection reached and the peer's); `credentialed`
/// tells, from a request's headers, whether it carries a valid credential, which
/// makes its connection proven (see the module's docs).
pub(crate) async fn run<A, F, C>(
    listener: TcpListener,
    answer: A,
    credentialed: C,
    limits: HttpLimits,
    stop: CancellationToken,
) where
    A: Fn(Option<SocketAddr>, Option<SocketAddr>, Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
    C: Fn(&Parts) -> bool + Clone + Send + Sync + 'static,
{
    let table = Arc::new(Table::new(limits));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            () = table.room() => {}
            () = stop.cancelled() => break,
        }
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
        let slot = Arc::new(table.admit());
        let local = stream.local_addr().ok();
        let site = Site {
            answer: answer.clone(),
            credentialed: credentialed.clone(),
            addrs: (local, Some(peer)),
            limits,
        };
        let stop = stop.clone();
        conns.spawn(serve_connection(stream, site, slot, stop));
        while conns.try_join_next().is_some() {}
    }
    while conns.join_next().await.is_some() {}
}

/// What a connection's requests are answered with.
struct Site<A, C> {
    answer: A,
    credentialed: C,
    addrs: (Option<SocketAddr>, Option<SocketAddr>),
    limits: HttpLimits,
}

async fn serve_connection<A, F, C>(
    stream: tokio::net::TcpStream,
    site: Site<A, C>,
    slot: Arc<Slot>,
    stop: CancellationToken,
) where
    A: Fn(Option<SocketAddr>, Option<SocketAddr>, Request) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response> + Send + 'static,
    C: Fn(&Parts) -> bool + Clone + Send + Sync + 'static,
{
    let dropped = slot.dropped.clone();
    let header_read_timeout = site.limits.header_read_timeout;
    let service = hyper::service::service_fn(move |request: hyper::Request<_>| {
        let (parts, body) = request.into_parts();
        if (site.credentialed)(&parts) {
            slot.prove();
        }
        let (body, expired) = Deadlined::new(Body::new(body), site.limits.body_read_timeout);
        let request = Request::from_parts(parts, Body::new(body));
        let answered = (site.answer)(site.addrs.0, site.addrs.1, request);
        let timeout = site.limits.body_read_timeout;
        async move {
            let response = tokio::select! {
                response = answered => response,
                () = expired.cancelled() => body_timed_out(timeout),
            };
            // A handler that saw the read fail answered in its own way: the answer
            // is the deadline's.
            if expired.is_cancelled() {
                return Ok::<_, Infallible>(body_timed_out(timeout));
            }
            Ok(response)
        }
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
        // Dropped for a newer connection: closed at once, mid-request or not.
        () = dropped.cancelled() => return,
    };
    if let Err(e) = ended {
        tracing::debug!(error = %e, "connection ended");
    }
}

/// The 408 of a request whose body did not arrive within `timeout`; the connection
/// closes after it (what is left of the body cannot be told from a next request).
fn body_timed_out(timeout: Duration) -> Response {
    let mut response = (
        StatusCode::REQUEST_TIMEOUT,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!(
            "request timeout: the request's body did not arrive within {} s of its headers\n",
            timeout.as_secs_f64()
        ),
    )
        .into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A request body whose reads fail once its deadline has passed with the body not
/// whole, cancelling `expired`.
struct Deadlined {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    expired: CancellationToken,
}

impl Deadlined {
    /// `inner` to be read whole within `timeout` from now, and the token cancelled
    /// when it is not.
    fn new(inner: Body, timeout: Duration) -> (Self, CancellationToken) {
        let expired = CancellationToken::new();
        let body = Self {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            expired: expired.clone(),
        };
        (body, expired)
    }
}

impl hyper::body::Body for Deadlined {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        // What has arrived is read first: the deadline bites only a body still owed.
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired.cancel();
            let late = std::io::Error::new(std::io::ErrorKind::TimedOut, "request body timed out");
            return Poll::Ready(Some(Err(axum::Error::new(late))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// The open connections: the unproven ones by age, and the count of proven ones.
struct Table {
    limits: HttpLimits,
    state: std::sync::Mutex<TableState>,
    /// Woken when a connection ends.
    freed: Notify,
}

#[derive(Default)]
struct TableState {
    /// Accepted connections so far: the next one's number (its age).
    accepted: u64,
    /// The unproven connections by number, oldest first: when each was admitted, and
    /// the token that drops it.
    unproven: BTreeMap<u64, (Instant, CancellationToken)>,
    proven: usize,
}

impl TableState {
    fn open(&self) -> usize {
        self.unproven.len() + self.proven
    }
}

/// One open connection's place in the [`Table`]; freed on drop.
struct Slot {
    table: Arc<Table>,
    number: u64,
    proven: AtomicBool,
    /// Cancelled when a newer connection takes the slot.
    dropped: CancellationToken,
}

impl Table {
    fn new(limits: HttpLimits) -> Self {
        Self {
            limits,
            state: std::sync::Mutex::default(),
            freed: Notify::new(),
        }
    }

    fn max_connections(&self) -> usize {
        self.limits.max_connections.max(1)
    }

    fn max_unproven(&self) -> usize {
        self.limits
            .max_unproven_connections
            .clamp(1, self.max_connections())
    }

    fn full(&self, state: &TableState) -> bool {
        state.unproven.len() >= self.max_unproven() || state.open() >= self.max_connections()
    }

    /// When the oldest unproven connection may be dropped for a newer one.
    fn droppable_at(&self, state: &TableState) -> Option<Instant> {
        let (_, (admitted, _)) = state.unproven.first_key_value()?;
        Some(*admitted + self.limits.unproven_grace)
    }

    /// Returns once a new connection can have a slot: a free one, or one an unproven
    /// connection past its grace gives up.
    async fn room(&self) {
        loop {
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let droppable_at = {
                let state = lock(&self.state);
                if !self.full(&state) {
                    return;
                }
                self.droppable_at(&state)
            };
            match droppable_at {
                Some(at) if at <= Instant::now() => return,
                Some(at) => {
                    tokio::select! {
                        () = freed => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => freed.await,
            }
        }
    }

    /// A slot for a connection just accepted, unproven, dropping the oldest unproven
    /// connections past their grace that the bounds require.
    fn admit(self: &Arc<Self>) -> Slot {
        let now = Instant::now();
        let mut state = lock(&self.state);
        while self.full(&state) && self.droppable_at(&state).is_some_and(|at| at <= now) {
            if let Some((_, (_, oldest))) = state.unproven.pop_first() {
                oldest.cancel();
            }
        }
        let number = state.accepted;
        state.accepted += 1;
        let dropped = CancellationToken::new();
        state.unproven.insert(number, (now, dropped.clone()));
        Slot {
            table: self.clone(),
            number,
            proven: AtomicBool::new(false),
            dropped,
        }
    }
}

impl Slot {
    /// The connection carried a credential: no newer connection drops it.
    fn prove(&self) {
        let mut state = lock(&self.table.state);
        if state.unproven.remove(&self.number).is_some() {
            state.proven += 1;
            self.proven.store(true, Ordering::Relaxed);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut state = lock(&self.table.state);
        // A dropped connection left the table when it was dropped.
        if state.unproven.remove(&self.number).is_none() && self.proven.load(Ordering::Relaxed) {
            state.proven -= 1;
        }
        drop(state);
        self.table.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(max: usize, unproven: usize) -> Arc<Table> {
        graced_table(max, unproven, Duration::ZERO)
    }

    fn graced_table(max: usize, unproven: usize, grace: Duration) -> Arc<Table> {
        Arc::new(Table::new(HttpLimits {
            max_connections: max,
            max_unproven_connections: unproven,
            unproven_grace: grace,
            ..HttpLimits::default()
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_connection_waits_until_the_oldest_unproven_had_its_grace() {
        let grace = Duration::from_millis(250);
        let t = graced_table(4, 2, grace);
        let a = t.admit();
        tokio::time::advance(Duration::from_millis(100)).await;
        let b = t.admit();
        // The share is full of connections within their grace: no room yet.
        let waiting = tokio::spawn({
            let t = t.clone();
            async move { t.room().await }
        });
        tokio::time::advance(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "a was dropped within its grace");
        tokio::time::advance(Duration::from_millis(60)).await;
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("room once a is past its grace")
            .unwrap();
        let c = t.admit();
        assert!(a.dropped.is_cancelled(), "the oldest, past its grace");
        assert!(!b.dropped.is_cancelled(), "b is still within its grace");
        assert!(!c.dropped.is_cancelled());
        // A connection that ends makes room at once, whatever the others' ages.
        drop(c);
        tokio::time::timeout(Duration::from_millis(1), t.room())
            .await
            .expect("room after c ended");
    }

    #[test]
    fn unproven_connections_give_way_oldest_first_proven_ones_never() {
        let t = table(4, 2);
        let a = t.admit();
        let b = t.admit();
        a.prove();
        // a is proven: b is the only unproven one, and 2 more fit the share.
        let c = t.admit();
        assert!(!b.dropped.is_cancelled());
        let d = t.admit();
        assert!(b.dropped.is_cancelled(), "the oldest unproven gave way");
        assert!(!c.dropped.is_cancelled() && !a.dropped.is_cancelled());
        c.prove();
        d.prove();
        // Three proven, none unproven: one slot left.
        let e = t.admit();
        let f = t.admit();
        assert!(
            e.dropped.is_cancelled(),
            "the total bound drops the unproven"
        );
        assert!(!f.dropped.is_cancelled());
        f.prove();
        assert_eq!(lock(&t.state).open(), 4);
        for s in [&a, &c, &d, &f] {
            assert!(!s.dropped.is_cancelled());
        }
        drop((b, e));
        assert_eq!(lock(&t.state).proven, 4);
        drop(a);
        assert_eq!(lock(&t.state).open(), 3);
    }

    #[tokio::test]
    async fn a_table_full_of_proven_connections_waits_for_one_to_end() {
        let t = table(2, 2);
        let a = t.admit();
        let b = t.admit();
        a.prove();
        b.prove();
        let waiting = tokio::spawn({
            let t = t.clone();
            async move { t.room().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("room once a connection ends")
            .unwrap();
        drop(b);
    }

    #[tokio::test]
    async fn a_body_owed_past_its_deadline_fails_and_says_so() {
        use futures_util::StreamExt;
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(1);
        let parts = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|part| (part, rx))
        });
        let (body, expired) = Deadlined::new(Body::from_stream(parts), Duration::from_millis(200));
        let mut body = Body::new(body).into_data_stream();
        tx.send(Ok(Bytes::from_static(b"part"))).await.unwrap();
        assert_eq!(body.next().await.unwrap().unwrap(), "part");
        assert!(!expired.is_cancelled());
        let at = Instant::now();
        assert!(body.next().await.unwrap().is_err());
        assert!(expired.is_cancelled());
        assert!(at.elapsed() < Duration::from_secs(5));
        drop(tx);
    }
}
