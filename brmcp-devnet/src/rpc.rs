//! JSON-RPC framing and dispatch, as brclient's `clientrpc/jsonrpc` peer does it.
//!
//! * [`classify`] reads the first JSON value of a WebSocket message and sorts it the
//!   way Go's `readLoop` does: a decode error or `jsonrpc` other than `"2.0"` closes
//!   the connection; id + method is a request; anything else is logged and ignored.
//! * [`handle_request`] strips the stream suffix with `(\w+\.\w+)\[(\d+)\]`, routes
//!   `Service.Method` (unknown service or method: -32603), decodes params into the
//!   method's generated message as protojson (-32602 "unable to decode params: ...",
//!   with the text Go's protojson gives), applies injected faults, then
//!   runs a unary handler (reply: its result, or -32603 with its error text) or a
//!   stream (no reply; items are notifications carrying the suffixed method).
//!
//! Framing is in `framing`, routing and params in `methods`, and the methods that
//! reach other users in `peer_methods`.

use std::sync::Arc;
use std::time::Duration;

use brmcp_clientrpc::proto;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};

use super::Net;
use super::codec::encode;
use super::envelope::{error_line, notification_line, response_line};
use super::node::Sub;

mod framing;
mod methods;
mod peer_methods;
pub(crate) use framing::{Inbound, classify};
use framing::{Request, strip_stream_suffix};
use methods::{Method, Params};
use peer_methods::{mediate_kx, pm, subscribe_to_posts, tip_user};

/// JSON-RPC "internal error": every handler error, and unknown service or method.
pub(crate) use brmcp_clientrpc::proto::code::INTERNAL_ERROR as ERR_INTERNAL;
/// JSON-RPC "invalid params": protojson refused the params.
pub(crate) use brmcp_clientrpc::proto::code::INVALID_PARAMS as ERR_INVALID_PARAMS;

/// Requests in flight per connection, streams included (Go `maxConcurrentRequests`):
/// the bound the client keeps to.
pub(crate) use brmcp_clientrpc::MAX_IN_FLIGHT;

/// An acknowledgement the devnet could not keep (it is stopping, or its journal
/// write failed): answered as an error, so the client does not take it as done.
const ERR_ACK_NOT_KEPT: &str = "acknowledgement not kept: client is quitting";

/// A connection as handlers see it.
#[derive(Debug, Clone)]
pub(crate) struct ConnCtx {
    pub(crate) id: u64,
    pub(crate) out: mpsc::UnboundedSender<String>,
    pub(crate) closed: watch::Receiver<bool>,
}

impl ConnCtx {
    fn send(&self, line: String) {
        // A closed connection drops replies, as Go's queueResponse does.
        let _ = self.out.send(line);
    }

    async fn wait_closed(&mut self) {
        let _ = self.closed.wait_for(|c| *c).await;
    }
}

/// Handles one request to its end; `_permit` is its in-flight slot.
pub(crate) async fn handle_request(
    net: Arc<Net>,
    node: usize,
    mut conn: ConnCtx,
    req: Request,
    _permit: OwnedSemaphorePermit,
) {
    let base = strip_stream_suffix(&req.method).to_owned();
    let method = match Method::lookup(&base) {
        Ok(m) => m,
        Err(e) => return conn.send(error_line(&req.id_json, ERR_INTERNAL, e)),
    };
    let params = match method.decode(req.params.as_ref()) {
        Ok(p) => p,
        Err(e) => {
            let msg = format!("unable to decode params: {e}");
            return conn.send(error_line(&req.id_json, ERR_INVALID_PARAMS, &msg));
        }
    };
    let (delay, failure) = {
        let mut st = net.lock();
        let faults = &mut st.nodes[node].faults;
        let delay = faults.delays.get(&base).copied();
        let failure = match faults.fail_next.get_mut(&base) {
            Some((left, text)) if *left > 0 => {
                *left -= 1;
                Some(text.clone())
            }
            _ => None,
        };
        (delay, failure)
    };
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    if let Some(text) = failure {
        return conn.send(error_line(&req.id_json, ERR_INTERNAL, &text));
    }
    match params {
        Params::Keepalive(p) => keepalive(&net, &mut conn, &req.method, &p).await,
        Params::Stream(unacked_from) => {
            let Some(kind) = method.kind() else { return };
            let sub = Sub {
                conn: conn.id,
                kind,
                method: req.method.clone(),
                out: conn.out.clone(),
            };
            net.lock().nodes[node].open_stream(unacked_from, sub);
            // A stream lives until its connection closes; no reply follows.
            conn.wait_closed().await;
        }
        params => {
            let line = match unary(&net, node, method, params).await {
                Ok(result) => response_line(&req.id_json, &result),
                Err(text) => error_line(&req.id_json, ERR_INTERNAL, &text),
            };
            // Stopping: what the request changed may be past the journal's close, so
            // it is not answered (the client asks again of the next run).
            if net.is_shut_down() {
                return;
            }
            conn.send(line);
        }
    }
}

