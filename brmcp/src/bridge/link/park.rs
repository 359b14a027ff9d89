//! The link's session parked while idle, as the router parks a
//! [`Client`](brmcp_adapters::Client)'s (`RouterConfig::client_park_after`; the
//! bridge's router sets [`LINK_PARK_AFTER`]): an rmcp
//! service costs about 23 KB even when idle, so a bridge linked to many bots holds
//! little for the idle ones.
//!
//! The router asks the link's [`LinkSlot`] to park a session idle on the wire; the link
//! parks it only while no agent's request holds its [`Conn`] (checked under the
//! `current` lock, which every use takes to clone it). Parked, it keeps the sid, the
//! bot's `initialize` result and the tool cache. [`BotLink::running`] (every use) or
//! the bot's request or notification on the session revives it on the router's task:
//! `serve_directly` (no handshake; the bot still holds the session), under the next
//! epoch's ids, saved before the revived service sends anything (see `tap`), so a late
//! answer to an earlier service is never taken for a request of the new one. Past the
//! last epoch the session stays running. A session the bot lost while parked is
//! recovered as any lost session: the revived service repeats the first `initialize`
//! (on a session this run opened), or the agent's retry initializes it again on its
//! sid (on a resumed one). A session the router no longer has is resumed as a
//! previous run's.

use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use brmcp_adapters::wire::SessionId;
use brmcp_adapters::{BrTransport, IdRange, RouterConfig, ServiceSlot};
use rmcp::service::{RoleClient, serve_directly};

use super::{About, BotLink, Conn, MAX_EPOCH, Saved, lock};

/// The idle time after which a bridge's link to a bot parks its session
/// ([`RouterConfig::client_park_after`] of [`router_config`]): 30 s, longer than a
/// [`Client`](brmcp_adapters::Client)'s default, since each revival saves the link's
/// session with its next epoch (a synced write), and an agent's calls to one bot come
/// in bursts seconds apart. A bridge linked to many bots still holds little for the
/// idle ones.
pub const LINK_PARK_AFTER: Duration = Duration::from_secs(30);

/// The settings of the router a bridge dials its bots on: a client router's defaults,
/// its links parked after [`LINK_PARK_AFTER`].
#[must_use]
pub fn router_config() -> RouterConfig {
    let mut config = RouterConfig::client();
    config.client_park_after = Some(LINK_PARK_AFTER);
    config
}

/// Revivals [`BotLink::running`] asks for before giving up: 4. One is enough unless
/// the session parks again between the revival and the use, which takes a whole park
/// delay; the bound only keeps a zero delay from spinning.
const MAX_REVIVALS: usize = 4;

/// The link's session, as the `current` lock holds it.
pub(super) enum Current {
    /// None yet, or the last one failed or was dropped.
    None,
    /// A running service.
    Live(Arc<Conn>),
    /// Parked: no service runs.
    Parked(Parked),
}

/// The session a service runs on, as the router parks it.
pub(super) struct Session {
    sid: SessionId,
    /// The epoch the service's ids are in.
    epoch: u64,
    /// What the router parks and revives it through; the router holds it weakly, so
    /// the session is the router's to park only while the link keeps it.
    slot: Arc<LinkSlot>,
}

/// A parked session.
pub(super) struct Parked {
    pub(super) about: Arc<About>,
    /// Its epoch is the revival's: one past the parked service's.
    session: Session,
}

impl Parked {
    fn record(&self) -> Saved {
        Saved {
            sid: self.session.sid.as_str().to_owned(),
            epoch: self.session.epoch,
            server: self.about.info.clone(),
        }
    }
}

/// The router's handle on one session of a link.
pub(super) struct LinkSlot {
    link: Weak<BotLink>,
}

impl LinkSlot {
    fn weak(self: &Arc<Self>) -> Weak<dyn ServiceSlot> {
        Arc::downgrade(self) as Weak<dyn ServiceSlot>
    }

    fn is(self: &Arc<Self>, other: &Self) -> bool {
        std::ptr::eq(Arc::as_ptr(self), other)
    }
}

impl ServiceSlot for LinkSlot {
    fn park(&self) -> Option<Box<dyn Send>> {
        self.link.upgrade()?.park(self)
    }

    fn revive(&self, transport: BrTransport<RoleClient>) -> bool {
        self.link
            .upgrade()
            .is_some_and(|link| link.revive(self, transport))
    }
}

impl BotLink {
    /// The session of `transport`, dialed for a service under `epoch`, given to the
    /// router to park while idle.
    pub(super) fn session(&self, transport: &BrTransport<RoleClient>, epoch: u64) -> Session {
        let slot = Arc::new(LinkSlot {
            link: self.me.clone(),
        });
        self.router.park_idle(transport, slot.weak());
        Session {
            sid: transport.sid(),
            epoch,
            slot,
        }
    }

