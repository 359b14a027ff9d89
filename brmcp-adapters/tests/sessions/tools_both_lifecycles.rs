//! tools/list and tools/call between a real rmcp client and server over the fabric,
//! under both lifecycles.

use crate::common::{Lifecycle, call, connect, serve, text};
use brmcp_adapters::mem::{Faults, Pair};
use serde_json::json;

async fn list_and_call(lifecycle: Lifecycle) {
    let pair = Pair::new(1, Faults::none());
    let probe = serve(&pair.server);
    let client = connect(&pair.client, pair.server_id, lifecycle).await;

    let tools = client.list_all_tools().await.expect("tools/list");
    let mut names: Vec<_> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        ["big", "echo", "progress", "sleep", "wait", "whoami"]
    );

    let result = client
        .call_tool(call("echo", json!({"text": "hello over BR"})))
        .await
        .expect("tools/call");
    assert_eq!(text(&result), "hello over BR");
    assert_eq!(probe.calls.load(std::sync::atomic::Ordering::SeqCst), 1);

    let stats = pair.server.stats();
    assert_eq!(stats.sessions_accepted, 1);
    assert_eq!(pair.client.stats().sessions_dialed, 1);
    client.cancel().await.expect("cancel");
}

#[tokio::test]
async fn tools_list_and_call_legacy() {
    list_and_call(Lifecycle::Legacy).await;
}

#[tokio::test]
async fn tools_list_and_call_stateless() {
    list_and_call(Lifecycle::Stateless).await;
}
