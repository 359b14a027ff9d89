//! Sessions a server expired, kept resumable for a while: a peer's next request on one
//! re-creates it already initialized, so any client continues without noticing, a
//! plain go-sdk client included (it never re-initializes by itself).
//!
//! A record is the session's `initialize` as received and the protocol version the
//! server answered it with. Resuming replays that `initialize` (under
//! [`RESUMED_INIT_ID`], with the negotiated version) and `notifications/initialized`
//! into a fresh service ahead of the request; the session's transport swallows the
//! answer. Records are bounded in number, per peer and in age; a session id beyond them
//! (or never ours) gets session-not-found.

use std::collections::VecDeque;
use std::time::Duration;

use brmcp_wire::SessionId;
use rmcp::model::{ClientJsonRpcMessage, RequestId};
use tokio::time::Instant;

use crate::peer::PeerId;
use crate::session::Resume;

/// How long an expired session stays resumable: 24 hours. Long enough for a user who
/// comes back the next day to find their bot sessions where they left them; the
/// record is a few hundred bytes.
pub(crate) const RESUME_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// Expired sessions kept resumable at once, all peers together: 1024. With records of
/// at most [`MAX_RESUME_RECORD_BYTES`](crate::session::MAX_RESUME_RECORD_BYTES) that is
/// 4 MiB at worst; the oldest go first.
pub(crate) const MAX_RESUMABLE: usize = 1024;

/// Expired sessions kept resumable per peer: 16, twice the default session cap, so one
/// peer churning sessions cannot push every other peer's records out.
pub(crate) const MAX_RESUMABLE_PER_PEER: usize = 16;

/// The JSON-RPC id of a replayed `initialize`: a string no client of ours draws (rmcp
/// numbers its requests), whose answer the resumed session does not send.
pub(crate) const RESUMED_INIT_ID: &str = "brmcp-resume";

type Key = (PeerId, SessionId);

/// The records, oldest first. Small and bounded, so a scan is the whole index.
#[derive(Default)]
pub(crate) struct Resumable {
    records: VecDeque<(Key, Resume, Instant)>,
}

impl Resumable {
    /// Keeps `record` for `key`, whose session expired at `at`, evicting the oldest
    /// records past the bounds.
    pub(crate) fn insert(&mut self, key: Key, record: Resume, at: Instant) {
        self.remove(&key);
        self.prune(at);
        let of_peer = self.records.iter().filter(|(k, ..)| k.0 == key.0).count();
        if of_peer >= MAX_RESUMABLE_PER_PEER
            && let Some(oldest) = self.records.iter().position(|(k, ..)| k.0 == key.0)
        {
            self.records.remove(oldest);
        }
        if self.records.len() >= MAX_RESUMABLE {
            self.records.pop_front();
        }
        // Kept in expiry order, so a record put back goes where its time puts it.
        let place = self
            .records
            .iter()
            .position(|(_, _, t)| *t > at)
            .unwrap_or(self.records.len());
        self.records.insert(place, (key, record, at));
    }

    /// The record of `key` and when its session expired, removed, if it is still
    /// within [`RESUME_WINDOW`]. A record put back keeps its first time.
    pub(crate) fn take(&mut self, key: &Key, now: Instant) -> Option<(Resume, Instant)> {
        self.prune(now);
        let at = self.records.iter().position(|(k, ..)| k == key)?;
        self.records.remove(at).map(|(_, record, at)| (record, at))
    }

    /// Forgets `key` (a session opened there again).
    pub(crate) fn remove(&mut self, key: &Key) {
        self.records.retain(|(k, ..)| k != key);
    }

