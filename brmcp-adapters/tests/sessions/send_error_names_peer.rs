//! A PM the host fails to send surfaces as the send's error, naming the peer.

use brmcp_adapters::RouterConfig;
use brmcp_adapters::mem::{Fabric, uid};
use rmcp::ServiceExt;

#[tokio::test(start_paused = true)]
async fn failed_send_names_the_peer() {
    let fabric = Fabric::new(18);
    let client = fabric.router(uid(2), RouterConfig::client());
    // Nobody with this id is on the fabric: the host refuses the PM.
    let nobody = uid(99);
    let error = ().serve(client.dial(nobody).expect("dial")).await.expect_err("no peer");
    let text = format!("{error} {:?}", std::error::Error::source(&error));
    assert!(text.contains(&nobody.to_string()), "{text}");
    assert_eq!(client.stats().send_errors, 1);
}
