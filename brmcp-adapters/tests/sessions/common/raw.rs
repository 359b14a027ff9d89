//! A raw MCP client at the PM level, as a go-sdk client behind the Go router would be:
//! it sends what it is told, in order, and never re-initializes or replays anything.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::time::Duration;

use brmcp_adapters::wire::{Chunks, MessageId, SessionId, encode_part, parse};
use brmcp_adapters::{Clock, PeerId, PmSender, Router, RouterConfig, TokioClock};
use serde_json::Value;
use tokio::sync::mpsc;

/// The server router's host: every PM it sends lands in the raw client's queue.
struct ToRaw(mpsc::UnboundedSender<String>);

impl PmSender for ToRaw {
    type Error = std::io::Error;
    async fn send_pm(&self, _to: &PeerId, body: String) -> Result<(), Self::Error> {
        self.0
            .send(body)
            .map_err(|_| std::io::Error::other("raw client gone"))
    }
}

/// A server router and a raw client `me` talking to it on one session id.
pub struct RawClient {
    pub server: Router,
    pub me: PeerId,
    pub sid: SessionId,
    clock: TokioClock,
    rx: mpsc::UnboundedReceiver<String>,
}

impl RawClient {
    pub fn new(me: PeerId, config: RouterConfig) -> Self {
        let clock = TokioClock::new();
        let (tx, rx) = mpsc::unbounded_channel();
        let server = Router::new(ToRaw(tx), config.with_clock(clock));
        Self {
            server,
            me,
            sid: SessionId::random().unwrap(),
            clock,
            rx,
        }
    }

    /// Sends one JSON-RPC message on the session, stamped `exp = now + 10 min`.
    pub async fn send(&self, message: Value) {
        let payload = serde_json::to_vec(&message).unwrap();
        let exp = self.clock.now().saturating_add(600).0;
        let mid = MessageId::random().unwrap();
        for (header, chunk) in Chunks::new(self.sid, mid, exp, &payload, 1 << 16).unwrap() {
            let mut pm = vec![0u8; header.encoded_len(chunk.len())];
            let n = encode_part(&header, chunk, &mut pm).unwrap();
            pm.truncate(n);
            self.server
                .handle_pm(self.me, String::from_utf8(pm).unwrap())
                .await
                .unwrap();
        }
    }

    /// The next complete message from the server (single-part replies), or `None`
    /// after `wait`.
    pub async fn recv(&mut self, wait: Duration) -> Option<Value> {
        let body = tokio::time::timeout(wait, self.rx.recv()).await.ok()??;
        let part = parse(&body).unwrap();
        assert_eq!(
            part.total(),
            1,
            "the raw client reads single-part replies only"
        );
        let mut out = vec![0; part.decoded_len_max()];
        let n = part.decode_body(&mut out).unwrap();
        Some(serde_json::from_slice(&out[..n]).unwrap())
    }
}
