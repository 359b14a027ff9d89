//! Tools known only at run time ([`DynamicTools`]): served after the fixed ones (a
//! fixed tool's name wins), priced and charged on the fixed tools' path, callers told
//! of each change, a tool that says it is unavailable refused before any charge, a
//! removed tool unknown.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use brmcp::adapters::mem::uid;
use brmcp::adapters::{Router, RouterConfig};
use brmcp::server::{DynamicTools, Price, ToolSpec};
use rmcp::model::{JsonObject, Tool};
use rmcp::service::{NotificationContext, RoleClient, RunningService};
use rmcp::{ClientHandler, ServiceExt};
use serde_json::json;

use crate::support::{self, ALICE, SERVER, balance, builder, env, is_error, params, text, tip};

/// A client that counts `tools/list_changed`.
#[derive(Clone, Default)]
struct Changes(Arc<AtomicUsize>);

impl ClientHandler for Changes {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A mirrored-style tool `priced` at 500 atoms that counts its runs and is available
/// while `up` holds.
fn priced(runs: &Arc<AtomicUsize>, up: &Arc<AtomicBool>) -> ToolSpec {
    let schema: JsonObject =
        serde_json::from_value(json!({"type": "object", "properties": {"q": {"type": "string"}}}))
            .unwrap();
    let tool = Tool::new("priced", "A run-time tool", Arc::new(schema));
    let runs = runs.clone();
    let up = up.clone();
    ToolSpec::from_definition(tool, Price::Fixed(500), move |_, args: JsonObject| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok(serde_json::Value::Object(args)) }
    })
    .when_available(move || {
        if up.load(Ordering::SeqCst) {
            Ok(())
        } else {
            Err("priced is down; nothing was charged".into())
        }
    })
}

async fn call(
    client: &RunningService<RoleClient, Changes>,
) -> Result<rmcp::model::CallToolResult, rmcp::ServiceError> {
    client
        .call_tool(params("priced", json!({"q": "x"}), None))
        .await
}

async fn names(client: &RunningService<RoleClient, Changes>) -> Vec<String> {
    let tools = client.list_all_tools().await.unwrap();
    tools.iter().map(|t| t.name.to_string()).collect()
}

