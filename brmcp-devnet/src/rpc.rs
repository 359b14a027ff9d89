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

use std::sync::Arc;
use std::time::Duration;

use brmcp_adapters::protocol::ATOMS_PER_DCR;
use brmcp_clientrpc::proto;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, mpsc, watch};

use super::Net;
use super::codec::{decode, encode};
use super::envelope::{error_line, go_reencode, json_string, notification_line, response_line};
use super::node::{Log, StreamKind, Sub};
use super::relay;

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

/// The services brclient binds; a method of one of these that the devnet does not
/// implement is an "unknown method", any other service an "unknown service".
const SERVICES: &[&str] = &[
    "VersionService",
    "ChatService",
    "GCService",
    "PostsService",
    "PaymentsService",
    "ResourcesService",
    "ContentService",
];

/// A message read from the socket.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// Undecodable or wrong version: close the connection, no reply.
    Close,
    /// A notification, a response, or something unrecognised: ignored.
    Ignore {
        method: Option<String>,
        id: Option<Value>,
    },
    /// A request.
    Request(Request),
}

/// A request to dispatch.
#[derive(Debug)]
pub(crate) struct Request {
    /// The id as Go re-encodes it in the reply.
    pub(crate) id_json: String,
    pub(crate) id: Value,
    /// The method as sent, suffix included.
    pub(crate) method: String,
    pub(crate) params: Option<Value>,
}

/// Sorts one WebSocket message (see the module docs).
pub(crate) fn classify(data: &[u8]) -> Inbound {
    let mut values = serde_json::Deserializer::from_slice(data).into_iter::<Value>();
    let Some(Ok(Value::Object(obj))) = values.next() else {
        return Inbound::Close;
    };
    // Go decodes into a struct: a field of the wrong type is a decode error.
    match obj.get("jsonrpc") {
        Some(Value::String(v)) if v == "2.0" => {}
        _ => return Inbound::Close,
    }
    let method = match obj.get("method") {
        None | Some(Value::Null) => None,
        Some(Value::String(m)) => Some(m.clone()),
        Some(_) => return Inbound::Close,
    };
    let has_error = match obj.get("error") {
        None | Some(Value::Null) => false,
        Some(Value::Object(e)) => {
            let code_ok = e.get("code").is_none_or(|c| c.is_null() || c.is_i64());
            let msg_ok = e
                .get("message")
                .is_none_or(|m| m.is_null() || m.is_string());
            if !(code_ok && msg_ok) {
                return Inbound::Close;
            }
            true
        }
        Some(_) => return Inbound::Close,
    };
    // json.RawMessage fields: present (even as null) means non-nil.
    let has_result = obj.contains_key("result");
    let id = obj.get("id").filter(|v| !v.is_null()).cloned();
    match (id, method) {
        (Some(id), Some(method)) if !has_error && !has_result => Inbound::Request(Request {
            id_json: go_reencode(&id),
            id,
            method,
            params: obj.get("params").cloned(),
        }),
        (id, method) => Inbound::Ignore { method, id },
    }
}

/// The `Service.Method` part of a method with a stream suffix, as Go's unanchored
/// `(\w+\.\w+)\[(\d+)\]`; the method itself when nothing matches.
pub(crate) fn strip_stream_suffix(method: &str) -> &str {
    let b = method.as_bytes();
    (0..b.len())
        .find_map(|start| suffix_match_at(b, start).map(|end| &method[start..end]))
        .unwrap_or(method)
}

/// Whether `\w+\.\w+\[\d+\]` matches at `start`; the end of the first group if so.
fn suffix_match_at(b: &[u8], start: usize) -> Option<usize> {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let run = |mut i: usize, pred: &dyn Fn(u8) -> bool| {
        while i < b.len() && pred(b[i]) {
            i += 1;
        }
        i
    };
    let i = run(start, &word);
    if i == start || b.get(i) != Some(&b'.') {
        return None;
    }
    let j = run(i + 1, &word);
    if j == i + 1 || b.get(j) != Some(&b'[') {
        return None;
    }
    let k = run(j + 1, &|c: u8| c.is_ascii_digit());
    if k == j + 1 || b.get(k) != Some(&b']') {
        return None;
    }
    Some(j)
}

