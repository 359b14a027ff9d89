//! The directory's priced answers go through the harness's framing like any tool's: a
//! priced `get_snapshot` whose answer is over the bound of the directory's router is
//! refused, refunded, and its key replays the refusal without a second charge.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::Duration;

use brmcp::adapters::RouterConfig;
use brmcp::adapters::mem::{Fabric, uid};
use brmcp::directory::Directory;
use brmcp::server::{ANSWER_TOO_LARGE, CallState, ManualClock, Tip, max_answer_bytes};
use rmcp::ServiceExt;
use serde_json::json;

use super::{CONSUMER, DIR, FakePayer, Mode, policy, provider};
use crate::support::{T0, is_error, params, text};

/// The consumer's funds at the directory, in milliatoms: a few snapshots' worth.
const FUNDS: u64 = 1_000_000;

/// Chunks of 10 bytes: one message carries 640, enough for the session's handshake and
/// the refusal, not for a signed snapshot (even of no listings: about 600 bytes as text
/// and structured content).
const CHUNK_LEN: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_priced_directory_answer_too_large_to_carry_is_refunded() {
    let fabric = Fabric::new(31);
    let clock = ManualClock::at_unix(T0);
    let provider = provider(&fabric, &clock);
    let payer = FakePayer {
        provider: provider.harness.clone(),
        calls: Arc::new(AtomicUsize::new(0)),
        seq: Arc::new(AtomicU64::new(1)),
        mode: Mode::Fail,
    };
    let mut config = RouterConfig::server();
    config.chunk_len = CHUNK_LEN;
    let bound = max_answer_bytes(&config);
    let data = tempfile::tempdir().unwrap();
    let directory = Directory::builder()
        .data_dir(data.path())
        .policy(policy())
        .clock(clock.clone())
        .payer(payer)
        .router_config(config)
        .build()
        .unwrap();
    let router = directory.start(fabric.sender(uid(DIR))).unwrap();
    fabric.attach(uid(DIR), &router);
    directory.resume().await.unwrap();
    let harness = directory.harness().clone();
    harness
        .record_tip(Tip {
            seq: 1,
            caller: uid(CONSUMER),
            matoms: FUNDS,
        })
        .await
        .unwrap();

    let consumer = fabric.router(uid(CONSUMER), RouterConfig::client());
    let session = ().serve(consumer.dial(uid(DIR)).unwrap()).await.unwrap();
    let snapshot = || {
        let params = params("get_snapshot", json!({}), Some("snapshot-key-1"));
        let session = &session;
        async move {
            tokio::time::timeout(Duration::from_secs(20), session.call_tool(params))
                .await
                .expect("an answer within seconds")
                .unwrap()
        }
    };
    let first = snapshot().await;
    let refusal = text(&first);
    assert!(is_error(&first), "{refusal:.300}");
    assert!(
        refusal.starts_with("answer too large to deliver: ")
            && refusal.contains(&format!("over the {bound} bytes"))
            && refusal.ends_with("; refunded"),
        "{refusal}"
    );
    assert_eq!(harness.balance_matoms(uid(CONSUMER)).await.unwrap(), FUNDS);
    let journal = harness.ledger().unwrap().journal(None, 10).unwrap();
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert_eq!(journal[0].tool, "get_snapshot");
    assert_eq!(journal[0].state, CallState::Refunded);
    assert_eq!(journal[0].reason.as_deref(), Some(ANSWER_TOO_LARGE));

    let retry = snapshot().await;
    assert_eq!(retry, first);
    assert_eq!(harness.balance_matoms(uid(CONSUMER)).await.unwrap(), FUNDS);
    assert_eq!(
        harness.ledger().unwrap().journal(None, 10).unwrap().len(),
        1
    );
    directory.close().await;
}
