//! A dynamically priced tool's listed bound through the directory: the crawl keeps it,
//! the paid test is paid only for a quote within it, and `search` shows it (as JSON
//! text and as structured content) and filters by it. A provider whose test quote is
//! outside the bound it lists, or whose listing of the test tool is malformed, fails
//! its test without a payment, with the numbers (or the key) named, and cannot be
//! approved.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use brmcp::adapters::mem::{Fabric, uid};
use brmcp::adapters::{BoxError, PeerId, RouterConfig};
use brmcp::directory::{Directory, PayError, PayFuture, Payer, State};
use brmcp::server::{ManualClock, Price, PriceBounds, ToolSpec, schemars};
use rmcp::model::{
    CallToolResponse, ContentBlock, ErrorData, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{RoleServer, ServerHandler};

use super::*;

/// The bounded tool's least and most per call.
const LEAST: u64 = 5;
const MOST: u64 = 100;
/// What the test call asks for: a price inside the bound.
const TEST_UNITS: u64 = 40;
/// The registration's test budget, well above every quote here.
const BUDGET: i64 = 2000;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Units {
    /// Units of work, one atom each.
    units: u64,
}

/// The registration of `tool` as the test, called with [`TEST_UNITS`].
fn bounded_registration(tool: &str) -> Value {
    json!({
        "description": "A lookup provider",
        "tags": ["lookup"],
        "test": {"tool": tool, "args": {"units": TEST_UNITS}, "maxAtoms": BUDGET},
    })
}

/// A provider whose `lookup` is priced one atom a unit, within [`LEAST`]..=[`MOST`].
fn bounded_provider(fabric: &Fabric, clock: &ManualClock) -> Provider {
    let bounds = PriceBounds::new(LEAST, Some(MOST)).unwrap();
    provider_selling(fabric, clock, |harness, counter| {
        harness.tool(ToolSpec::new(
            "lookup",
            "Look things up, one atom a unit",
            Price::bounded(bounds, |_, u: &Units| Ok(u.units)),
            move |_, u: Units| {
                counter.fetch_add(1, Ordering::SeqCst);
                async move { Ok(json!({ "looked_up": u.units })) }
            },
        ))
    })
}

/// Registers with [`bounded_registration`] of `tool` and funds fee plus budget.
async fn register_and_fund(w: &World, provider: &Session, tool: &str) {
    let status = ok(provider, "register", bounded_registration(tool)).await;
    assert_eq!(status["state"], "awaiting_funding", "{status}");
    w.tip(1000 + BUDGET.unsigned_abs()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_dynamic_tool_is_tested_within_its_bound_and_searched_by_it() {
    let w = world_selling(bounded_provider, Mode::Pay).await;
    let session = w.as_provider().await;
    let (_c, consumer) = w.as_user(CONSUMER).await;
    let (_a, admin) = w.as_user(ADMIN).await;
    register_and_fund(&w, &session, "lookup").await;
    let entry = w.wait_reg(Some(State::PendingReview)).await;
    let reg = entry.reg.unwrap();
    assert_eq!(reg.test_err, "", "the quote was within the bound");

    // The crawl kept the bound as listed.
    let listed = reg.catalog.expect("crawled");
    let lookup = listed
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == "lookup"))
        .expect("lookup crawled");
    assert_eq!(
        lookup["_meta"],
        json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": LEAST, "brmcp/priceMaxAtoms": MOST})
    );
    // The test was quoted 40 (within 5..=100) and paid exactly that, once.
    let pending = ok(&admin, "pending_registrations", json!({})).await;
    let regs = pending["registrations"].as_array().unwrap();
    assert_eq!(regs.len(), 1, "{pending}");
    assert_eq!(regs[0]["testOutcome"], "ok", "{pending}");
    assert_eq!(regs[0]["paidAtoms"], TEST_UNITS, "{pending}");
    assert_eq!(w.payer.calls.load(Ordering::SeqCst), 1, "one payment");
    assert_eq!(w.provider.runs.load(Ordering::SeqCst), 1, "one run");
    let approved = ok(&admin, "approve", json!({"uid": provider_uid()})).await;
    assert_eq!(approved["state"], "listed", "{approved}");

    // `search` shows the bound, in its text and in its structured content alike.
    let result = raw(&consumer, "search", json!({"query": "look"})).await;
    assert_ne!(result.is_error, Some(true), "{}", text_of(&result));
    let from_text: Value = serde_json::from_str(&text_of(&result)).unwrap();
    assert_eq!(
        result.structured_content.as_ref(),
        Some(&from_text),
        "the structured content is the text's JSON"
    );
    assert_eq!(from_text["total"], 1, "{from_text}");
    let hit = &from_text["hits"][0];
    assert_eq!(hit["providerUid"], provider_uid());
    assert_eq!(hit["tool"], "lookup");
    assert_eq!(hit["pricing"], "dynamic");
    assert_eq!(hit["priceMaxAtoms"], MOST);
    assert_eq!(hit["priceMinAtoms"], LEAST);
    assert!(hit.get("priceAtoms").is_none(), "no fixed price: {hit}");

    // A ceiling keeps a bounded dynamic tool only if its most is within it.
    let at_most = |ceiling: u64| json!({"query": "look", "maxPriceAtoms": ceiling});
    let within = ok(&consumer, "search", at_most(MOST)).await;
    assert_eq!(within["total"], 1, "a ceiling of {MOST}: {within}");
    let below = ok(&consumer, "search", at_most(MOST - 1)).await;
    assert_eq!(
        below,
        json!({"hits": [], "total": 0}),
        "a ceiling of {}: the tool may be quoted {MOST}",
        MOST - 1
    );

    // `get_provider` shows the verified catalog with the bound.
    let got = ok(&consumer, "get_provider", json!({"uid": provider_uid()})).await;
    let shown = got["catalog"]
        .as_array()
        .and_then(|tools| tools.iter().find(|t| t["name"] == "lookup"))
        .unwrap_or_else(|| panic!("{got}"));
    assert_eq!(shown["_meta"]["brmcp/priceMaxAtoms"], MOST, "{got}");
    assert_eq!(shown["_meta"]["brmcp/priceMinAtoms"], LEAST, "{got}");
}

/// A provider that lists `lookup` with the scripted `_meta` and answers every call
/// with a `payment_required` quoting `quote` atoms short `shortfall`, whatever it
/// listed.
#[derive(Clone)]
struct Quoter {
    meta: Value,
    quote: u64,
    shortfall: u64,
    calls: Arc<AtomicUsize>,
}

impl ServerHandler for Quoter {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tool: Tool = serde_json::from_value(json!({
            "name": "lookup",
            "description": "Look things up",
            "inputSchema": {"type": "object"},
            "_meta": self.meta,
        }))
        .unwrap();
        Ok(ListToolsResult::with_all_items(vec![tool]))
    }

    async fn call_tool(
        &self,
        _request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let quote = json!({"error": "payment_required", "tool": "lookup",
            "priceAtoms": self.quote, "balanceAtoms": 0, "shortfallAtoms": self.shortfall,
            "acceptedRails": ["tip"]});
        Ok(CallToolResult::error(vec![ContentBlock::text(quote.to_string())]).into())
    }
}

