//! An upstream tool priced by its companion, with no code: `brmcp.json` names the
//! upstream's tool that answers each call's price and the bound. The priced tool is
//! listed dynamic with its bound (in `_meta` and its description), the companion is
//! neither listed nor callable, and each call asks the companion first, free: a good
//! price is charged and the tool runs; a price above the bound, a malformed answer or
//! a failing companion refuses the call, runs nothing and charges nothing, and leaves
//! its key free.

use std::path::Path;
use std::time::Duration;

use brmcp::server::upstream::Upstreams;
use brmcp::server::{DynamicTools, ServeConfig};
use serde_json::json;

use crate::support::*;

/// The raw upstream beside this file.
fn script() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/server/priced_upstream.py"
    )
    .to_owned()
}

/// How long a call (and the companion before it) may take on a loaded machine; it
/// takes milliseconds.
const ANSWER_WITHIN: Duration = Duration::from_secs(20);

fn runs(file: &Path) -> usize {
    std::fs::read_to_string(file).map_or(0, |t| t.lines().count())
}

/// The upstream beside this file under `search` priced by `search-price` (10 to 5000
/// atoms), served by a harness `builder` configures; waits until it is up.
async fn start(
    configure: impl FnOnce(brmcp::server::HarnessBuilder) -> brmcp::server::HarnessBuilder,
) -> (Env, Upstreams, tempfile::TempDir) {
    let state = tempfile::tempdir().unwrap();
    let runs_file = state.path().join("runs");
    let config = json!({ "upstreams": [{
        "name": "priced", "command": "python3", "args": [script()],
        "env": {"RUNS_FILE": runs_file},
        "tools": {"search": {"priced_by": "search-price", "min_price_atoms": 10, "max_price_atoms": 5000}}
    }]});
    let config = ServeConfig::parse(&config.to_string(), Path::new("brmcp.json")).unwrap();
    let tools = DynamicTools::new();
    let upstreams = Upstreams::start(&config.upstreams, &tools, None, None);
    let (b, clock, dir) = builder();
    let env = env(configure(b.dynamic_tools(tools.clone())), clock, dir);
    for _ in 0..2_000 {
        if !tools.names("priced").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        tools.names("priced"),
        ["search"],
        "the upstream came up, its companion hidden"
    );
    (env, upstreams, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_priced_by_its_companion_is_charged_only_a_good_price_within_the_bound() {
    let (env, _upstreams, state) = start(|b| b).await;
    let runs_file = state.path().join("runs");
    tip(&env.harness, 1, ALICE, 100_000_000).await;
    let alice = client(&env.fabric, ALICE).await;

    let listed = alice.list_all_tools().await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        serde_json::to_value(&listed[0].meta).unwrap(),
        json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 10, "brmcp/priceMaxAtoms": 5000})
    );
    assert_eq!(
        listed[0].description.as_deref(),
        Some("Searches (price quoted per call, 10 to 5000 atoms)")
    );
    let hidden = alice
        .call_tool(params("search-price", json!({"quote": "1"}), None))
        .await
        .expect_err("the companion is not callable");
    assert!(hidden.to_string().contains("unknown tool"), "{hidden}");

    let ask = |args: serde_json::Value, key: &'static str| {
        let alice = &alice;
        async move {
            tokio::time::timeout(ANSWER_WITHIN, call(alice, "search", args, Some(key)))
                .await
                .expect("answered in time")
        }
    };
    let refused_with = |result: &rmcp::model::CallToolResult, want: &str| {
        let text = text(result);
        assert!(is_error(result), "not refused: {text}");
        assert!(text.contains(want), "{text}");
        assert!(text.ends_with("nothing was charged"), "{text}");
    };
    let key = "priced-key-01";
    for (quote, want) in [
        (
            "9000",
            "the price of this call, 9000 atoms, is outside the listed bound (10 to 5000 atoms)",
        ),
        (
            "5",
            "the price of this call, 5 atoms, is outside the listed bound",
        ),
        (
            "12.5",
            "the price tool \"search-price\" answered \"12.5\", not a whole number of atoms",
        ),
        (
            "\"1500\"",
            "answered \"\\\"1500\\\"\", not a whole number of atoms",
        ),
        ("-5", "answered \"-5\", not a whole number of atoms"),
        ("lots", "answered \"lots\", not a whole number of atoms"),
        ("", "answered \"\", not a whole number of atoms"),
        ("99999999999999999999", "not a whole number of atoms"),
    ] {
        let result = ask(json!({"q": "x", "quote": quote}), key).await;
        refused_with(&result, want);
    }
    let failed = ask(json!({"q": "x", "fail": true}), key).await;
    refused_with(
        &failed,
        "upstream priced: the price tool \"search-price\" failed: \"the price service is down\"",
    );
    assert_eq!(runs(&runs_file), 0, "the priced tool never ran");
    assert_eq!(balance(&env.harness, ALICE).await, 100_000_000);
    let ledger = env.harness.ledger().unwrap();
    assert!(
        ledger.journal(None, 10).unwrap().is_empty(),
        "nothing charged"
    );

    // A good price, under the same key: the refusals left it free.
    let good = ask(json!({"q": "rust", "quote": "1500"}), key).await;
    assert_eq!(text(&good), "searched rust");
    assert_eq!(runs(&runs_file), 1);
    assert_eq!(
        balance(&env.harness, ALICE).await,
        100_000_000 - 1500 * 1000
    );
    let at_max = ask(json!({"q": "max", "quote": " 5000\n"}), "priced-key-02").await;
    assert_eq!(text(&at_max), "searched max");
    assert_eq!(
        balance(&env.harness, ALICE).await,
        100_000_000 - 6500 * 1000
    );
}

/// Asking a companion is work: a refused price spends the call's rate-limit token, so
/// a caller cannot make the upstream answer prices without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_prices_count_against_the_rate_limit() {
    let (env, _upstreams, _state) = start(|b| b.calls_per_minute(3)).await;
    let alice = client(&env.fabric, ALICE).await;
    for _ in 0..3 {
        let refused = call(&alice, "search", json!({"quote": "lots"}), None).await;
        assert!(
            text(&refused).contains("not a whole number of atoms"),
            "{}",
            text(&refused)
        );
    }
    let limited = call(&alice, "search", json!({"quote": "lots"}), None).await;
    assert_eq!(text(&limited), brmcp::server::RATE_LIMITED);
}