/// The methods the devnet implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    Version,
    Keepalive,
    UserPublicIdentity,
    UserNick,
    Pm,
    PmStream,
    AckPm,
    KxStream,
    AckKx,
    MediateKx,
    TipUser,
    TipProgress,
    AckTipProgress,
    TipStream,
    AckTipReceived,
    SubscribeToPosts,
    UnsubscribeToPosts,
    PostsStream,
    AckReceivedPost,
    PostsStatusStream,
    AckReceivedPostStatus,
}

/// `PostsService` methods (the client crate names only those it calls).
mod posts_method {
    pub(super) const SUBSCRIBE: &str = "PostsService.SubscribeToPosts";
    pub(super) const UNSUBSCRIBE: &str = "PostsService.UnsubscribeToPosts";
    pub(super) const STREAM: &str = "PostsService.PostsStream";
    pub(super) const ACK: &str = "PostsService.AckReceivedPost";
    pub(super) const STATUS_STREAM: &str = "PostsService.PostsStatusStream";
    pub(super) const STATUS_ACK: &str = "PostsService.AckReceivedPostStatus";
}

/// A request's params, decoded into its method's message.
#[derive(Debug)]
enum Params {
    /// `VersionRequest`, `PublicIdentityReq`: no fields.
    None,
    Keepalive(proto::KeepaliveStreamRequest),
    UserNick(proto::UserNickRequest),
    Pm(proto::PmRequest),
    /// A stream open's `unacked_from`.
    Stream(u64),
    /// An acknowledgement's `sequence_id`.
    Ack(u64),
    TipUser(proto::TipUserRequest),
    MediateKx(proto::MediateKxRequest),
    /// `SubscribeToPosts` (true) or `UnsubscribeToPosts`: the user.
    PostSub(String, bool),
}