    fn prune(&mut self, now: Instant) {
        while self
            .records
            .front()
            .is_some_and(|(_, _, at)| now.saturating_duration_since(*at) > RESUME_WINDOW)
        {
            self.records.pop_front();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.records.len()
    }
}

/// The messages that re-create a session from its record, with their sizes: the
/// recorded `initialize` under [`RESUMED_INIT_ID`] and the negotiated version, then
/// `notifications/initialized`. `None` if the record no longer decodes.
pub(crate) fn replay(record: &Resume) -> Option<[(ClientJsonRpcMessage, usize); 2]> {
    let mut initialize: serde_json::Value =
        serde_json::from_slice(record.initialize.as_deref()?).ok()?;
    *initialize.get_mut("id")? = serde_json::Value::from(RESUMED_INIT_ID);
    if let Some(version) = &record.negotiated {
        *initialize.get_mut("params")?.get_mut("protocolVersion")? = version.clone();
    }
    let init_len = serde_json::to_vec(&initialize).ok()?.len();
    let initialized = serde_json::json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let initialized_len = serde_json::to_vec(&initialized).ok()?.len();
    Some([
        (serde_json::from_value(initialize).ok()?, init_len),
        (serde_json::from_value(initialized).ok()?, initialized_len),
    ])
}

/// The id [`replay`] gives the replayed `initialize`.
pub(crate) fn resumed_init_id() -> RequestId {
    RequestId::String(RESUMED_INIT_ID.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn record() -> Resume {
        Resume {
            initialize: Some(Arc::new(
                br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2099-01-01","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}"#.to_vec(),
            )),
            negotiated: Some(serde_json::Value::from("2025-06-18")),
        }
    }

    fn key(peer: u8, sid: u8) -> Key {
        (
            PeerId::from_bytes([peer; 32]),
            SessionId::from_entropy([sid; 8]),
        )
    }

    #[test]
    fn replay_uses_the_negotiated_version_and_its_own_id() {
        let [(init, _), (initialized, _)] = replay(&record()).unwrap();
        let init = serde_json::to_value(&init).unwrap();
        assert_eq!(init["id"], RESUMED_INIT_ID);
        assert_eq!(init["params"]["protocolVersion"], "2025-06-18");
        assert_eq!(init["params"]["clientInfo"]["name"], "c");
        let initialized = serde_json::to_value(&initialized).unwrap();
        assert_eq!(initialized["method"], "notifications/initialized");
    }

    #[test]
    fn bounded_in_age_per_peer_and_in_all() {
        let now = Instant::now();
        let mut r = Resumable::default();
        r.insert(key(1, 1), record(), now);
        assert!(r.take(&key(1, 1), now).is_some());
        assert!(r.take(&key(1, 1), now).is_none(), "taken once");

        r.insert(key(1, 2), record(), now);
        assert!(
            r.take(&key(1, 2), now + RESUME_WINDOW + Duration::from_secs(1))
                .is_none()
        );

        // Put back (the peer was at its cap), a record keeps its first time.
        r.insert(key(1, 3), record(), now);
        let later = now + RESUME_WINDOW - Duration::from_secs(1);
        let (taken, at) = r.take(&key(1, 3), later).unwrap();
        r.insert(key(1, 3), taken, at);
        let past = now + RESUME_WINDOW + Duration::from_secs(1);
        assert!(
            r.take(&key(1, 3), past).is_none(),
            "the window did not restart"
        );

        for sid in 0..(MAX_RESUMABLE_PER_PEER as u8 + 3) {
            r.insert(key(2, sid), record(), now);
        }
        assert_eq!(r.len(), MAX_RESUMABLE_PER_PEER);
        assert!(
            r.take(&key(2, 0), now).is_none(),
            "the peer's oldest went first"
        );
        assert!(
            r.take(&key(2, MAX_RESUMABLE_PER_PEER as u8 + 2), now)
                .is_some()
        );

        let mut r = Resumable::default();
        for i in 0..(MAX_RESUMABLE + 5) {
            let bytes = (i as u32).to_be_bytes();
            let peer = PeerId::from_bytes([
                bytes[0], bytes[1], bytes[2], bytes[3], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            ]);
            r.insert((peer, SessionId::from_entropy([1; 8])), record(), now);
        }
        assert_eq!(r.len(), MAX_RESUMABLE);
    }
}
