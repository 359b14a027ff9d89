//! The remote addresses `allowed_ips` lets in, and the last one refused, which
//! `bridge status` shows the operator.

use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use brmcp_adapters::wire::UnixTime;

use crate::bridge::{Settings, lock};

/// An address `allowed_ips` refused, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RefusedAddress {
    /// The agent's address.
    pub ip: IpAddr,
    /// When it was last refused.
    pub at: UnixTime,
}

/// The last address refused.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    last: Mutex<Option<RefusedAddress>>,
}

impl Refusals {
    pub(crate) fn last(&self) -> Option<RefusedAddress> {
        *lock(&self.last)
    }

    fn record(&self, ip: IpAddr, at: UnixTime) {
        *lock(&self.last) = Some(RefusedAddress { ip, at });
    }
}

/// Whether `peer` may be served: a loopback address always (local agents are never
/// remote), any other only inside `allowed_ips` when the list is not empty. A refusal
/// is logged and recorded at `now`.
pub(super) fn peer_allowed(
    settings: &Settings,
    refusals: &Refusals,
    peer: Option<SocketAddr>,
    now: UnixTime,
) -> bool {
    let Some(ip) = peer.map(|p| p.ip().to_canonical()) else {
        return true;
    };
    if ip.is_loopback() || settings.allows_ip(ip) {
        return true;
    }
    tracing::warn!(%ip, "agent refused: address not in allowed_ips");
    refusals.record(ip, now);
    false
}