impl Method {
    /// Routes `Service.Method` like `ServersMap.SvcForMethod`.
    fn lookup(method: &str) -> Result<Self, &'static str> {
        use brmcp_clientrpc::proto::method as m;
        let Some((svc, _)) = method.split_once('.') else {
            return Err("method is not Service.Method");
        };
        if !SERVICES.contains(&svc) {
            return Err("unknown service");
        }
        Ok(match method {
            m::VERSION => Self::Version,
            m::KEEPALIVE_STREAM => Self::Keepalive,
            m::USER_PUBLIC_IDENTITY => Self::UserPublicIdentity,
            m::USER_NICK => Self::UserNick,
            m::PM => Self::Pm,
            m::PM_STREAM => Self::PmStream,
            m::ACK_RECEIVED_PM => Self::AckPm,
            m::KX_STREAM => Self::KxStream,
            m::ACK_KX_COMPLETED => Self::AckKx,
            m::MEDIATE_KX => Self::MediateKx,
            m::TIP_USER => Self::TipUser,
            m::TIP_PROGRESS => Self::TipProgress,
            m::ACK_TIP_PROGRESS => Self::AckTipProgress,
            m::TIP_STREAM => Self::TipStream,
            m::ACK_TIP_RECEIVED => Self::AckTipReceived,
            posts_method::SUBSCRIBE => Self::SubscribeToPosts,
            posts_method::UNSUBSCRIBE => Self::UnsubscribeToPosts,
            posts_method::STREAM => Self::PostsStream,
            posts_method::ACK => Self::AckReceivedPost,
            posts_method::STATUS_STREAM => Self::PostsStatusStream,
            posts_method::STATUS_ACK => Self::AckReceivedPostStatus,
            _ => return Err("unknown method"),
        })
    }

    /// Decodes `params` into this method's request message.
    fn decode(self, params: Option<&Value>) -> Result<Params, String> {
        Ok(match self {
            Self::Version => decode::<proto::VersionRequest>(params).map(|_| Params::None)?,
            Self::UserPublicIdentity => {
                decode::<proto::PublicIdentityReq>(params).map(|_| Params::None)?
            }
            Self::Keepalive => Params::Keepalive(decode(params)?),
            Self::UserNick => Params::UserNick(decode(params)?),
            Self::Pm => Params::Pm(decode(params)?),
            Self::PmStream => {
                Params::Stream(decode::<proto::PmStreamRequest>(params)?.unacked_from)
            }
            Self::KxStream => {
                Params::Stream(decode::<proto::KxStreamRequest>(params)?.unacked_from)
            }
            Self::TipProgress => {
                Params::Stream(decode::<proto::TipProgressRequest>(params)?.unacked_from)
            }
            Self::TipStream => {
                Params::Stream(decode::<proto::TipStreamRequest>(params)?.unacked_from)
            }
            Self::PostsStream => {
                Params::Stream(decode::<proto::PostsStreamRequest>(params)?.unacked_from)
            }
            Self::PostsStatusStream => {
                Params::Stream(decode::<proto::PostsStatusStreamRequest>(params)?.unacked_from)
            }
            Self::SubscribeToPosts => {
                Params::PostSub(decode::<proto::SubscribeToPostsRequest>(params)?.user, true)
            }
            Self::UnsubscribeToPosts => Params::PostSub(
                decode::<proto::UnsubscribeToPostsRequest>(params)?.user,
                false,
            ),
            Self::AckPm
            | Self::AckKx
            | Self::AckTipProgress
            | Self::AckTipReceived
            | Self::AckReceivedPost
            | Self::AckReceivedPostStatus => {
                Params::Ack(decode::<proto::AckRequest>(params)?.sequence_id)
            }
            Self::TipUser => Params::TipUser(decode(params)?),
            Self::MediateKx => Params::MediateKx(decode(params)?),
        })
    }

    /// The replay log behind a stream or an ack.
    fn kind(self) -> Option<Log> {
        match self {
            Self::PmStream | Self::AckPm => Some(StreamKind::Pm.into()),
            Self::KxStream | Self::AckKx => Some(StreamKind::Kx.into()),
            Self::TipProgress | Self::AckTipProgress => Some(StreamKind::TipProgress.into()),
            Self::TipStream | Self::AckTipReceived => Some(StreamKind::TipReceived.into()),
            Self::PostsStream | Self::AckReceivedPost => Some(Log::Posts),
            Self::PostsStatusStream | Self::AckReceivedPostStatus => Some(Log::PostStatus),
            _ => None,
        }
    }
}

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

/// `PostsService.SubscribeToPosts` / `UnsubscribeToPosts`: as brclient, the user is
/// resolved in the address book (`UserByNick`) first; the author then keeps (or
/// drops) the subscriber, as the author's client does on the request.
fn subscribe_to_posts(net: &Net, node: usize, user: &str, on: bool) -> Result<String, String> {
    let mut st = net.lock();
    let author = st.nodes[node]
        .resolve(user)
        .ok_or_else(|| format!("user {user} not found"))?
        .uid;
    let me = st.nodes[node].uid;
    if let Some(a) = st.node_by_uid(&author) {
        st.nodes[a].set_post_subscriber(me, on);
    }
    Ok(if on {
        encode(&proto::SubscribeToPostsResponse {})
    } else {
        encode(&proto::UnsubscribeToPostsResponse {})
    })
}

