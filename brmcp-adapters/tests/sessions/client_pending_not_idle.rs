//! A dialed session with an idle timeout is not idle while its own request waits.

use crate::common::{Lifecycle, call, connect, serve};
use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Faults, Pair};
use serde_json::json;
use std::time::Duration;

#[tokio::test(start_paused = true)]
async fn pending_call_keeps_client_session_open() {
    let mut cc = RouterConfig::client();
    cc.client_idle_timeout = Some(Duration::from_secs(60));
    let pair = Pair::with_configs(1, Faults::none(), RouterConfig::server(), cc);
    serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, Lifecycle::Legacy).await;
    let r = client.call_tool(call("sleep", json!({"secs": 300}))).await;
    assert!(r.is_ok(), "{r:?}");
    assert_eq!(pair.client.stats().sessions_expired, 0);
    // Once answered, the session idles out as configured.
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(pair.client.stats().sessions_expired, 1);
}
