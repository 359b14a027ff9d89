//! Deciding payments over HTTP is the user's: every `/payments` route answers 403 to
//! the agents' bearer token and 401 to no or a wrong credential, while the approval
//! secret of the data directory lists and decides; with the token requirement waived
//! (a loopback test mode), the payment routes still take the secret.

use crate::common::{FORTUNE_PRICE, agent, autopay, call, env_with, http};
use brmcp::bridge::{APPROVAL_SECRET_FILE, Mode, approval_secret};
use serde_json::json;

const TOKEN: &str = "agent-token-agent-token-agent-token";

async fn request(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
) -> (u16, String) {
    let header = auth.map(|a| format!("Bearer {a}"));
    let headers: Vec<(&str, &str)> = header
        .iter()
        .map(|h| ("Authorization", h.as_str()))
        .collect();
    let (status, _, body) = http(addr, method, path, &headers, "").await;
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_approval_secret_decides_payments() {
    for require_token in [true, false] {
        let env = env_with(
            |bot| {
                let mut s = autopay(bot);
                s.mode = Mode::Approval;
                s.approval_timeout_secs = 60;
                s.enabled = true;
                s.token = TOKEN.into();
                s
            },
            |mut c| {
                c.require_token = require_token;
                c
            },
        )
        .await;
        env.bridge.start().await.expect("start");
        let addr = env.bridge.listen_addr().expect("listening");

        // No secret made yet: nothing opens the routes.
        assert!(!env.dir.path().join(APPROVAL_SECRET_FILE).exists());
        assert_eq!(request(addr, "GET", "/payments", Some(TOKEN)).await.0, 403);
        let secret = approval_secret(env.dir.path()).expect("secret");
        assert_ne!(secret, TOKEN);
        let settings = std::fs::read_to_string(env.dir.path().join("mcpclient.json")).unwrap();
        assert!(!settings.contains(&secret), "agents' config never holds it");

        let agent = agent(&env).await;
        let mut parked = env.bridge.subscribe_payments();
        let peer = agent.peer().clone();
        let paid = tokio::spawn(async move { peer.call_tool(call("fortune", json!({}))).await });
        let pending = parked.recv().await.expect("parked");
        let id = pending.id.clone();

        let routes = [
            ("GET", "/payments".to_owned()),
            ("GET", "/payments/".to_owned()),
            ("POST", format!("/payments/{id}/approve")),
            ("POST", format!("/payments/{id}/deny")),
            ("POST", format!("/payments/{id}/other")),
            ("GET", format!("/payments/{id}")),
            ("DELETE", "/payments".to_owned()),
        ];
        for (method, path) in &routes {
            let (status, body) = request(addr, method, path, Some(TOKEN)).await;
            assert_eq!(status, 403, "{method} {path} with the agent token: {body}");
            assert!(body.contains("approval secret"), "{body}");
            for auth in [None, Some("wrong"), Some(&secret[..63])] {
                let (status, _) = request(addr, method, path, auth).await;
                assert_eq!(status, 401, "{method} {path} with {auth:?}");
            }
        }
        assert_eq!(env.bridge.pending_payments(), vec![pending.clone()]);
        assert_eq!(env.payer.count(), 0, "nothing was paid on the agent's word");

        // The secret lists and approves.
        let (status, body) = request(addr, "GET", "/payments", Some(&secret)).await;
        assert_eq!(status, 200, "{body}");
        let listed: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(listed[0]["id"], json!(id));
        assert_eq!(listed[0]["atoms"], json!(FORTUNE_PRICE));
        let approve = format!("/payments/{id}/approve");
        let (status, body) = request(addr, "POST", &approve, Some(&secret)).await;
        assert_eq!(status, 200, "{body}");
        let result = paid.await.unwrap().expect("fortune");
        assert_eq!(result.is_error, Some(false), "{result:?}");
        assert_eq!(env.payer.count(), 1);
        let (status, _) = request(addr, "POST", &approve, Some(&secret)).await;
        assert_eq!(status, 404, "decided once");

        // The agent's token still serves the MCP endpoint it is for.
        agent.cancel().await.unwrap();
        env.bridge.close().await;
    }
}