/// `ChatService.MediateKX`: as brclient, the mediator is resolved first (it must be
/// a contact), then the target parsed, and a target already a contact is refused
/// with `RequestMediateIdentity`'s text (its missing space included). The answer
/// means the request left. The exchange then completes after the fault dial's
/// `kx_delay_ms` (at once by default), with a
/// `KXCompleted` on both sides, when the mediator is a node that knows the target
/// and both are online; otherwise it never does (the devnet does not queue
/// mediations), as a request a mediator ignores.
fn mediate_kx(net: &Arc<Net>, node: usize, p: &proto::MediateKxRequest) -> Result<String, String> {
    let mut st = net.lock();
    let mediator = st.nodes[node]
        .resolve(&p.mediator)
        .ok_or_else(|| format!("user {} not found", p.mediator))?
        .uid;
    let mut target = [0u8; 32];
    hex::decode_to_slice(&p.target, &mut target)
        .map_err(|e| format!("invalid target: encoding/hex: {e}"))?;
    if st.nodes[node].contact(&target).is_some() {
        return Err(format!(
            "cannot request mediate identity: already havesession with target {}",
            hex::encode(target)
        ));
    }
    let delay = net.dial().kx_delay();
    if delay.is_zero() {
        complete_kx(&mut st, node, mediator, target);
    } else {
        // The exchange runs through the mediator and the target: done after the
        // dial's time, if all three are still reachable then.
        let net2 = net.clone();
        net.spawn(async move {
            tokio::time::sleep(delay).await;
            complete_kx(&mut net2.lock(), node, mediator, target);
        });
    }
    Ok(encode(&proto::MediateKxResponse {}))
}

/// Completes a mediated exchange when the mediator is a node that knows the target
/// and the requester, the mediator and the target are online.
fn complete_kx(st: &mut super::State, node: usize, mediator: [u8; 32], target: [u8; 32]) {
    let reachable =
        |st: &super::State, uid: &[u8; 32]| st.node_by_uid(uid).filter(|&i| st.nodes[i].online);
    if let (Some(m), Some(t)) = (reachable(st, &mediator), reachable(st, &target))
        && st.nodes[node].online
        && t != node
        && st.nodes[m].contact(&target).is_some()
        && st.nodes[node].contact(&target).is_none()
    {
        st.kx(node, t, true);
    }
}

/// Per-PM bytes besides the text in brclient's signed RM blob (header and payload
/// JSON) before base64; with the 512 of `EstimateRoutedRMWireSize`.
const RM_OVERHEAD: u64 = 128;

/// `ChatService.PM`.
async fn pm(net: &Arc<Net>, node: usize, p: proto::PmRequest) -> Result<String, String> {
    let Some(msg) = p.msg else {
        return Err("msg is nil".to_owned());
    };
    let text = msg.message;
    if text.is_empty() {
        return Err("msg is empty".to_owned());
    }
    let to = {
        let st = net.lock();
        let contact = st.nodes[node]
            .resolve(&p.user)
            .ok_or_else(|| format!("user {} not found", p.user))?;
        contact.uid
    };
    // Uncompressed: exact for incompressible text, pessimistic for prose.
    let escaped = json_string(&text).len() as u64;
    let estimate = (escaped + RM_OVERHEAD).div_ceil(3) * 4 + 512;
    let max = net.cfg.max_msg_size;
    if estimate > max {
        return Err(format!(
            "cannot enqueue message rpc.RMPrivateMessage estimated as larger than max \
             message size {estimate} > {max}: RM is too large"
        ));
    }
    relay::send_pm(net, node, to, text).await;
    Ok(encode(&proto::PmResponse {}))
}

