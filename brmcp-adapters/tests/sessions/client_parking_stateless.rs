//! A `Client` on the stateless 2026-07-28 lifecycle parks and revives as the others do,
//! and a revived service's subscription is acknowledged and fed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

use brmcp_adapters::mem::{Faults, Pair};
use brmcp_adapters::{PeerId, RouterConfig};
use rmcp::model::{ServerCapabilities, ServerConfig, ServerNotification, SubscriptionFilter};
use rmcp::service::SubscriptionContext;
use rmcp::{ErrorData, ServerHandler};

use crate::common::client_parking::{PARK_AFTER, SETTLE, discover, echo, pair};
use crate::common::serve;

/// A client on the stateless 2026-07-28 lifecycle parks and revives the same way, and
/// its revived service still sends the negotiated metadata with every request: a
/// server that forgot the session meanwhile (idle expiry) serves the call from it
/// alone.
#[tokio::test(start_paused = true)]
async fn a_stateless_client_parks_and_revives() {
    let mut server = RouterConfig::server();
    server.server_idle_timeout = Some(PARK_AFTER);
    let pair = Pair::with_configs(39, Faults::none(), server, RouterConfig::client());
    let probe = serve(&pair.server);
    let client = discover(&pair).await;
    assert_eq!(echo(&client, "first").await, "first");
    for round in 1..=2u64 {
        tokio::time::sleep(PARK_AFTER * 3).await;
        assert!(client.is_parked(), "round {round}");
        assert_eq!(pair.server.stats().sessions_open, 0, "round {round}");
        let sent = pair.fabric.stats().sent;
        let said = format!("stateless {round}");
        assert_eq!(echo(&client, &said).await, said);
        assert_eq!(pair.fabric.stats().sent - sent, 2, "round {round}");
        assert_eq!(pair.server.stats().sessions_accepted, 1 + round);
    }
    assert_eq!(probe.calls.load(SeqCst), 3);
}

/// A server that accepts a subscription to tool list changes, tells one change on it at
/// once, then holds it until the client cancels.
#[derive(Debug, Clone, Default)]
struct Lister {
    listens: Arc<AtomicUsize>,
}

impl ServerHandler for Lister {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    fn accepted_subscription_filter(&self, _: &SubscriptionFilter) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        self.listens.fetch_add(1, SeqCst);
        let changed = ServerNotification::ToolListChangedNotification(Default::default());
        if context.sink().send(changed).await.is_err() {
            return Ok(());
        }
        context.cancelled().await;
        Ok(())
    }
}

/// A subscription opened by a revived service (2026-07-28's `subscriptions/listen`) is
/// acknowledged and fed: the server's notifications name it by the id the service sent,
/// moved into the service's range, and reach it moved back (without that, the listen
/// waits for an acknowledgment that never matches). An open subscription keeps the
/// session from parking.
#[tokio::test(start_paused = true)]
async fn a_revived_client_listens_to_the_server() {
    let pair = pair(40, RouterConfig::client());
    let lister = Lister::default();
    let factory = lister.clone();
    pair.server.serve(move |_: &PeerId| factory.clone());
    let client = discover(&pair).await;
    let tools = SubscriptionFilter::builder().tools_list_changed().build();

    for round in 0..3usize {
        if round > 0 {
            tokio::time::sleep(PARK_AFTER * 2).await;
            assert!(client.is_parked(), "round {round}: not parked");
        }
        let lease = client.lease().await.expect("lease");
        let mut subscription = tokio::time::timeout(SETTLE, lease.listen(tools.clone()))
            .await
            .unwrap_or_else(|_| panic!("round {round}: the listen hung"))
            .unwrap_or_else(|e| panic!("round {round}: the listen failed: {e}"));
        assert_eq!(subscription.acknowledged(), &tools, "round {round}");
        let told = tokio::time::timeout(SETTLE, subscription.next())
            .await
            .unwrap_or_else(|_| panic!("round {round}: the change never came"))
            .expect("the subscription failed");
        assert!(
            matches!(
                told,
                Some(ServerNotification::ToolListChangedNotification(_))
            ),
            "round {round}: {told:?}"
        );
        // An open subscription is a request in progress: the session stays up.
        drop(lease);
        tokio::time::sleep(PARK_AFTER * 2).await;
        assert!(!client.is_parked(), "round {round}: parked while listening");
        subscription.cancel().await.expect("cancel");
        assert_eq!(lister.listens.load(SeqCst), round + 1);
    }
    assert_eq!(pair.client.stats().client_revived, 2);
    assert_eq!(pair.client.stats().dropped_parked_answer, 0);
}