/// `VersionService.KeepaliveStream`: an event every max(interval, floor).
async fn keepalive(
    net: &Net,
    conn: &mut ConnCtx,
    method: &str,
    params: &proto::KeepaliveStreamRequest,
) {
    let ms = u64::try_from(params.interval).unwrap_or(0);
    let interval = Duration::from_millis(ms).max(net.cfg.keepalive_floor);
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = conn.wait_closed() => return,
        }
        let ts = net.clock.now_ms().div_euclid(1000);
        let event = encode(&proto::KeepaliveEvent { timestamp: ts });
        if conn.out.send(notification_line(method, &event)).is_err() {
            return;
        }
    }
}

/// Runs a unary method: its protojson result, or brclient's error text.
async fn unary(net: &Arc<Net>, node: usize, method: Method, p: Params) -> Result<String, String> {
    match (method, p) {
        (Method::Version, _) => {
            let app_name = net.lock().nodes[node].app_name;
            Ok(encode(&proto::VersionResponse {
                app_version: concat!("brmcp-devnet ", env!("CARGO_PKG_VERSION")).to_owned(),
                go_runtime: "devnet".to_owned(),
                app_name: app_name.to_owned(),
            }))
        }
        (Method::UserPublicIdentity, _) => {
            let st = net.lock();
            let n = &st.nodes[node];
            Ok(encode(&proto::PublicIdentity {
                name: n.nick.clone(),
                nick: n.nick.clone(),
                sig_key: n.sig_key.to_vec(),
                identity: n.uid.to_vec(),
                ..proto::PublicIdentity::default()
            }))
        }
        (Method::UserNick, Params::UserNick(p)) => {
            let uid = super::uid::user_nick_uid(&p.uid, &p.hex_uid)?;
            let st = net.lock();
            st.nodes[node]
                .contact(&uid)
                .map(|c| {
                    encode(&proto::UserNickResponse {
                        nick: c.nick.clone(),
                    })
                })
                .ok_or_else(|| format!("user {} not found", hex::encode(uid)))
        }
        (Method::Pm, Params::Pm(p)) => pm(net, node, p).await,
        (Method::TipUser, Params::TipUser(p)) => tip_user(net, node, &p).await,
        (Method::MediateKx, Params::MediateKx(p)) => mediate_kx(net, node, &p),
        (_, Params::PostSub(user, on)) => subscribe_to_posts(net, node, &user, on),
        (_, Params::Ack(sequence_id)) => {
            // Kept before it is answered: a client told its ack went through never
            // gets those items again, as brclient's replay log removes them first.
            if let Some(kind) = method.kind() {
                let mut st = net.lock();
                st.nodes[node].ack(kind, sequence_id);
                if !st.commit() {
                    return Err(ERR_ACK_NOT_KEPT.to_owned());
                }
            }
            Ok(encode(&proto::AckResponse {}))
        }
        _ => Err("unknown method".to_owned()),
    }
}