    /// The running session, the parked one revived (nothing is sent); `None` without
    /// either, or when the router no longer has the parked one (it is then resumed by
    /// the next connect, as a previous run's session is).
    pub(crate) async fn running(&self) -> Option<Arc<Conn>> {
        for _ in 0..MAX_REVIVALS {
            let (sid, slot) = match &*self.current() {
                Current::Live(conn) if !conn.service.is_closed() => return Some(conn.clone()),
                Current::Parked(parked) => (parked.session.sid, parked.session.slot.weak()),
                Current::Live(_) | Current::None => return None,
            };
            if !self.router.unpark(self.bot, sid, &slot).await {
                self.lost(&slot);
                return None;
            }
        }
        None
    }

    /// The router no longer has the parked session `slot`: it is resumed, not revived.
    fn lost(&self, slot: &Weak<dyn ServiceSlot>) {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if let Current::Parked(parked) = &*current
            && Weak::ptr_eq(&parked.session.slot.weak(), slot)
        {
            tracing::debug!(bot = %self.bot, "parked session gone at the router; resuming it");
            // Its epoch is above every one used on it (the revival's, never used).
            *lock(&self.resumable) = Some(parked.record());
            *lock(&self.resumed) = None;
            *current = Current::None;
        }
    }

    /// Parks the running session of `slot` if no request holds it (the router found it
    /// idle on the wire); its service is returned for the router to drop.
    fn park(&self, slot: &LinkSlot) -> Option<Box<dyn Send>> {
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        let Current::Live(conn) = &*current else {
            return None;
        };
        // Whoever uses the session holds its `Conn`, cloned under this lock: with the
        // link's the only one, nothing can take it meanwhile. Past the last epoch a
        // revival would have no ids of its own: the session stays running.
        let next = conn.session.epoch + 1;
        if !conn.session.slot.is(slot)
            || Arc::strong_count(conn) > 1
            || conn.service.is_closed()
            || next >= MAX_EPOCH
        {
            return None;
        }
        let Current::Live(conn) = std::mem::replace(&mut *current, Current::None) else {
            return None;
        };
        let conn = match Arc::try_unwrap(conn) {
            Ok(conn) => conn,
            Err(conn) => {
                *current = Current::Live(conn);
                return None;
            }
        };
        let Conn {
            service,
            about,
            session,
            ..
        } = conn;
        *current = Current::Parked(Parked {
            about,
            session: Session {
                epoch: next,
                ..session
            },
        });
        tracing::debug!(bot = %self.bot, "link parked");
        Some(Box::new(service))
    }

    /// Runs a service again on the parked session of `slot`, on `transport` (the
    /// router's, holding what revived it): no handshake, its ids in the parked epoch's
    /// range, saved before its first send. `false` if the link moved on or closed.
    fn revive(&self, slot: &LinkSlot, transport: BrTransport<RoleClient>) -> bool {
        if self.closed.is_cancelled() {
            return false;
        }
        let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
        if !matches!(&*current, Current::Parked(p) if p.session.slot.is(slot)) {
            return false;
        }
        let Current::Parked(parked) = std::mem::replace(&mut *current, Current::None) else {
            return false;
        };
        let saved = parked.record();
        let serial = self.hub.next_serial();
        let watch = transport.watch();
        let mut tap = self.tap(transport, serial, IdRange::new(parked.session.epoch));
        tap.save_first = Some((self.store.clone(), self.bot, saved.clone()));
        let service = serve_directly(self.handler(), tap, Some(parked.about.info.clone()));
        let conn = Arc::new(Conn {
            service,
            about: parked.about,
            serial,
            watch,
            session: parked.session,
        });
        // Its transport has the `initialize` of the session's first service only if
        // this run opened it: should the bot lose it, the next connect initializes it
        // again on its sid, under the next epoch.
        *lock(&self.resumed) = Some((saved, Arc::downgrade(&conn)));
        *current = Current::Live(conn);
        tracing::debug!(bot = %self.bot, "link revived");
        true
    }

    /// Sets the session to `new`; a parked one replaced is let go at the router.
    pub(super) fn replace(&self, new: Current) {
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(PoisonError::into_inner),
            new,
        );
        if let Current::Parked(parked) = old {
            let session = &parked.session;
            self.router
                .release(self.bot, session.sid, &session.slot.weak());
        }
    }
}

impl Drop for BotLink {
    fn drop(&mut self) {
        // A parked session has no transport whose drop would close it at the router.
        self.replace(Current::None);
    }
}