/// `PaymentsService.TipUser`, in the order brclient checks: user, gating, amount,
/// attempts, start-up wait, amount conversion. Replies once the tip is scheduled.
async fn tip_user(
    net: &Arc<Net>,
    node: usize,
    p: &proto::TipUserRequest,
) -> Result<String, String> {
    let dcr = p.dcr_amount;
    let max_attempts = p.max_attempts;
    let (payee, gate, started) = {
        let st = net.lock();
        let n = &st.nodes[node];
        let c = n
            .resolve(&p.user)
            .ok_or_else(|| format!("user {} not found", p.user))?;
        (c.uid, n.tip_gate, n.started_at)
    };
    if !gate.allow {
        return Err("remote tip sending not allowed".to_owned());
    }
    if gate.max_dcr > 0.0 && dcr > gate.max_dcr {
        return Err(format!("tip exceeds max limit: {}", gate.max_dcr));
    }
    if dcr <= 0.0 {
        return Err(format!("cannot pay user {dcr:.6} <= 0"));
    }
    if max_attempts <= 0 {
        return Err(format!("maxAttempts {max_attempts} <= 0"));
    }
    let ready = started + net.cfg.tip_warmup;
    tokio::time::sleep_until(ready.into()).await;
    if net.is_shut_down() {
        return Err("client is quitting".to_owned());
    }
    if !dcr.is_finite() {
        return Err("invalid coin amount".to_owned());
    }
    // dcrutil.NewAmount: round half up to atoms; then milliatoms.
    #[expect(clippy::cast_possible_truncation, reason = "saturating, as intended")]
    let atoms = (dcr * ATOMS_PER_DCR as f64 + 0.5) as i64;
    let matoms = atoms.saturating_mul(1000);
    // Kept before the reply, so a tip the client was told is scheduled survives a
    // restart.
    let id = {
        let mut st = net.lock();
        let payer = st.nodes[node].uid;
        st.start_tip(payer, payee, matoms, max_attempts)
    };
    net.spawn(relay::run_tip(net.clone(), id));
    Ok(encode(&proto::TipUserResponse {}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_suffix_rule() {
        assert_eq!(
            strip_stream_suffix("ChatService.PMStream[1]"),
            "ChatService.PMStream"
        );
        assert_eq!(
            strip_stream_suffix("ChatService.PMStream[12345]"),
            "ChatService.PMStream"
        );
        // Go's `%.8x` suffix with a hex letter does not match.
        assert_eq!(
            strip_stream_suffix("ChatService.PMStream[0000000a]"),
            "ChatService.PMStream[0000000a]"
        );
        assert_eq!(
            strip_stream_suffix("ChatService.PMStream[]"),
            "ChatService.PMStream[]"
        );
        assert_eq!(strip_stream_suffix("ChatService.PM"), "ChatService.PM");
        // Unanchored, as Go's FindStringSubmatch.
        assert_eq!(strip_stream_suffix("x y.z[3] tail"), "y.z");
    }

    #[test]
    fn routing_errors() {
        assert_eq!(Method::lookup("ChatService.PM"), Ok(Method::Pm));
        assert_eq!(Method::lookup("NoService.PM"), Err("unknown service"));
        assert_eq!(Method::lookup("GCService.List"), Err("unknown method"));
        assert_eq!(
            Method::lookup("ChatService.PMStream[0000000a]"),
            Err("unknown method")
        );
        assert_eq!(
            Method::lookup("Version"),
            Err("method is not Service.Method")
        );
    }

    #[test]
    fn classification() {
        assert!(matches!(classify(b"not json"), Inbound::Close));
        assert!(matches!(classify(b"[1]"), Inbound::Close));
        assert!(matches!(
            classify(br#"{"jsonrpc":"1.0","id":1,"method":"a.b"}"#),
            Inbound::Close
        ));
        assert!(matches!(
            classify(br#"{"id":1,"method":"a.b"}"#),
            Inbound::Close
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"method":5}"#),
            Inbound::Close
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","method":"a.b","params":{}}"#),
            Inbound::Ignore {
                method: Some(_),
                id: None
            }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":null,"method":"a.b"}"#),
            Inbound::Ignore { .. }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#),
            Inbound::Ignore { .. }
        ));
        // Only the first JSON value counts; trailing garbage is ignored.
        let Inbound::Request(r) =
            classify(b"{\"jsonrpc\":\"2.0\",\"id\":4294967297,\"method\":\"a.b\"} junk")
        else {
            panic!("expected a request");
        };
        assert_eq!(r.id_json, "4294967297");
        assert_eq!(r.method, "a.b");
        assert!(r.params.is_none());
    }
}
