//! A handler that falls behind holds at most [`MAX_QUEUED_PER_STREAM`] items of a
//! stream: past it the stream is ended and reopened, brclient replays what was not
//! acknowledged, and every item is handled once the handler catches up.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{Fake, PM_STREAM, eventually, uid};
use brmcp_clientrpc::ReceivedPm;
use brmcp_clientrpc::{ClientRpcHost, MAX_QUEUED_PER_STREAM, Streams};
use tokio::sync::watch;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn a_flood_while_the_handler_is_blocked_stays_within_the_cap() {
    let (certs, fake) = Fake::brclient().await;
    let seen: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    let calls = Arc::new(Mutex::new(0usize));
    let (gate, open) = watch::channel(false);
    let handler = {
        let (seen, calls) = (seen.clone(), calls.clone());
        move |pm: ReceivedPm| {
            let (seen, calls, mut open) = (seen.clone(), calls.clone(), open.clone());
            async move {
                *calls.lock().unwrap() += 1;
                let _ = open.wait_for(|o| *o).await;
                seen.lock().unwrap().insert(pm.sequence_id);
                Ok(())
            }
        }
    };
    let host = ClientRpcHost::new(certs.config(&fake)).unwrap();
    host.connect(Streams::new().pms(handler)).await.unwrap();

    let total = MAX_QUEUED_PER_STREAM * 2 + 100;
    let ids: BTreeSet<u64> = (0..total)
        .map(|i| fake.push_pm(&uid(0x11), &format!("pm {i}")))
        .collect();
    // Past the cap the stream is ended and reopened (and again, while the handler is
    // still blocked and the replay overflows the queue once more).
    eventually("the stream reopened", WAIT, || {
        fake.opens(PM_STREAM).len() >= 3
    })
    .await;
    assert_eq!(
        *calls.lock().unwrap(),
        1,
        "the handler is blocked on the first"
    );
    assert_eq!(fake.connections(), 1, "only the stream was reopened");

    gate.send_replace(true);
    eventually("every item handled and acknowledged", WAIT, || {
        fake.unacked(PM_STREAM).is_empty() && *seen.lock().unwrap() == ids
    })
    .await;
    host.close();
}