/// ALICE's session to the server, which lists the fixed `echo` alone, its count of
/// list changes, and ALICE's router (kept for the test's length).
async fn connect(env: &support::Env) -> (Changes, RunningService<RoleClient, Changes>, Router) {
    let router = env.fabric.router(uid(ALICE), RouterConfig::client());
    let changes = Changes::default();
    let client = changes
        .clone()
        .serve(router.dial(uid(SERVER)).unwrap())
        .await
        .unwrap();
    assert_eq!(names(&client).await, ["echo"]);
    (changes, client, router)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_time_tools_are_listed_billed_announced_and_removed() {
    let probe = Arc::new(support::Probe::default());
    let dynamic = DynamicTools::new();
    let (b, clock, dir) = builder();
    let env = env(
        b.tool(support::echo(&probe)).dynamic_tools(dynamic.clone()),
        clock,
        dir,
    );
    let (changes, client, _router) = connect(&env).await;

    let (runs, up) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(true)),
    );
    // A run-time `echo` loses to the fixed one.
    let shadow = ToolSpec::free("echo", "shadow", |_, _: JsonObject| async { Ok("shadow") });
    dynamic.replace("up", vec![priced(&runs, &up), shadow]);
    support::until("a list change", || changes.0.load(Ordering::SeqCst) >= 1).await;
    let tools = client.list_all_tools().await.unwrap();
    let listed: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(listed, ["echo", "priced"]);
    assert_eq!(
        serde_json::to_value(&tools[1].meta).unwrap(),
        json!({"brmcp/priceAtoms": 500})
    );

    // Charged on the same path as fixed tools: refused unpaid, run once paid.
    let refused = call(&client).await.unwrap();
    assert!(is_error(&refused));
    assert!(
        text(&refused).contains("\"payment_required\""),
        "{refused:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    tip(&env.harness, 1, ALICE, 500_000).await;
    let paid = call(&client).await.unwrap();
    assert!(!is_error(&paid), "{paid:?}");
    assert_eq!(paid.structured_content, Some(json!({"q": "x"})));
    assert_eq!(
        (
            runs.load(Ordering::SeqCst),
            balance(&env.harness, ALICE).await
        ),
        (1, 0)
    );
    let shadowed = client
        .call_tool(params("echo", json!({"text": "t"}), None))
        .await
        .unwrap();
    assert_eq!(shadowed.structured_content, Some(json!({"echo": "t"})));

    // Unavailable: refused before the charge, with a funded balance left whole.
    tip(&env.harness, 2, ALICE, 500_000).await;
    up.store(false, Ordering::SeqCst);
    let down = call(&client).await.unwrap();
    assert_eq!(text(&down), "priced is down; nothing was charged");
    assert_eq!(balance(&env.harness, ALICE).await, 500_000);
    let ledger = env.harness.ledger().unwrap();
    assert_eq!(
        ledger.journal(None, 10).unwrap().len(),
        1,
        "no entry for the refusal"
    );
    up.store(true, Ordering::SeqCst);
    assert!(!is_error(&call(&client).await.unwrap()));
    assert_eq!(
        (
            runs.load(Ordering::SeqCst),
            balance(&env.harness, ALICE).await
        ),
        (2, 0)
    );

    // Removed: announced, unlisted, unknown.
    let before = changes.0.load(Ordering::SeqCst);
    dynamic.replace("up", Vec::new());
    support::until("a second list change", || {
        changes.0.load(Ordering::SeqCst) > before
    })
    .await;
    assert_eq!(names(&client).await, ["echo"]);
    let unknown = call(&client).await.expect_err("unknown tool");
    assert!(unknown.to_string().contains("unknown tool"), "{unknown}");
    let _ = client.cancel().await;
}

/// Short, so the session parks within a second; the shipped delay is longer.
const PARK_AFTER: std::time::Duration = std::time::Duration::from_millis(200);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_while_parked_is_announced_on_revival() {
    let probe = Arc::new(support::Probe::default());
    let dynamic = DynamicTools::new();
    let (b, clock, dir) = builder();
    let mut config = RouterConfig::server();
    config.server_park_after = Some(PARK_AFTER);
    let env = env(
        b.router_config(config)
            .tool(support::echo(&probe))
            .dynamic_tools(dynamic.clone()),
        clock,
        dir,
    );
    let (changes, client, _router) = connect(&env).await;

    // Parked: no service runs to tell it of a change, so it is not told yet.
    tokio::time::sleep(PARK_AFTER * 3).await;
    let (runs, up) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicBool::new(true)),
    );
    dynamic.replace("up", vec![priced(&runs, &up)]);
    tokio::time::sleep(PARK_AFTER * 3).await;
    assert_eq!(
        changes.0.load(Ordering::SeqCst),
        0,
        "a parked session was told"
    );

    // Its next message revives it, and the change it missed is announced.
    let r = client
        .call_tool(params("echo", json!({"text": "hi"}), None))
        .await
        .unwrap();
    assert!(!is_error(&r), "{r:?}");
    assert!(
        env.router.stats().sessions_resumed >= 1,
        "the session was not parked"
    );
    support::until("the missed change", || {
        changes.0.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert_eq!(names(&client).await, ["echo", "priced"]);

    // Parked again with nothing missed: a revival announces nothing.
    tokio::time::sleep(PARK_AFTER * 3).await;
    let r = client
        .call_tool(params("echo", json!({"text": "again"}), None))
        .await
        .unwrap();
    assert!(!is_error(&r), "{r:?}");
    tokio::time::sleep(PARK_AFTER).await;
    assert_eq!(changes.0.load(Ordering::SeqCst), 1);
}
