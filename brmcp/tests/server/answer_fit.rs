//! Every answer fits or is refunded: a tool answer over `max_answer_bytes` (what one
//! message carries, less the JSON-RPC wrapper) reaches the caller at once as a tool
//! error saying why, the call is refunded, and its key replays that refusal without a
//! second run or charge. An answer at the bound is delivered and charged. The same for a
//! free tool, a tool mirrored from a hostile upstream speaking raw JSON-RPC (whose answer
//! with a repeated key, which no typed result reads, is refunded too), and the
//! directory's priced tools (see `directory::answer_fit`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use brmcp::adapters::RouterConfig;
use brmcp::server::upstream::Upstreams;
use brmcp::server::{
    ANSWER_TOO_LARGE, CallState, DynamicTools, JournalEntry, ServeConfig, ToolError, ToolSpec,
    max_answer_bytes, schemars,
};
use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::json;

use crate::support::*;

/// The price of the sized tools, in atoms.
const PRICE: u64 = 300;

/// Alice's funds, in milliatoms: a few calls' worth.
const FUNDS: u64 = 10 * PRICE * 1000;

/// How long an answer (or its refusal) may take on a loaded machine; it takes well
/// under a second.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

/// The answer the caller waited for too long in the reported case: 13 MiB of text,
/// under rmcp's 16 MiB stdio line limit, over the 12.5 MiB 64 parts of 200 KiB carry.
const REPORTED_BYTES: usize = 13 << 20;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Size {
    /// The bytes of the result's JSON.
    bytes: usize,
}

/// A text result whose JSON is exactly `bytes` long (or the shortest one, if shorter).
fn result_of_len(bytes: usize) -> CallToolResult {
    let empty = CallToolResult::success(vec![ContentBlock::text("")]);
    let overhead = serde_json::to_vec(&empty).unwrap().len();
    CallToolResult::success(vec![ContentBlock::text(
        "x".repeat(bytes.saturating_sub(overhead)),
    )])
}

/// `name` at `price` atoms: answers a result of the size asked for, counting its runs.
fn sized(name: &'static str, price: u64, probe: &Arc<Probe>) -> ToolSpec {
    let probe = probe.clone();
    ToolSpec::fixed(
        name,
        "An answer of the size asked for",
        price,
        move |_, s: Size| {
            probe.runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, ToolError>(result_of_len(s.bytes)) }
        },
    )
}

/// A server router with chunks of `chunk_len` bytes, so the bound is small.
fn small(chunk_len: usize) -> RouterConfig {
    let mut config = RouterConfig::server();
    config.chunk_len = chunk_len;
    config
}

async fn timed_call(
    client: &Client,
    name: &'static str,
    bytes: usize,
    key: Option<&str>,
) -> CallToolResult {
    tokio::time::timeout(
        ANSWER_WITHIN,
        call(client, name, json!({ "bytes": bytes }), key),
    )
    .await
    .unwrap_or_else(|_| panic!("{name} ({bytes} bytes) got no answer within {ANSWER_WITHIN:?}"))
}

fn journal(env: &Env) -> Vec<JournalEntry> {
    env.harness.ledger().unwrap().journal(None, 100).unwrap()
}

/// The answer of `bytes` arrived whole (compared by length: it is large).
fn assert_delivered(result: &CallToolResult, bytes: usize) {
    assert!(!is_error(result), "a tool error: {:.200}", text(result));
    assert_eq!(text(result).len(), text(&result_of_len(bytes)).len());
}

