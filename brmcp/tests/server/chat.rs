//! Chat dispatch (Go `TestDispatchPM`): a PM that is not a brmcp envelope (or is one of
//! another version) reaches the chat hook with the sender's uid and text, from any
//! sender; an envelope never does (the router gets it, malformed ones included); no
//! hook is fine. The optional auto-reply answers chat at most once per sender per hour.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::*;
use brmcp::adapters::{PeerId, PmSender};
use brmcp::server::{AutoReply, DEFAULT_AUTO_REPLY, Harness, HarnessError, ManualClock};

type Sent = Arc<Mutex<Vec<(PeerId, String)>>>;

/// A host that records the PMs the harness sends.
struct Recorder(Sent);

impl PmSender for Recorder {
    type Error = std::convert::Infallible;

    async fn send_pm(&self, to: &PeerId, body: String) -> Result<(), Self::Error> {
        self.0.lock().unwrap().push((*to, body));
        Ok(())
    }
}

const ENVELOPE: &str =
    "--mcp[v=1,sid=0123456789abcdef,mid=0123456789abcdef,seq=1/1,exp=0]--eyJqc29ucnBjIjoiMi4wIn0=";
const OTHER_VERSION: &str =
    "--mcp[v=2,sid=0123456789abcdef,mid=0123456789abcdef,seq=1/1,exp=0]--eyJqc29ucnBjIjoiMi4wIn0=";
const MALFORMED: &str = "--mcp[v=1,sid=XYZ,mid=0123456789abcdef,seq=1/1,exp=0]--eyJ9";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_reaches_the_hook_and_envelopes_the_router() {
    let chat: Sent = Arc::default();
    let seen = chat.clone();
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::builder()
        .data_dir(dir.path())
        .allowed_uids([peer(ALICE)])
        .on_chat(move |from, text| seen.lock().unwrap().push((from, text.to_owned())))
        .build()
        .unwrap();
    assert!(matches!(
        harness.handle_pm(peer(ALICE), "hi").await,
        Err(HarnessError::NotStarted)
    ));
    let router = harness.start(Recorder(Arc::default())).unwrap();

    harness.handle_pm(peer(ALICE), "hello there").await.unwrap();
    harness.handle_pm(peer(MALLORY), "anyone?").await.unwrap();
    harness.handle_pm(peer(ALICE), OTHER_VERSION).await.unwrap();
    harness.handle_pm(peer(ALICE), ENVELOPE).await.unwrap();
    harness.handle_pm(peer(ALICE), MALFORMED).await.unwrap();

    assert_eq!(
        *chat.lock().unwrap(),
        [
            (peer(ALICE), "hello there".to_owned()),
            (peer(MALLORY), "anyone?".to_owned()),
            (peer(ALICE), OTHER_VERSION.to_owned()),
        ]
    );
    until("the router to see both envelopes", || {
        router.stats().pms_received == 2
    })
    .await;
    let stats = router.stats();
    assert_eq!(stats.dropped_foreign, 0, "chat never reached the router");
    assert_eq!(stats.dropped_malformed, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_hook_is_fine() {
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::builder().data_dir(dir.path()).build().unwrap();
    let _router = harness.start(Recorder(Arc::default())).unwrap();
    harness.handle_pm(peer(ALICE), "hello").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_reply_once_per_sender_per_hour() {
    let sent: Sent = Arc::default();
    let clock = ManualClock::at_unix(T0);
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::builder()
        .data_dir(dir.path())
        .clock(clock.clone())
        .auto_reply(AutoReply::default())
        .build()
        .unwrap();
    let _router = harness.start(Recorder(sent.clone())).unwrap();
    let replies = |to: u32| {
        sent.lock()
            .unwrap()
            .iter()
            .filter(|(peer_id, text)| *peer_id == peer(to) && text == DEFAULT_AUTO_REPLY)
            .count()
    };

    harness.handle_pm(peer(ALICE), "hello").await.unwrap();
    until("the first reply", || replies(ALICE) == 1).await;
    harness.handle_pm(peer(ALICE), "hello?").await.unwrap();
    clock.advance(Duration::from_secs(59 * 60));
    harness.handle_pm(peer(ALICE), "hello??").await.unwrap();
    harness.handle_pm(peer(BOB), "hi").await.unwrap();
    until("Bob's reply", || replies(BOB) == 1).await;
    // Envelopes are not chat: never answered.
    harness.handle_pm(peer(BOB), ENVELOPE).await.unwrap();
    clock.advance(Duration::from_secs(60));
    harness
        .handle_pm(peer(ALICE), "still there?")
        .await
        .unwrap();
    until("the second reply", || replies(ALICE) == 2).await;
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(sent.lock().unwrap().len(), 3, "{:?}", sent.lock().unwrap());
}
