//! The unary methods that reach other users through the relay: PMs, tips, mediated
//! key exchanges and post subscriptions, each checked in the order brclient checks.

use std::sync::Arc;

use brmcp_adapters::protocol::ATOMS_PER_DCR;
use brmcp_clientrpc::proto;

use crate::codec::encode;
use crate::envelope::json_string;
use crate::{Net, State, relay};

/// `PostsService.SubscribeToPosts` / `UnsubscribeToPosts`: as brclient, the user is
/// resolved in the address book (`UserByNick`) first; the author then keeps (or
/// drops) the subscriber, as the author's client does on the request.
pub(super) fn subscribe_to_posts(
    net: &Net,
    node: usize,
    user: &str,
    on: bool,
) -> Result<String, String> {
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
pub(super) fn mediate_kx(
    net: &Arc<Net>,
    node: usize,
    p: &proto::MediateKxRequest,
) -> Result<String, String> {
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
fn complete_kx(st: &mut State, node: usize, mediator: [u8; 32], target: [u8; 32]) {
    let reachable =
        |st: &State, uid: &[u8; 32]| st.node_by_uid(uid).filter(|&i| st.nodes[i].online);
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
pub(super) async fn pm(net: &Arc<Net>, node: usize, p: proto::PmRequest) -> Result<String, String> {
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
pub(super) async fn tip_user(
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