/// A payer that must never be asked: it counts and refuses.
#[derive(Clone, Default)]
struct NoPayer(Arc<AtomicUsize>);

impl Payer for NoPayer {
    fn pay(&self, _payee: PeerId, _atoms: u64) -> PayFuture<'_> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Err(PayError::Failed(BoxError::from("no payment expected"))) })
    }
}

/// One hostile listing and what the directory must conclude.
struct Case {
    name: &'static str,
    meta: Value,
    quote: u64,
    /// The shortfall quoted with it.
    shortfall: u64,
    /// The test's error, exactly.
    err: &'static str,
    /// Whether the directory calls the tool at all (a malformed listing is not called).
    called: bool,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "a quote above the listed most",
            meta: json!({"brmcp/pricing": "dynamic", "brmcp/priceMaxAtoms": 500}),
            quote: 900,
            shortfall: 900,
            err: "quote 900 atoms is above the 500 atoms at most the tool is listed at",
            called: true,
        },
        Case {
            name: "a quote below the listed least",
            meta: json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 50, "brmcp/priceMaxAtoms": 500}),
            quote: 7,
            shortfall: 7,
            err: "quote 7 atoms is below the 50 atoms at least the tool is listed at",
            called: true,
        },
        Case {
            name: "a shortfall above its quote, which is within the bound",
            meta: json!({"brmcp/pricing": "dynamic", "brmcp/priceMaxAtoms": 500}),
            quote: 40,
            shortfall: 1900,
            err: "quote shortfall 1900 atoms is above its price 40 atoms",
            called: true,
        },
        Case {
            name: "a bound that is a string",
            meta: json!({"brmcp/pricing": "dynamic", "brmcp/priceMaxAtoms": "500"}),
            quote: 40,
            shortfall: 40,
            err: "the tool's listing is malformed: brmcp/priceMaxAtoms is not a whole number of atoms",
            called: false,
        },
        Case {
            name: "a negative least",
            meta: json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": -1}),
            quote: 40,
            shortfall: 40,
            err: "the tool's listing is malformed: brmcp/priceMinAtoms is not a whole number of atoms",
            called: false,
        },
        Case {
            name: "a least above the most",
            meta: json!({"brmcp/pricing": "dynamic", "brmcp/priceMinAtoms": 600, "brmcp/priceMaxAtoms": 500}),
            quote: 550,
            shortfall: 550,
            err: "the tool's listing is malformed: brmcp/priceMinAtoms is above brmcp/priceMaxAtoms",
            called: false,
        },
        Case {
            name: "a bound on a fixed-price tool",
            meta: json!({"brmcp/priceAtoms": 40, "brmcp/priceMaxAtoms": 500}),
            quote: 40,
            shortfall: 40,
            err: "the tool's listing is malformed: a price bound on a tool not priced \"dynamic\"",
            called: false,
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_test_quote_outside_its_listed_bound_or_a_malformed_bound_is_never_paid() {
    for case in cases() {
        let name = case.name;
        let fabric = Fabric::new(12);
        let clock = ManualClock::at_unix(T0);
        let calls = Arc::new(AtomicUsize::new(0));
        let bot = fabric.router(uid(PROVIDER), RouterConfig::server());
        let quoter = Quoter {
            meta: case.meta.clone(),
            quote: case.quote,
            shortfall: case.shortfall,
            calls: calls.clone(),
        };
        bot.serve(move |_: &PeerId| quoter.clone());
        let payer = NoPayer::default();
        let data = tempfile::tempdir().unwrap();
        let directory = Directory::builder()
            .data_dir(data.path())
            .policy(policy())
            .clock(clock.clone())
            .payer(payer.clone())
            .build()
            .unwrap();
        let dir_router = directory.start(fabric.sender(uid(DIR))).unwrap();
        fabric.attach(uid(DIR), &dir_router);
        directory.resume().await.unwrap();
        let provider: Session = ().serve(bot.dial(uid(DIR)).unwrap()).await.unwrap();
        let admin_router = fabric.router(uid(ADMIN), RouterConfig::client());
        let admin: Session = ().serve(admin_router.dial(uid(DIR)).unwrap()).await.unwrap();
        let consumer_router = fabric.router(uid(CONSUMER), RouterConfig::client());
        let consumer: Session = ().serve(consumer_router.dial(uid(DIR)).unwrap()).await.unwrap();

        let status = ok(&provider, "register", bounded_registration("lookup")).await;
        assert_eq!(status["state"], "awaiting_funding", "{name}: {status}");
        let funded = 1000 + BUDGET.unsigned_abs();
        directory
            .harness()
            .record_tip(Tip {
                seq: 1,
                caller: uid(PROVIDER),
                matoms: funded * 1000,
            })
            .await
            .unwrap();
        let mut parked = None;
        for _ in 0..1000 {
            let entry = directory.entry(&uid(PROVIDER)).unwrap();
            if entry.reg.as_ref().map(|r| r.state) == Some(State::PendingReview) {
                directory.settle().await;
                parked = directory.entry(&uid(PROVIDER)).unwrap().reg;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let reg = parked.unwrap_or_else(|| panic!("{name}: never reviewed"));
        assert_eq!(reg.test_err, case.err, "{name}");
        assert_eq!(reg.paid_atoms, 0, "{name}");
        assert_eq!(payer.0.load(Ordering::SeqCst), 0, "{name}: nothing paid");
        let expected_calls = usize::from(case.called);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            expected_calls,
            "{name}: the tool was called {expected_calls} times"
        );

        // The provider and the operator read the same reason; it cannot be approved,
        // and nothing of it is searchable.
        let status = ok(&provider, "my_status", json!({})).await;
        assert_eq!(status["state"], "pending_review", "{name}: {status}");
        assert_eq!(status["note"], case.err, "{name}: {status}");
        let pending = ok(&admin, "pending_registrations", json!({})).await;
        assert_eq!(
            pending["registrations"][0]["testOutcome"], "failed",
            "{name}: {pending}"
        );
        assert_eq!(
            pending["registrations"][0]["testErr"], case.err,
            "{name}: {pending}"
        );
        let refusal = refused(&admin, "approve", json!({"uid": provider_uid()})).await;
        assert_eq!(refusal, "verification has not passed", "{name}");
        let hits = ok(&consumer, "search", json!({})).await;
        assert_eq!(hits, json!({"hits": [], "total": 0}), "{name}");
        // Only the fee was taken: the whole test budget is the provider's still.
        let left = directory
            .harness()
            .balance_matoms(uid(PROVIDER))
            .await
            .unwrap();
        assert_eq!(left, BUDGET.unsigned_abs() * 1000, "{name}");
        directory.close().await;
    }
}