fn assert_too_large(result: &CallToolResult, bytes_over: &str) {
    let text = text(result);
    assert!(is_error(result), "not a tool error: {text:.200}");
    assert!(
        text.starts_with("answer too large to deliver: "),
        "{text:.200}"
    );
    assert!(text.contains(bytes_over), "{text}");
    assert!(text.ends_with("; refunded"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_too_large_to_carry_is_refused_refunded_and_replayed() {
    let probe = Arc::new(Probe::default());
    let (b, clock, dir) = builder();
    let env = env(b.tool(sized("sized", PRICE, &probe)), clock, dir);
    tip(&env.harness, 1, ALICE, FUNDS).await;
    let alice = client(&env.fabric, ALICE).await;

    let first = timed_call(&alice, "sized", REPORTED_BYTES, Some("fit-key-0001")).await;
    assert_too_large(&first, &format!("{REPORTED_BYTES} bytes"));
    let bound = max_answer_bytes(&RouterConfig::server());
    assert!(text(&first).contains(&format!("over the {bound} bytes")));
    assert_eq!(balance(&env.harness, ALICE).await, FUNDS, "refunded");
    let entries = journal(&env);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].state, CallState::Refunded);
    assert_eq!(entries[0].reason.as_deref(), Some(ANSWER_TOO_LARGE));
    assert!(entries[0].key_held, "the key keeps the refusal");

    // The retry with the same key gets the same refusal: nothing runs or pays.
    let retry = timed_call(&alice, "sized", REPORTED_BYTES, Some("fit-key-0001")).await;
    assert_eq!(retry, first);
    assert_eq!(probe.runs(), 1);
    assert_eq!(balance(&env.harness, ALICE).await, FUNDS);
    assert_eq!(journal(&env).len(), 1);
    let stats = env.harness.stats();
    assert_eq!((stats.answers_too_large, stats.replayed), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_at_the_bound_is_delivered_and_one_byte_more_is_refunded() {
    let probe = Arc::new(Probe::default());
    let config = small(4096);
    let bound = max_answer_bytes(&config);
    let (b, clock, dir) = builder();
    let b = b
        .router_config(config)
        .tool(sized("sized", PRICE, &probe))
        .tool(sized("free_sized", 0, &probe));
    let env = env(b, clock, dir);
    tip(&env.harness, 1, ALICE, FUNDS).await;
    let alice = client(&env.fabric, ALICE).await;

    let fits = timed_call(&alice, "sized", bound, Some("fit-key-0002")).await;
    assert_delivered(&fits, bound);
    assert_eq!(balance(&env.harness, ALICE).await, FUNDS - PRICE * 1000);
    assert_eq!(journal(&env)[0].state, CallState::Completed);

    // One byte more, keyed and unkeyed: refused and refunded.
    let over = bound + 1;
    let keyed = timed_call(&alice, "sized", over, Some("fit-key-0003")).await;
    assert_too_large(&keyed, &format!("{over} bytes, over the {bound} bytes"));
    let unkeyed = timed_call(&alice, "sized", over, None).await;
    assert_eq!(unkeyed, keyed);
    assert_eq!(balance(&env.harness, ALICE).await, FUNDS - PRICE * 1000);
    let entries = journal(&env);
    assert_eq!(entries.len(), 3);
    assert!(
        entries[..2].iter().all(
            |e| e.state == CallState::Refunded && e.reason.as_deref() == Some(ANSWER_TOO_LARGE)
        ),
        "{entries:?}"
    );

    // A free call's answer over the bound is refused just the same, with nothing to
    // refund; one at the bound is delivered.
    let free = timed_call(&alice, "free_sized", over, None).await;
    assert!(is_error(&free));
    assert!(
        text(&free).starts_with("answer too large to deliver: ")
            && !text(&free).contains("refunded"),
        "{}",
        text(&free)
    );
    let free = timed_call(&alice, "free_sized", bound, None).await;
    assert_delivered(&free, bound);
    assert_eq!(probe.runs(), 5);
    assert_eq!(env.harness.stats().answers_too_large, 3);
}

/// The raw JSON-RPC upstream beside this file.
fn raw_upstream() -> ServeConfig {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/server/raw_upstream.py");
    let config = json!({ "upstreams": [{
        "name": "raw", "command": "python3", "args": [script],
        "tools": { "big": PRICE, "repeats": PRICE }
    }]});
    ServeConfig::parse(&config.to_string(), std::path::Path::new("brmcp.json")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_answer_too_large_to_carry_or_unreadable_is_refunded() {
    let tools = DynamicTools::new();
    let upstreams = Upstreams::start(&raw_upstream().upstreams, &tools, None, None);
    let config = small(4096);
    let bound = max_answer_bytes(&config);
    let (b, clock, dir) = builder();
    let env = env(
        b.router_config(config).dynamic_tools(tools.clone()),
        clock,
        dir,
    );
    for _ in 0..2_000 {
        if !tools.names("raw").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        tools.names("raw"),
        ["big", "repeats"],
        "the upstream came up"
    );
    tip(&env.harness, 1, ALICE, FUNDS).await;
    let alice = client(&env.fabric, ALICE).await;

    // Over the bound by a little, so no line limit of the upstream's reader stops it
    // first: the harness's framing is what refuses it.
    let over = bound + 1000;
    let first = timed_call(&alice, "big", over, Some("fit-key-0004")).await;
    assert_too_large(&first, &format!("over the {bound} bytes"));
    assert_eq!(balance(&env.harness, ALICE).await, FUNDS);
    let retry = timed_call(&alice, "big", over, Some("fit-key-0004")).await;
    assert_eq!(retry, first);
    let entries = journal(&env);
    assert_eq!(entries.len(), 1, "the retry was not charged: {entries:?}");
    assert_eq!(entries[0].state, CallState::Refunded);

    let fits = timed_call(&alice, "big", bound / 2, Some("fit-key-0005")).await;
    assert!(!is_error(&fits), "{:.200}", text(&fits));
    assert_eq!(text(&fits).len(), bound / 2);
    assert_eq!(balance(&env.harness, ALICE).await, FUNDS - PRICE * 1000);

    // An answer no typed result reads (a repeated key): a tool error, refunded.
    let repeated = tokio::time::timeout(
        ANSWER_WITHIN,
        call(&alice, "repeats", json!({}), Some("fit-key-0006")),
    )
    .await
    .expect("repeats got no answer");
    assert!(is_error(&repeated), "{}", text(&repeated));
    assert!(
        text(&repeated).contains("unexpected answer to tools/call"),
        "{}",
        text(&repeated)
    );
    assert_eq!(balance(&env.harness, ALICE).await, FUNDS - PRICE * 1000);
    let entries = journal(&env);
    let call = entries
        .iter()
        .find(|e| e.call_key.as_deref() == Some("fit-key-0006"))
        .unwrap_or_else(|| panic!("no journal entry for the call: {entries:?}"));
    assert_eq!(
        (call.tool.as_str(), call.state),
        ("repeats", CallState::Refunded)
    );
    upstreams.shutdown().await;
}
