//! A minimal fake clientrpc server for the tests of the clientrpc host and the command, and certificates in
//! the shapes brclient and brclientd generate.
//!
//! The fake speaks the wire as brclient's `clientrpc` server does (see
//! `proto/clientrpc.proto`): TLS with a required client
//! certificate (unless told otherwise), `/ws`, optional basic auth checked before the
//! upgrade, binary frames of JSON plus `\n`, decimal stream suffixes, replay logs per
//! stream with cumulative acks and `unackedFrom`, ids per stream type above 2^32 growing by a
//! non-constant step. It records every request for assertions and can push items,
//! delay or fail answers, drop or stall connections, and refuse connections.
//!
//! Faults brclient really produces (its replay logs and stream handlers): items stored in
//! id order but sent live out of order ([`Fake::push_held`], [`Fake::release`]),
//! replays of everything not cleared on every stream open, ids starting over once the
//! logs are removed ([`Fake::reset_logs`]), and a stream open answered at once with an
//! error ([`Fake::refuse_streams`]).
#![allow(dead_code, unreachable_pub, missing_docs)]

mod certs;
mod conn;
mod faults;
mod server;

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use brmcp_adapters::PeerId;
use serde_json::Value;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;

pub use certs::Certs;
pub use server::{Call, FIRST_SEQ, Fake, FakeOptions, Recorded, Reply, default_reply};

/// The settle time of the hosts under test: short, and long enough for a held item
/// released a few milliseconds later to come first.
pub const ACK_SETTLE: Duration = Duration::from_millis(150);

pub const PM_STREAM: &str = "ChatService.PMStream";
pub const TIP_STREAM: &str = "PaymentsService.TipStream";
pub const TIP_PROGRESS: &str = "PaymentsService.TipProgress";
pub const KX_STREAM: &str = "ChatService.KXStream";

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A user id with every byte `b`.
pub fn uid(b: u8) -> PeerId {
    PeerId::from_bytes([b; 32])
}

/// A user id as clientrpc writes it in `bytes` fields.
pub fn b64(peer: &PeerId) -> String {
    STANDARD.encode(peer.as_bytes())
}

/// `X.Y[n]` → (`X.Y`, `n`) when `n` is decimal digits.
pub fn split_suffix(method: &str) -> Option<(&str, &str)> {
    let open = method.find('[')?;
    let digits = method[open + 1..].strip_suffix(']')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| (&method[..open], digits))
}

/// A uint64 given as a string (or a number).
pub fn seq_of(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        Value::Number(n) => n.as_u64().unwrap(),
        _ => 0,
    }
}

/// A server frame: binary, JSON then `\n`.
fn frame(v: &Value) -> Message {
    let mut bytes = v.to_string().into_bytes();
    bytes.push(b'\n');
    Message::Binary(bytes.into())
}

/// Fails unless `first` and `then` are both in `timeline`, `first` earlier.
pub fn assert_before(timeline: &[String], first: &str, then: &str) {
    let at = |line: &str| {
        timeline
            .iter()
            .position(|l| l == line)
            .unwrap_or_else(|| panic!("no {line:?} in {timeline:?}"))
    };
    assert!(
        at(first) < at(then),
        "{first:?} not before {then:?}: {timeline:?}"
    );
}

/// Polls `check` every 5 ms until it holds; panics with `what` after `limit`.
pub async fn eventually(what: &str, limit: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
